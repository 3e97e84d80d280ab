"""One training run of the common GPT in one precision: the step, the metrics, the CSV rows.

The step (every mode the same, so modes differ only in arithmetic):
    for each micro-batch: forward under the run's context (autocast / emulation / FP8 autocast),
        loss / grad_accum, backward (GradScaler-scaled for fp16), FP8 delayed-scaling update
        (after each backward, when TransformerEngine would do it);
    unscale (fp16), grad norms, clip to --clip with the norm already computed, AdamW step;
    param and update norms.
The learning rate is a pure function of the step (linear warm-up, cosine decay to 10%), and the
batch is a pure function of (seed, step) (common.data), so every mode sees the same tokens.
Each step writes one row to steps.csv; every --stats-every steps every low-precision tensor
(input, weight, output gradient of each FP8 linear) writes a row to fp8.csv.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

import backends
from common.data import TokenData
from common.dist import DistInfo, print0
from common.model import GPTConfig, flops_per_token, lm_loss
from common.results import ResultsWriter
from common.timing import StepTimer
from fp8_linear import Fp8Linear, fp8_modules, update_scales
from health import NormTracker, SavedActivations, memory_mib
from precision import LOW, Prepared, RunSpec

VAL_SEED = 1234  # validation batches are the same for every run and seed

STEP_COLUMNS = ["run", "precision", "backend", "seed", "step", "loss", "val_loss", "grad_norm", "param_norm",
                "update_ratio", "lr", "tokens_per_s", "step_time_s", "peak_mem_MiB", "alloc_MiB", "reserved_MiB",
                "rss_peak_MiB",
                "saved_act_MiB", "loss_scale", "mfu", "nonfinite", "batch", "grad_accum", "seq_len", "d_model",
                "n_layers", "tokens_per_step"]
FP8_COLUMNS = ["run", "precision", "backend", "seed", "step", "module", "role", "format", "amax", "scale", "scale_kind",
               "underflow_frac", "saturation_frac"]


@dataclass
class Writers:
    steps: ResultsWriter
    fp8: ResultsWriter
    extra: dict[str, ResultsWriter] = field(default_factory=dict)


def lr_at(step: int, total: int, peak: float, warmup: int, min_frac: float = 0.1) -> float:
    """Linear warm-up to `peak`, then cosine decay to min_frac * peak at the last step."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup - 1)
    return peak * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


class Trainer:
    def __init__(self, cfg: Any, spec: RunSpec, prep: Prepared, env: DistInfo, data: TokenData,
                 model_cfg: GPTConfig, writers: Writers | None, peak_tflops: float | None = None):
        self.cfg, self.spec, self.p, self.env, self.data, self.mcfg = cfg, spec, prep, env, data, model_cfg
        self.w = writers
        raw = prep.raw
        decay = [p for p in raw.parameters() if p.dim() >= 2]
        no_decay = [p for p in raw.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)
        self.norms = NormTracker(raw)
        self.fp8 = [m for _, m in fp8_modules(raw)]
        self.saved = SavedActivations(raw)
        self.tokens_per_step = cfg.batch * cfg.seq_len
        self.flops_per_token = flops_per_token(model_cfg, cfg.seq_len)
        mfu_ok = spec.precision in ("bf16", "fp16") and env.device.type == "cuda"  # no MFU for FP8 (torchtitan)
        self.peak_tflops = peak_tflops if mfu_ok else None
        self.step_index = 0

    # ---- one optimizer step ------------------------------------------------------------------
    def _micro_batches(self, step: int):
        cfg, env = self.cfg, self.env
        micro = cfg.batch // cfg.grad_accum
        for i in range(cfg.grad_accum):
            x, y = self.data.batch("train", step * cfg.grad_accum + i, micro, cfg.seq_len, seed=self.spec.seed,
                                   rank=env.rank, world_size=env.world_size)
            yield x.to(env.device, non_blocking=True), y.to(env.device, non_blocking=True)

    def forward_backward(self, step: int, stats: bool) -> torch.Tensor:
        """Forward and backward over the step's micro-batches; returns the mean loss (device tensor)."""
        p, cfg = self.p, self.cfg
        total = torch.zeros((), device=self.env.device)
        for x, y in self._micro_batches(step):
            with p.context():
                loss = lm_loss(p.model(x), y) / cfg.grad_accum
            (p.scaler.scale(loss) if p.scaler else loss).backward()
            update_scales(self.fp8)  # TE: after each forward/backward, with amaxes reduced over ranks
            total += loss.detach()
        return total

    def train_step(self, step: int) -> dict[str, Any]:
        cfg, p, dev = self.cfg, self.p, self.env.device
        lr = self.lr(step)
        for g in self.opt.param_groups:
            g["lr"] = lr
        stats = cfg.stats_every > 0 and step % cfg.stats_every == 0
        for m in self.fp8:
            m.collect_stats = stats
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        with StepTimer(dev) as timer:
            self.opt.zero_grad(set_to_none=True)
            if stats:
                with self.saved.hooks():
                    loss = self.forward_backward(step, stats)
            else:
                loss = self.forward_backward(step, stats)
            if p.scaler:
                p.scaler.unscale_(self.opt)
            g_sq = self.norms.grad_sq()
            grad_norm = g_sq.sum().sqrt()
            torch.nn.utils.clip_grads_with_norm_(self.norms.params, cfg.clip, grad_norm)
            self.norms.snapshot()
            if p.scaler:
                p.scaler.step(self.opt)  # skips the step itself if the grads hold Inf/NaN
                p.scaler.update()
            elif torch.isfinite(loss) and torch.isfinite(grad_norm):
                self.opt.step()
            prev_sq, now_sq, upd_sq = self.norms.param_and_update_sq()
        if self.env.world_size > 1:
            dist.all_reduce(loss)
            loss /= self.env.world_size
        vals = torch.stack([loss.float(), grad_norm, now_sq.sum().sqrt(), upd_sq.sum().sqrt() /
                            prev_sq.sum().sqrt()]).tolist()  # the one host sync of the step
        row = dict(loss=vals[0], grad_norm=vals[1], param_norm=vals[2], update_ratio=vals[3], lr=lr,
                   step_time_s=timer.elapsed_s, tokens_per_s=self.tokens_per_step / timer.elapsed_s,
                   nonfinite=not (math.isfinite(vals[0]) and math.isfinite(vals[1])),
                   loss_scale=p.scaler.get_scale() if p.scaler else None,
                   saved_act_MiB=self.saved.bytes / 2**20 if stats else None)
        if self.peak_tflops:
            tps_dev = row["tokens_per_s"] / self.env.world_size
            row["mfu"] = tps_dev * self.flops_per_token / (self.peak_tflops * 1e12)
        row.update(memory_mib(dev))
        return row

    def lr(self, step: int) -> float:
        return lr_at(step, self.cfg.steps, self.cfg.lr, self.cfg.warmup)

    @torch.no_grad()
    def evaluate(self) -> float:
        cfg, p, env = self.cfg, self.p, self.env
        p.raw.eval()
        total = torch.zeros((), device=env.device)
        micro = cfg.batch // cfg.grad_accum
        for i in range(cfg.val_batches):
            x, y = self.data.batch("val", i, micro, cfg.seq_len, seed=VAL_SEED, rank=env.rank,
                                   world_size=env.world_size)
            with p.context():
                total += lm_loss(p.model(x.to(env.device)), y.to(env.device)).float()
        p.raw.train()
        if env.world_size > 1:
            dist.all_reduce(total)
            total /= env.world_size
        return total.item() / cfg.val_batches

    # ---- FP8 state ---------------------------------------------------------------------------
    def fp8_state(self) -> list[tuple[str, str, str, torch.Tensor, str, torch.Tensor | None]]:
        """(module, role, format, [amax, scale], scale_kind, [underflow, saturation] or None) per tensor."""
        out = []
        grad_fmt = "e5m2"
        for name in self.p.low_modules:
            m = self.p.raw.get_submodule(name)
            last = getattr(m, "last", None)
            if last is None:
                continue
            kind = getattr(m, "scale_kind", "delayed" if isinstance(m, Fp8Linear) and not m.current else "current")
            frac = m.fractions if isinstance(m, Fp8Linear) else None
            fmts = (("e4m3", "e4m3", grad_fmt) if self.spec.precision == "fp8" else (self.spec.precision,) * 3)
            for r, role in enumerate(("input", "weight", "grad_output")):
                out.append((name, role, fmts[r], last[r], kind, None if frac is None else frac[r]))
        if self.p.backend == "te" and not out:
            for name, role, a, s in backends.te_delayed_state(self.p.raw):
                out.append((name, role, "e5m2" if role == "grad_output" else "e4m3", torch.stack([a, s]), "delayed",
                            None))
        return out

    def fp8_rows(self, step: int, with_fractions: bool) -> list[dict[str, Any]]:
        state = self.fp8_state()
        if not state:
            return []
        vals = torch.stack([torch.cat([s[3].float(), (s[5] if s[5] is not None and with_fractions
                                                        else torch.full((2,), float("nan"), device=s[3].device))])
                            for s in state]).tolist()
        rows = []
        for (name, role, fmt, _, kind, _), v in zip(state, vals):
            rows.append(dict(step=step, module=name, role=role, format=fmt, amax=v[0], scale=v[1], scale_kind=kind,
                             underflow_frac=None if math.isnan(v[2]) else v[2],
                             saturation_frac=None if math.isnan(v[3]) else v[3]))
        return rows

    # ---- the loop ----------------------------------------------------------------------------
    def run_ids(self) -> dict[str, Any]:
        s = self.spec
        return dict(run=s.name, precision=s.precision, backend=self.p.backend, seed=s.seed)

    def run(self, start: int = 0) -> None:
        cfg, ids = self.cfg, self.run_ids()
        shape = dict(batch=cfg.batch, grad_accum=cfg.grad_accum, seq_len=cfg.seq_len, d_model=self.mcfg.d_model,
                     n_layers=self.mcfg.n_layers, tokens_per_step=self.tokens_per_step)
        for step in range(start, cfg.steps):
            row = self.train_step(step)
            if (cfg.val_every and (step + 1) % cfg.val_every == 0) or step == cfg.steps - 1:
                row["val_loss"] = self.evaluate()
            if self.w is not None:
                self.w.steps.write({**ids, **shape, "step": step, **row})
                if self.spec.precision in LOW and cfg.stats_every and step % cfg.stats_every == 0:
                    for r in self.fp8_rows(step, with_fractions=True):
                        self.w.fp8.write({**ids, **r})
            self.step_index = step + 1
            if step % cfg.log_every == 0 or step == cfg.steps - 1 or "val_loss" in row:
                val = f"  val {row['val_loss']:.4f}" if "val_loss" in row else ""
                print0(f"{ids['run']:>22s} step {step:5d}  loss {row['loss']:.4f}{val}  "
                       f"{row['tokens_per_s']:10,.0f} tok/s  {row['step_time_s'] * 1e3:7.1f} ms")
