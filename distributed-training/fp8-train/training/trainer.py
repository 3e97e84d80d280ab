"""One training run of the common GPT in one precision: the step, NaN recovery, checkpoints.

The step (every mode the same, so modes differ only in arithmetic), in named phases:
    begin          untimed: lr, what this step records, the weights before the update (for the
                   update ratio), the amax probes' weight reads, TE's scales for this step;
    forward_backward   for each micro-batch: forward under the run's context (autocast / emulation /
                   FP8 autocast), loss / grad_accum, backward (GradScaler-scaled for fp16), FP8
                   delayed-scaling update (after each backward, when TransformerEngine would do it);
    grad_norm      unscale (fp16) and the global gradient norm;
    step_or_recover    if loss and grad norm are finite: clip to --clip with the norm already
                   computed and take the AdamW step (on CUDA the clip factor is applied inside the
                   fused AdamW kernel, one pass over the gradients fewer); else the --on-nan policy:
        skip       no optimizer step (fp16: GradScaler skips and backs off the loss scale), and the
                   non-finite amaxes are scrubbed from the FP8 histories so the scales do not freeze
        reduce-lr  the same, and the learning rate is multiplied by --nan-lr-factor from now on
        rollback   restore the last good checkpoint (weights, optimizer, GradScaler, FP8 scaling
                   state) and continue with the next batch (the bad one is not retried)
        stop       checkpoint and end the run (exit code 3)
    finish         untimed: param and update norms, one host sync, the CSV row.
Only forward_backward, grad_norm and step_or_recover are timed: what a training run without this
lab's monitoring would run. One exception: a compiled model cannot add hooks per step, so its
activation and input-amax probes ride inside its forward on every step; bench.py's monitor part
measures what all the monitoring costs.
Counters of NaN steps and skipped steps go into every row (Megatron logs the same two).
The learning rate is a pure function of the step (linear warm-up, cosine decay to 10%), and the
batch a pure function of (seed, step) (common.data): every mode sees the same tokens, and a run
resumed from a checkpoint continues bit for bit on CPU.
"""

from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from common.config import config_dict
from common.data import TokenData
from common.dist import DistInfo
from common.model import GPTConfig, flops_per_token, lm_loss
from common.timing import StepTimer
from health.metrics import ActivationProbe, GradSNR, NormTracker, SavedActivations, memory_mib
from precision import fp8_state
from precision.fp8_linear import fp8_modules, scrub_histories, update_scales
from precision.modes import RunSpec
from precision.prepare import Prepared
from training import checkpoint
from training.faults import Injector
from training.settings import OPERATIONAL, Config

VAL_SEED = 1234  # validation batches are the same for every run and seed


def lr_at(step: int, total: int, peak: float, warmup: int, min_frac: float = 0.1) -> float:
    """Linear warm-up to `peak`, then cosine decay to min_frac * peak at the last step."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup - 1)
    return peak * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


class StopRun(Exception):
    pass


@dataclass(frozen=True)
class StepPlan:
    """What one step records besides training, decided before it starts."""
    lr: float
    fractions: bool  # FP8 underflow/saturation counts and saved-activation bytes (--fractions-every)
    probes: bool  # amax probes of the backends without scaling state (--stats-every)
    health: bool  # per-layer norms and activation ranges (--health-every)
    snr: bool  # gradient SNR across micro-batches (health steps with --grad-accum > 1)
    faults: tuple[str, ...]  # injected this step


class Trainer:
    def __init__(self, cfg: Config, spec: RunSpec, prep: Prepared, env: DistInfo, data: TokenData,
                 model_cfg: GPTConfig, peak_tflops: float | None = None, ckpt_path: Path | None = None,
                 faults: list | None = None):
        self.cfg, self.spec, self.p, self.env, self.data, self.mcfg = cfg, spec, prep, env, data, model_cfg
        raw = prep.raw
        decay = [p for p in raw.parameters() if p.dim() >= 2]
        no_decay = [p for p in raw.parameters() if p.dim() < 2]
        # fused=True on CUDA: one kernel pass over all parameters instead of a dozen foreach passes.
        fused = env.device.type == "cuda"
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)
        self.monitor = cfg.monitor
        self.norms = NormTracker(raw)
        # Clipping folded into the fused AdamW kernel, as DeepSpeed folds its clip factor into the
        # optimizer's unscale: the kernel divides each gradient by grad_scale while it reads it anyway.
        # Not with a GradScaler (it owns grad_scale) nor with sharded parameters (a plain tensor factor
        # beside DTensor gradients).
        self.fused_clip = fused and prep.scaler is None and not self.norms.sharded
        self.acts = ActivationProbe(raw, always=prep.compiled and self.monitor and cfg.health_every > 0)
        self.snr = GradSNR(self.norms.params, cfg.grad_accum, self.norms.sharded) if cfg.grad_accum > 1 else None
        self.fp8 = [m for _, m in fp8_modules(raw)]
        self.saved = SavedActivations(raw)
        self.injector = Injector(raw, faults, prep.low_modules, cfg.spike_scale, cfg.overflow_scale) if faults else None
        self.ckpt_path = ckpt_path
        self.tokens_per_step = cfg.batch * cfg.seq_len
        self.flops_per_token = flops_per_token(model_cfg, cfg.seq_len)
        mfu_ok = spec.precision in ("bf16", "fp16") and env.device.type == "cuda"  # no MFU for FP8 (torchtitan)
        self.peak_tflops = peak_tflops if mfu_ok else None
        self.lr_factor, self.nan_steps, self.skipped_steps = 1.0, 0, 0
        self.stop_requested = False
        self._fp8_state: list | None = None
        self.layer_stats: dict[str, dict[str, float]] = {}

    # ---- one optimizer step ------------------------------------------------------------------
    def _micro_batches(self, step: int):
        cfg, env = self.cfg, self.env
        micro = cfg.batch // cfg.grad_accum
        for i in range(cfg.grad_accum):
            x, y = self.data.batch("train", step * cfg.grad_accum + i, micro, cfg.seq_len, seed=self.spec.seed,
                                   rank=env.rank, world_size=env.world_size)
            yield x.to(env.device, non_blocking=True), y.to(env.device, non_blocking=True)

    def forward_backward(self, step: int, snr: bool) -> torch.Tensor:
        """Forward and backward over the step's micro-batches; returns the mean loss (device tensor)."""
        p, cfg = self.p, self.cfg
        total = torch.zeros((), device=self.env.device)
        boost = self.injector.loss_scale() if self.injector else 1.0
        for x, y in self._micro_batches(step):
            with p.context():
                loss = lm_loss(p.model(x), y) / cfg.grad_accum
            scaled = loss * boost if boost != 1.0 else loss  # spike@STEP: that batch's gradients x boost
            (p.scaler.scale(scaled) if p.scaler else scaled).backward()
            update_scales(self.fp8)  # TE: after each forward/backward, amaxes reduced over ranks
            if snr:
                self.snr.after_micro_batch()
            total += loss.detach()
        return total

    def train_step(self, step: int) -> dict[str, Any]:
        """One optimizer step: untimed set-up, the timed phases, then one host sync for the row."""
        plan = self.begin(step)
        with StepTimer(self.env.device) as timer:
            self.opt.zero_grad(set_to_none=True)
            with self.recording(plan):
                loss = self.forward_backward(step, plan.snr)
            grad_norm, g_sq = self.grad_norm()
            stepped, action = self.step_or_recover(step, loss, grad_norm)
        return self.finish(step, plan, timer.elapsed_s, loss, grad_norm, g_sq, stepped, action)

    def begin(self, step: int) -> StepPlan:
        """Everything decided or read before the step: nothing here is timed."""
        cfg, p = self.cfg, self.p
        lr = self.lr(step) * self.lr_factor
        for g in self.opt.param_groups:
            g["lr"] = lr
        # Underflow/saturation counts and saved-activation bytes cost a few passes over every FP8 operand:
        # taken every --fractions-every steps (amax and scale of stateful backends are free: every step).
        health = self.monitor and cfg.health_every > 0 and step % cfg.health_every == 0
        faults = tuple(self.injector.arm(step)) if self.injector else ()
        plan = StepPlan(lr=lr, fractions=self.fractions_due(step), probes=self.monitor and self.stats_due(step),
                        health=health, snr=health and self.snr is not None, faults=faults)
        for m in self.fp8:
            m.collect_stats = plan.fractions
        if self.env.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.env.device)
        if self.monitor:
            self.norms.snapshot()  # the weights this step's update starts from (the update ratio)
        if p.probe is not None:
            p.probe.arm(plan.probes)
            if plan.probes:
                p.probe.weights()  # the weights this step multiplies: read before its update
        if p.backend.library_state is not None:
            p.backend.library_state.snapshot(p.raw)  # TE's scales after the step are the next step's
        return plan

    def recording(self, plan: StepPlan) -> ExitStack:
        """The hooks a recording step runs during forward/backward (activation ranges, saved bytes)."""
        stack = ExitStack()
        if plan.health:
            stack.enter_context(self.acts)
        if plan.fractions:
            stack.enter_context(self.saved.hooks())
        return stack

    def grad_norm(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(global gradient norm, squared norms per layer group), after unscaling fp16 gradients."""
        if self.p.scaler:
            self.p.scaler.unscale_(self.opt)
        g_sq = self.norms.grad_sq()
        return g_sq.sum().sqrt(), g_sq

    def step_or_recover(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> tuple[bool, str]:
        """The finite check, then the optimizer step or the --on-nan policy: (stepped, action taken)."""
        p = self.p
        ok = torch.stack([torch.isfinite(loss), torch.isfinite(grad_norm)]).float()
        if self.env.world_size > 1:  # every rank must take the same branch (a rollback has collectives)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        loss_ok, grad_ok = (v > 0 for v in ok.tolist())
        if loss_ok and grad_ok:
            self.clip_and_step(grad_norm)
            return True, ""
        if loss_ok and p.scaler is not None:
            # fp16 overflow in the gradients only: routine for GradScaler (it skips and halves the scale)
            p.scaler.step(self.opt)
            p.scaler.update()
            self.skipped_steps += 1
            return False, "loss-scale backoff"
        return False, self.recover(step)

    def clip_and_step(self, grad_norm: torch.Tensor) -> None:
        """Clip to --clip with the norm already computed (torch's rule: x min(1, clip / (norm + 1e-6))), step."""
        p, clip = self.p, self.cfg.clip
        if self.fused_clip:
            self.opt.grad_scale = torch.clamp((grad_norm + 1e-6) / clip, min=1.0)  # gradients / this, in-kernel
            self.opt.step()
            del self.opt.grad_scale
            return
        torch.nn.utils.clip_grads_with_norm_(self.norms.params, clip, grad_norm)
        if p.scaler:
            p.scaler.step(self.opt)
            p.scaler.update()
        else:
            self.opt.step()

    def finish(self, step: int, plan: StepPlan, elapsed_s: float, loss: torch.Tensor, grad_norm: torch.Tensor,
               g_sq: torch.Tensor, stepped: bool, action: str) -> dict[str, Any]:
        """After the timed region: norms of the update, one host sync, the step's row."""
        p, dev = self.p, self.env.device
        if self.injector:
            self.injector.disarm()
        if p.probe is not None:
            p.probe.arm(False)  # an evaluation forward must not overwrite what this step recorded
        if self.env.world_size > 1:
            dist.all_reduce(loss)
            loss /= self.env.world_size
        vec = [loss.float(), grad_norm]
        if self.monitor:
            if stepped:
                prev_sq, now_sq, upd_sq = self.norms.param_and_update_sq()
            else:
                now_sq = prev_sq = self.norms.param_sq()
                upd_sq = torch.zeros_like(now_sq)
            vec += [now_sq.sum().sqrt(), upd_sq.sum().sqrt() / prev_sq.sum().sqrt()]
            if plan.snr:
                vec.append(self.snr.result(g_sq.sum()))
        vals = torch.stack(vec).tolist()  # the one host sync of the step
        row = dict(loss=vals[0], grad_norm=vals[1], lr=plan.lr, step_time_s=elapsed_s,
                   tokens_per_s=self.tokens_per_step / elapsed_s,
                   nonfinite=not stepped and not action.startswith("loss-scale"),
                   loss_scale=p.scaler.get_scale() if p.scaler else None,
                   saved_act_MiB=self.saved.bytes / 2**20 if plan.fractions else None, nan_steps=self.nan_steps,
                   skipped_steps=self.skipped_steps, action=action,
                   injected="+".join(f"{k}@{step}" for k in plan.faults) or None)
        if self.monitor:
            row.update(param_norm=vals[2], update_ratio=vals[3], grad_snr=vals[4] if plan.snr else None)
            if plan.health:
                self.layer_stats = self._layer_stats(g_sq, prev_sq, now_sq, upd_sq)
        if self.peak_tflops:
            row["mfu"] = row["tokens_per_s"] / self.env.world_size * self.flops_per_token / (self.peak_tflops * 1e12)
        row.update(memory_mib(dev))
        return row

    def fractions_due(self, step: int) -> bool:
        every = self.cfg.fractions_every
        return every > 0 and step % every == 0

    def stats_due(self, step: int) -> bool:
        return self.cfg.stats_every > 0 and step % self.cfg.stats_every == 0

    def _layer_stats(self, g_sq, prev_sq, now_sq, upd_sq) -> dict[str, dict[str, float]]:
        n = len(self.norms.groups)
        v = torch.cat([g_sq, now_sq, upd_sq, prev_sq, self.acts.amax]).tolist()
        out = {g: dict(grad_norm=math.sqrt(v[i]), param_norm=math.sqrt(v[n + i]),
                       update_ratio=math.sqrt(v[2 * n + i]) / math.sqrt(v[3 * n + i]) if v[3 * n + i] else 0.0)
               for i, g in enumerate(self.norms.groups)}
        for j, name in enumerate(self.acts.names):
            out.setdefault(name, {})["act_amax"] = v[4 * n + j]
        return out

    def recover(self, step: int) -> str:
        """Apply --on-nan to a step whose loss or gradients are not finite; returns what was done."""
        cfg, p = self.cfg, self.p
        self.nan_steps += 1
        self.skipped_steps += 1
        policy = cfg.on_nan
        if policy in ("skip", "reduce-lr", "stop"):
            if p.scaler:  # GradScaler's own response: skip the step, back off the loss scale
                p.scaler.step(self.opt)
                p.scaler.update()
            self.scrub_fp8()
        if policy == "skip":
            return "skipped the optimizer step"
        if policy == "reduce-lr":
            self.lr_factor *= cfg.nan_lr_factor
            return f"skipped the optimizer step; learning rate x{self.lr_factor:g} from now on"
        if policy == "rollback":
            if self.ckpt_path is None:
                raise RuntimeError("--on-nan rollback needs checkpoints (--ckpt-every > 0)")
            state = checkpoint.load(self.ckpt_path, self.fingerprint(), allow_pickle=self.p.backend.checkpoint_pickles)
            self.restore(state, full=False)
            return f"rolled back to the checkpoint taken after step {state['step'] - 1}; continuing with the next batch"
        self.stop_requested = True  # the loop logs this step, checkpoints and ends the run
        return "stopped the run (checkpoint written; inspect, then --resume)"

    def scrub_fp8(self) -> None:
        scrub_histories(self.fp8)
        if self.p.backend.library_state is not None:
            self.p.backend.library_state.scrub(self.p.raw)

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
    def fp8_state(self) -> list[fp8_state.Fp8Tensor]:
        """Every FP8 tensor's (amax, scale used) after the last step, as device tensors."""
        if self.p.backend.library_state is not None:  # TE creates its state at the first forward
            return fp8_state.find(self.p, self.spec.precision)
        if self._fp8_state is None:  # the modules and their state buffers are fixed: look them up once
            self._fp8_state = fp8_state.find(self.p, self.spec.precision)
        return self._fp8_state

    def fp8_rows(self, step: int, with_fractions: bool) -> list[dict[str, Any]]:
        return fp8_state.rows(self.fp8_state(), step, with_fractions)

    # ---- checkpoints -------------------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed: every setting that changes this run's result (the config
        but its operational flags, settings.OPERATIONAL: --lr, --steps, --inject, the precision map, ...), the run,
        the backend that ran it, the model, the data and the world size."""
        measured = {k: v for k, v in config_dict(self.cfg).items() if k not in OPERATIONAL}
        return {**measured, "run": self.spec.name, "backend": self.p.backend.name,
                "model": [self.mcfg.vocab_size, self.mcfg.d_model, self.mcfg.n_layers, self.mcfg.n_heads,
                          self.mcfg.seq_len], "low_modules": list(self.p.low_modules),
                "data_fingerprint": self.data.fingerprint, "world_size": self.env.world_size}

    def checkpoint_state(self, next_step: int, health: dict | None = None) -> dict[str, Any]:
        model_sd, opt_sd = checkpoint.model_and_optimizer_state(self.p.raw, self.opt, self.env.world_size)
        return {"fingerprint": self.fingerprint(), "step": next_step, "model": model_sd, "optimizer": opt_sd,
                "scaler": self.p.scaler.state_dict() if self.p.scaler else None,
                "counters": {"lr_factor": self.lr_factor, "nan_steps": self.nan_steps,
                             "skipped_steps": self.skipped_steps},
                "rng": checkpoint.rng_state(), "data": {"seed": self.spec.seed, "next_step": next_step},
                "health": health or {}}

    def save_checkpoint(self, next_step: int, health: dict | None = None) -> None:
        if self.ckpt_path is None:
            return
        state = self.checkpoint_state(next_step, health)
        if self.env.is_main:
            checkpoint.save(self.ckpt_path, state)
        if self.env.world_size > 1:
            dist.barrier()

    def restore(self, state: dict[str, Any], full: bool = True) -> None:
        """Load a checkpoint into this run. full=False (rollback) keeps counters, health and RNG."""
        checkpoint.load_model_and_optimizer(self.p.raw, self.opt, state["model"], state["optimizer"],
                                            self.env.world_size)
        self.norms.last_sq = None  # the weights changed outside the optimizer
        if self.p.scaler and state["scaler"]:
            self.p.scaler.load_state_dict(state["scaler"])
        if full:
            c = state["counters"]
            self.lr_factor, self.nan_steps, self.skipped_steps = c["lr_factor"], c["nan_steps"], c["skipped_steps"]
            checkpoint.set_rng_state(state["rng"])
