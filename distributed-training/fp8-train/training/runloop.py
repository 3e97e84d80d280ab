"""The loop around the step: CSV rows, alerts and events, checkpoints, dashboard, progress bar.

Per step: one row to steps.csv; alerts (health/alerts.py) to events.csv and the terminal. Every
--stats-every steps the FP8 tensors' amax and scale to fp8.csv (underflow/saturation fractions
every --fractions-every); every --health-every steps the per-layer norms, update ratios and
activation ranges to layers.csv; every --ckpt-every steps (healthy steps only: the last
checkpoint is always a good one) an atomic checkpoint; every --dashboard-every steps, but not
more often than the page reloads (--dashboard-refresh seconds), the run's HTML dashboard. The
same scalars and alerts go to TensorBoard events as they are written (health/tblog.py; `tensorboard
--logdir fp8-train/runs`). SIGTERM is honoured after the step in flight: checkpoint, dashboard,
clean exit. Rows already in the CSVs (a resumed run replays the steps after its last checkpoint)
are not written twice; TensorBoard drops its own events from the resumed step on (purge_step).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from tqdm import tqdm

from common.dist import print0
from common.results import NoWriter, ResultsWriter
from health.alerts import Alert, AlertEngine
from health.tblog import TensorBoardLog
from precision import backends
from precision.modes import LOW
from training.checkpoint import GracefulStop
from training.trainer import StopRun, Trainer

# `precision_backend` is what ran the precision (torch, te, torchao, native, emulated) and
# `precision_backend_version` its package and version (backends.backend_version); the provenance
# column `backend` is the process group's (gloo, nccl). `compiled`: the model ran under torch.compile.
STEP_COLUMNS = ["run", "precision", "precision_backend", "precision_backend_version", "compiled", "seed", "step",
                "loss", "val_loss", "grad_norm", "param_norm", "update_ratio", "lr", "tokens_per_s", "step_time_s",
                "peak_mem_MiB", "alloc_MiB", "reserved_MiB", "rss_peak_MiB", "saved_act_MiB", "loss_scale", "mfu",
                "grad_snr", "nonfinite", "nan_steps", "skipped_steps", "action", "injected", "batch", "grad_accum",
                "seq_len", "d_model", "n_layers", "tokens_per_step"]
FP8_COLUMNS = ["run", "precision", "precision_backend", "precision_backend_version", "seed", "step", "module", "role",
               "format", "amax", "scale", "scale_kind", "underflow_frac", "saturation_frac"]
LAYER_COLUMNS = ["run", "step", "layer", "grad_norm", "param_norm", "update_ratio", "act_amax"]
EVENT_COLUMNS = ["run", "step", "kind", "severity", "metric", "value", "threshold", "message", "action"]


class Writers(NamedTuple):
    """A run's CSVs, in its run plan's table order (runner.TABLES): rank 0's writers, NoWriters on the other ranks."""

    steps: ResultsWriter | NoWriter
    fp8: ResultsWriter | NoWriter
    layers: ResultsWriter | NoWriter
    events: ResultsWriter | NoWriter
    bound: ResultsWriter | NoWriter | None = None  # bound.csv, where the plan measures the bound

    def of_runs(self) -> tuple[ResultsWriter | NoWriter, ...]:
        """The tables whose rows belong to one run, keyed by its name (bound.csv's rows are the model's)."""
        return self.steps, self.fp8, self.layers, self.events


class Preempted(Exception):
    pass


class RunLoop:
    def __init__(self, tr: Trainer, writers: Writers | None, alerts: AlertEngine, dash_path: Path | None):
        self.tr, self.w, self.alerts, self.dash_path = tr, writers, alerts, dash_path
        self.cfg = tr.cfg
        s = tr.spec
        self.ids = dict(run=s.name, precision=s.precision, precision_backend=tr.p.backend.name,
                        precision_backend_version=backends.backend_version(tr.p.backend, s.precision), seed=s.seed)
        self.shape = dict(compiled=tr.p.compiled, batch=self.cfg.batch, grad_accum=self.cfg.grad_accum,
                          seq_len=self.cfg.seq_len,
                          d_model=tr.mcfg.d_model, n_layers=tr.mcfg.n_layers, tokens_per_step=tr.tokens_per_step)
        self.last_alert = ""
        self.tb: TensorBoardLog | None = None  # opened at the first step this process writes (its purge step)
        self.bar: tqdm | None = None
        self.dash_time, self.dash_cost = time.monotonic(), 0.0
        if dash_path is not None:  # pandas: imported at start-up, not inside the first step that draws
            from health import dashboard  # noqa: F401

    def _write(self, writer, *rows: dict[str, Any]) -> None:
        """Append rows not already in the file (a resumed run replays steps), with one fsync."""
        if writer is not None:
            writer.write_many([r for r in rows if not writer.done(r)])

    def _alert(self, a: Alert) -> None:
        self._write(self.w.events if self.w else None, {"run": self.ids["run"], **a.row()})
        self.last_alert = f"{a.kind}@{a.step}"
        text = f"[{a.severity}] {self.ids['run']} step {a.step} {a.kind}: {a.message}" + \
               (f" -> {a.action}" if a.action else "")
        if not self.tr.env.is_main:  # every rank sees the alert (and acts on it); the job tells it once
            return
        if self.bar is not None and not self.bar.disable:  # tqdm.write prints even for a disabled bar
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def health_state(self) -> dict[str, Any]:
        return {"alerts": self.alerts.state_dict(), "last_alert": self.last_alert}

    def load_health(self, h: dict[str, Any]) -> None:
        if h:
            self.alerts.load_state_dict(h["alerts"])
            self.last_alert = h.get("last_alert", "")

    def dashboard(self, live: bool) -> None:
        if self.dash_path is not None and self.tr.env.is_main and self.w is not None:
            from health import dashboard  # noqa: F401
            t0 = time.monotonic()
            dashboard.write_run_dashboard(self.w.steps.path.parent, [self.ids["run"]], self.dash_path,
                                          refresh_s=self.cfg.dashboard_refresh if live else None)
            self.dash_time = time.monotonic()
            self.dash_cost = self.dash_time - t0

    def run(self, start: int, stop: GracefulStop) -> None:
        cfg, tr = self.cfg, self.tr
        main = tr.env.is_main
        self.bar = tqdm(total=cfg.steps, initial=start, desc=self.ids["run"], dynamic_ncols=True, leave=True,
                        disable=None if (cfg.progress and main) else True)  # None: off when not a terminal
        try:
            for step in range(start, cfg.steps):
                self.one_step(step)
                if tr.stop_requested:  # --on-nan stop
                    self.checkpoint(step + 1)
                    self.dashboard(live=False)
                    raise StopRun(f"stopped at step {step} (--on-nan stop); checkpoint written, resume with --resume")
                if self._stop_requested(stop):
                    self.checkpoint(step + 1)
                    self.dashboard(live=False)
                    raise Preempted(f"SIGTERM: checkpoint written at step {step + 1} of {self.ids['run']}; "
                                    "run again with --resume to continue")
            if tr.ckpt_path is not None:
                self.checkpoint(cfg.steps)
            self.dashboard(live=False)
        finally:
            self.bar.close()
            self.close()

    def checkpoint(self, next_step: int) -> None:
        """The trainer's checkpoint, with every TensorBoard event before it on disk (a resume purges after it)."""
        if self.tb is not None:
            self.tb.flush()
        self.tr.save_checkpoint(next_step, self.health_state())

    def tensorboard(self, step: int) -> TensorBoardLog | None:
        """The run's TensorBoard log (rank 0, with CSV writers), opened at the first step written."""
        if self.tb is None and self.w is not None and self.tr.env.is_main:
            self.tb = TensorBoardLog(self.w.steps.path.parent / "tb" / self.ids["run"], purge_step=step)
            if self.tb.note:
                print0(f"{self.ids['run']}: {self.tb.note}", file=sys.stderr)
        return self.tb if self.tb is not None and self.tb.writer is not None else None

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()

    def _stop_requested(self, stop: GracefulStop) -> bool:
        flag = stop.requested
        if self.tr.env.world_size > 1:  # every rank must agree, or the checkpoint's collectives hang
            t = torch.tensor([float(flag)], device=self.tr.env.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = bool(t.item())
        return flag

    def one_step(self, step: int) -> None:
        cfg, tr = self.cfg, self.tr
        row = tr.train_step(step)
        events: list[Alert] = []
        if tr.monitor:
            fp8 = tr.fp8_state()  # fp8_state.Fp8Tensor per tensor
            keys = [f"{t.module}.{t.role}" for t in fp8]
            scales = dict(zip(keys, torch.stack([t.values[1] for t in fp8]).tolist() if fp8 else []))
            events += self.alerts.step(step, row["loss"], row["grad_norm"], scales,
                                       dict(zip(keys, (t.format for t in fp8))))
        if row["action"]:
            hit = [a for a in events if a.kind == "nonfinite"]
            if hit:
                hit[0].action = row["action"]
            else:  # fp16 loss-scale backoff: routine, logged as information
                events.append(Alert(step, "loss_scale_backoff", "info", "grad_norm", row["grad_norm"], math.inf,
                                    "fp16 gradients overflowed at this loss scale", row["action"]))
        # The step's FP8 record is read before an evaluation's forward, which a compiled model's amax probes see
        due = self.w is not None and tr.spec.precision in LOW and cfg.stats_every and step % cfg.stats_every == 0
        fp8_rows = tr.fp8_rows(step, with_fractions=tr.fractions_due(step)) if due else []
        if (cfg.val_every and (step + 1) % cfg.val_every == 0) or step == cfg.steps - 1:
            row["val_loss"] = tr.evaluate()
            if tr.monitor:
                events += self.alerts.evaluation(step, row["val_loss"])
        tb = self.tensorboard(step)
        if self.w is not None:
            self._write(self.w.steps, {**self.ids, **self.shape, "step": step, **row})
            if tb:
                tb.step(step, row)
            if fp8_rows:
                self._write(self.w.fp8, *({**self.ids, **r} for r in fp8_rows))
                if tb:
                    tb.fp8(step, fp8_rows)
            if tr.layer_stats and cfg.health_every and step % cfg.health_every == 0:
                self._write(self.w.layers, *({"run": self.ids["run"], "step": step, "layer": layer, **vals}
                                             for layer, vals in tr.layer_stats.items()))
                if tb:
                    tb.layers(step, tr.layer_stats)
        for a in events:
            self._alert(a)
        if tb:
            tb.alerts(step, events)
        healthy = not row["nonfinite"]
        if tr.ckpt_path is not None and cfg.ckpt_every and (step + 1) % cfg.ckpt_every == 0 and healthy \
                and step + 1 < cfg.steps:
            self.checkpoint(step + 1)
        if cfg.dashboard_every and (step + 1) % cfg.dashboard_every == 0 and \
                time.monotonic() - self.dash_time >= max(cfg.dashboard_refresh, 100 * self.dash_cost):
            self.dashboard(live=True)  # not faster than the page reloads, and never more than 1% of the run
        self._progress(step, row)

    def _progress(self, step: int, row: dict[str, Any]) -> None:
        cfg = self.cfg
        if self.bar is not None and not self.bar.disable:
            self.bar.set_postfix_str(f"loss {row['loss']:.4f} | {row['tokens_per_s']:,.0f} tok/s"
                                     + (f" | alert {self.last_alert}" if self.last_alert else ""), refresh=False)
            self.bar.update(1)
        elif step % cfg.log_every == 0 or step == cfg.steps - 1 or "val_loss" in row:
            val = f"  val {row['val_loss']:.4f}" if "val_loss" in row else ""
            print0(f"{self.ids['run']:>22s} step {step:5d}  loss {row['loss']:.4f}{val}  "
                   f"{row['tokens_per_s']:10,.0f} tok/s  {row['step_time_s'] * 1e3:7.1f} ms"
                   + (f"  last alert {self.last_alert}" if self.last_alert else ""))
