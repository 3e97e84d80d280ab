"""Monitoring cost: the training-health monitoring (issue 7) on against the bare step, interleaved.

Per-step norms, FP8 scale reads, alerts, CSV rows, periodic per-layer and FP8 statistics, dashboard rewrites:
wall time per loop iteration with all of it on vs off, both compiled alike. Target: < 5% of the step.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.settings import TARGET_MONITOR_PCT, BenchConfig, train_config
from benchmarks.step_cost import runnable_specs, trainer_for
from common.dist import print0
from common.results import ResultsWriter, provenance
from health.alerts import AlertEngine
from training.one_run import free_memory
from training.runloop import RunLoop
from training.runner import scratch_writers


def monitor_overhead(cfg: BenchConfig, env, data, writer: ResultsWriter) -> None:
    """Wall time per loop iteration with every health feature on vs. the bare step, interleaved.

    "on" = what a run does with the runner's defaults: per-step param/update norms, FP8 scale reads
    and alerts, CSV rows, FP8 amax/scale rows every 10 steps and underflow/saturation every 50,
    per-layer norms and activation ranges every 10, the HTML dashboard rewritten every 25 steps
    but at most every 10 s; the mean over 100 steps covers whole periods. "off" = forward,
    backward, the grad norm that clipping and NaN detection need anyway, and the optimizer step.
    Both are compiled alike (the "on" graph carries the activation hooks).
    """
    specs, skipped = runnable_specs((cfg.monitor_run,), env.device)
    if not specs:
        print0(f"monitor: skipped {skipped[0]}")
        return
    spec = specs[0]
    n = cfg.warmup + cfg.monitor_iters
    with tempfile.TemporaryDirectory() as tmp:
        on_cfg = train_config(cfg, cfg.monitor_hidden, n + 1)  # the runner's defaults for every health setting
        off_cfg = dataclasses.replace(on_cfg, monitor=False, stats_every=0, fractions_every=0, health_every=0,
                                      dashboard_every=0)
        writers = scratch_writers(Path(tmp), env, provenance(env, "1"))
        loops = {"on": RunLoop(trainer_for(on_cfg, spec, env, data), writers, AlertEngine(on_cfg.thresholds),
                               Path(tmp) / "dash.html"),
                 "off": RunLoop(trainer_for(off_cfg, spec, env, data), None, AlertEngine(off_cfg.thresholds), None)}
        times: dict[str, list[float]] = {k: [] for k in loops}
        for step in range(n):
            for k, loop in loops.items():
                if env.device.type == "cuda":
                    torch.cuda.synchronize(env.device)
                t0 = time.perf_counter()
                loop.one_step(step)
                if env.device.type == "cuda":
                    torch.cuda.synchronize(env.device)
                if step >= cfg.warmup:
                    times[k].append(time.perf_counter() - t0)
        compiled = loops["on"].tr.p.compiled
        del loops
        free_memory(env.device)
    on, off = statistics.fmean(times["on"]), statistics.fmean(times["off"])
    pct = 100 * (on - off) / off
    writer.write(dict(run=spec.name, d_model=cfg.monitor_hidden, compiled=compiled, steps=cfg.monitor_iters,
                      step_time_off_s=off, step_time_on_s=on, median_off_s=statistics.median(times["off"]),
                      median_on_s=statistics.median(times["on"]), overhead_pct=pct, target_pct=TARGET_MONITOR_PCT,
                      meets_target=pct < TARGET_MONITOR_PCT))
    print0(f"monitoring overhead ({spec.name}, d_model {cfg.monitor_hidden}): {off * 1e3:.1f} -> {on * 1e3:.1f} ms "
           f"per step = {pct:+.1f}% (target < {TARGET_MONITOR_PCT}%: "
           f"{'met' if pct < TARGET_MONITOR_PCT else 'MISSED'})")
