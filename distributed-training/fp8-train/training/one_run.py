"""One run of a plan: its GPT built in its precision, resumed or started, trained by the RunLoop, then its FP8 bound.

    settings, build  the run's model in its precision (precision.prepare), FSDP2-wrapped over several ranks
    run_one          the run: --resume from its checkpoint, or again from its first step where there is none
                     (checkpoints off), or not at all where its rows are complete; a fresh run never meets an
                     older run's checkpoint
    rows_state       how far a run's rows go, read on rank 0 (every rank acts on its answer)
    measure_bound    the FP8 bound after the base-seed BF16 run (bound.py), on one GPU, once per plan
    free_memory      what a run leaves behind, dropped before the next

runner.py runs a plan's runs one after another inside its run folder; the benchmarks time the same build.
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.dist import DistInfo, from_rank0, print0
from common.model import GPTConfig
from health.alerts import AlertEngine
from precision.modes import PrecisionSettings, RunSpec
from precision.prepare import prepare
from training import bound, checkpoint
from training.faults import parse as parse_faults
from training.runloop import RunLoop, Writers
from training.settings import Config
from training.trainer import Trainer


def settings(cfg: Config) -> PrecisionSettings:
    return PrecisionSettings(cfg.fp8_modules, cfg.hp_modules, cfg.recipe, cfg.fp8_scaling, cfg.torchao_recipe,
                             bool(cfg.compile), probes=cfg.monitor and cfg.stats_every > 0,
                             mx_scale_rule=cfg.mx_scale_rule)


def build(cfg: Config, spec: RunSpec, mcfg: GPTConfig, env: DistInfo, init_dir: Path | None = None):
    prep = prepare(spec, mcfg, settings(cfg), env.device, init_dir)
    if env.world_size > 1:  # FSDP2 per block then root (common.fsdp); fp32 params, autocast does bf16
        from torch.distributed.device_mesh import init_device_mesh

        from common.fsdp import apply_fsdp  # imported here: FSDP costs a second of start-up on one rank
        apply_fsdp(prep.raw, init_device_mesh(env.device.type, (env.world_size,)), reshard_after_forward=True)
    return prep


def run_one(cfg: Config, spec: RunSpec, mcfg: GPTConfig, env: DistInfo, data, writers: Writers, out: Path,
            ckpt_dir: Path, peak: float | None, stop: checkpoint.GracefulStop) -> Path | None:
    """Train one run to its end (or its stop); returns its checkpoint path when it keeps one."""
    # Rank 0 holds the CSVs: it says how far this run got, every rank acts on its answer. A finished run
    # is told so before any model is built (at hidden 4096 building one costs seconds of the slot).
    rows = from_rank0(rows_state(writers, spec.name, cfg.steps) if env.is_main else None)
    if cfg.resume and rows == "complete" and not from_rank0(bound_due(cfg, spec, writers) if env.is_main else None):
        print0(f"== {spec.name}: complete, nothing to resume")
        return None
    prep = build(cfg, spec, mcfg, env, ckpt_dir)
    print0(f"== {spec.name}: backend {prep.backend.name}" + (f" ({prep.reason})" if prep.reason else "") +
           "".join(f"; {n}" for n in prep.notes))
    # Checkpoints only where they are on: the GPU presets turn them off (one is ~19 GB), and a resumed
    # launch then writes none either.
    ckpt = ckpt_dir / f"{spec.name}.pt" if cfg.ckpt_every else None
    tr = Trainer(cfg, spec, prep, env, data, mcfg, peak, ckpt, parse_faults(cfg.inject))
    loop = RunLoop(tr, writers, AlertEngine(cfg.thresholds), out / "dashboards" / f"{spec.name}.html")
    start = 0
    if cfg.resume and ckpt is not None and ckpt.exists():
        state = checkpoint.load(ckpt, tr.fingerprint(), allow_pickle=prep.backend.checkpoint_pickles)
        step = state["step"]
        if step and not from_rank0(writers.steps.done({"run": spec.name, "step": step - 1}) if env.is_main else None):
            raise checkpoint.CheckpointError(f"cannot resume {spec.name}: its checkpoint is at step {step} but "
                                             f"steps.csv has no row of step {step - 1}: it continues another run's "
                                             f"rows; delete {ckpt} or rerun without --resume")
        tr.restore(state)
        loop.load_health(state["health"])
        start = state["step"]
        print0(f"   resumed from its checkpoint at step {start}")
    elif cfg.resume and rows == "complete":
        # An earlier launch stopped between this run and its bound; GEMM times do not depend on the
        # weights' values, so the bound taken on the initial weights is the same measurement.
        print0("   complete; measuring its FP8 bound, which the launch that trained it did not reach")
        measure_bound(cfg, spec, tr, writers)
        return None
    elif cfg.resume and rows == "partial":
        if cfg.ckpt_every:
            raise checkpoint.CheckpointError(f"cannot resume {spec.name}: steps.csv has its rows but there is no "
                                             f"checkpoint {ckpt.name if ckpt else ''} in {ckpt_dir.name}/; "
                                             "rerun without --resume")
        # Checkpoints off (--ckpt-every 0, the GPU presets' default: one is ~19 GB): an interrupted run
        # cannot continue, so it starts again from its first step and its partial rows go.
        gone = sum(w.discard("run", spec.name) for w in writers.of_runs())
        print0(f"   interrupted without a checkpoint (--ckpt-every 0): starting {spec.name} again "
               f"({gone} partial rows removed)")
    elif ckpt is not None:
        if cfg.resume:
            print0(f"   no checkpoint and no rows for {spec.name}: it had not started; starting it now")
        ckpt.unlink(missing_ok=True)  # a fresh run never resumes from an older run's checkpoint later
        if cfg.on_nan == "rollback":
            tr.save_checkpoint(0, loop.health_state())  # something to roll back to before the first periodic one
    loop.run(start, stop)
    measure_bound(cfg, spec, tr, writers)
    return ckpt


def rows_state(writers: Writers, run: str, steps: int) -> str:
    """How far a run's rows go: none, partial or complete."""
    if writers.steps.done({"run": run, "step": steps - 1}):
        return "complete"
    return "partial" if writers.steps.done({"run": run, "step": 0}) else "none"


def bound_due(cfg: Config, spec: RunSpec, writers: Writers) -> bool:
    """Whether this run still owes the plan its FP8 bound: the base-seed BF16 run, where asked (one GPU), once."""
    return writers.bound is not None and spec.precision == "bf16" and spec.seed == cfg.seed and \
        not writers.bound.done(bound.shape(cfg))


def measure_bound(cfg: Config, spec: RunSpec, tr: Trainer, writers: Writers) -> None:
    """The FP8 bound of this model (bound.py), from its base-seed BF16 run (see bound_due)."""
    if not bound_due(cfg, spec, writers):
        return
    b = bound.record(tr, cfg.steps, writers.bound)
    print0(f"   FP8 bound: BF16 step {b.bf16_step_ms:.1f} ms, FP8-able GEMMs {b.bf16_gemm_ms:.1f} ms "
           f"({b.bf16_gemm_ms / b.bf16_step_ms:.0%}) -> {b.fp8_gemm_ms:.1f} ms in FP8: at most "
           f"{b.speedup:.2f}x with free casts")


def free_memory(device: torch.device) -> None:
    """Drop what the last run left: compiled graphs (they hold the model), garbage, cached blocks."""
    import gc
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
