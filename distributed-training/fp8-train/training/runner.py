"""The runner behind train.py: a plan of runs, checked before anything is written, then trained one by one.

    plan.py              the runs of the preset or --runs, each backend resolved before anything is written;
                         --only picks some of them, --list-runs prints them
    build, run_one       one run: its GPT in its precision (precision.prepare), a Trainer, the RunLoop around it;
                         --resume from its checkpoint, or again from its first step where there is none
    measure_bound        the FP8 bound after the base-seed BF16 run (bound.py), on one GPU
    sweep                the GPU presets' hidden-size sweep (sweep.csv)
    main, _run           the run folder (runs/<tag>/, published to results/<tag>/ once the plan is complete),
                         --publish-finished, the dashboard of all runs

What it measures, the presets and the commands: train.py, whose docstring is this runner's --help.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import torch

from common.config import config_dict, parse_size
from common.data import load_data
from common.dist import (DistInfo, check_batch_split, distributed, fail, from_rank0, launched_by_torchrun,
                         planned_world, print0, select_device)
from common.failures import PREEMPTED, report
from common.hardware import device_kind
from common.model import GPTConfig
from common.results import ResultsWriter, SchemaMismatch, check_resume, provenance
from common.runs import (RunError, RunFolder, check_free, check_resumable, experiment_flags, promote_run,
                         read_manifest, results_path, run_dir_for, shown)
from health.alerts import AlertEngine
from precision import backends
from precision.modes import LOW, PrecisionSettings, RunSpec
from precision.prepare import forget_initial_weights, prepare
from training import bound, checkpoint
from training.plan import listing, plan, selected
from training.faults import parse as parse_faults
from training.runloop import EVENT_COLUMNS, FP8_COLUMNS, LAYER_COLUMNS, STEP_COLUMNS, Preempted, RunLoop
from training.settings import OPERATIONAL, Config, parse, preset
from training.trainer import StopRun, Trainer, Writers

LAB = Path(__file__).resolve().parents[1]  # the lab: results/, runs/
BENCH_VERSION = "1"
INCOMPLETE = -1  # _train_all: every run it was asked for ended well, but --only left some of the plan


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


def sweep(cfg: Config, specs: list[RunSpec], env: DistInfo, data, out: Path, prov: dict) -> None:
    """Tokens/s of bf16 vs each FP8 backend across hidden sizes: where FP8 starts to pay (GPU presets)."""
    w = ResultsWriter(out / "sweep.csv", ["d_model", "n_layers", "run", "precision", "precision_backend",
                                          "compiled", "tokens_per_s", "step_time_s", "peak_mem_MiB",
                                          "tokens_per_step"],
                      key=["d_model", "run"], provenance=prov, enabled=env.is_main)
    for d in cfg.sweep_hidden:
        mcfg = GPTConfig(vocab_size=data.vocab_size, seq_len=cfg.seq_len, d_model=d, n_layers=4,
                         n_heads=max(1, d // 128))
        for spec in [s for s in specs if s.precision in ("bf16",) + LOW and s.seed == cfg.seed]:
            prep = build(cfg, spec, mcfg, env)
            sc = dataclasses.replace(cfg, steps=cfg.sweep_steps, stats_every=0, fractions_every=0, monitor=False)
            tr = Trainer(sc, spec, prep, env, data, mcfg)
            times = []
            for step in range(cfg.sweep_steps):
                times.append(tr.train_step(step)["step_time_s"])
            t = sorted(times[cfg.sweep_steps // 2:])[len(times[cfg.sweep_steps // 2:]) // 2]  # median, warm half
            row = dict(d_model=d, n_layers=4, run=spec.name, precision=spec.precision, precision_backend=prep.backend.name,
                       compiled=prep.compiled,
                       tokens_per_s=tr.tokens_per_step / t, step_time_s=t, tokens_per_step=tr.tokens_per_step,
                       peak_mem_MiB=torch.cuda.max_memory_allocated() / 2**20 if env.device.type == "cuda" else None)
            w.write(row)
            print0(f"sweep d_model={d:5d} {spec.name:22s} {row['tokens_per_s']:12,.0f} tokens/s")
            del tr, prep
            free_memory(env.device)  # the next size starts from a clean allocator


def free_memory(device: torch.device) -> None:
    """Drop what the last run left: compiled graphs (they hold the model), garbage, cached blocks."""
    import gc
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


@functools.lru_cache(maxsize=2)
def _load_data(path: str | None, nbytes: int):
    """The corpus, read once per process (listing the stdlib takes a second; tests call main() often)."""
    return load_data(path, nbytes)


# OPERATIONAL (settings.py): flags that do not change what is measured; CONFIG_IGNORE: what a resumed run may change.
CONFIG_IGNORE = ("resume", "progress", "skipped_runs", "promote", "out", "ckpt_dir", "only", "list_runs",
                 "publish_finished")


def writers_for(folder: RunFolder | Path | None, env: DistInfo, prov: dict, cfg_json: dict,
                bound_csv: bool = False) -> Writers:
    """The run's CSV writers: in the run folder (or a scratch directory) on rank 0, disabled elsewhere.

    bound.csv only where the bound will be measured (a file with a header alone reads as damaged).
    """
    def w(name, cols, key, config=None):
        if folder is None:
            return ResultsWriter(Path(name), cols, key=key, provenance=prov, enabled=False)
        if isinstance(folder, Path):
            return ResultsWriter(folder / name, cols, key=key, provenance=prov, enabled=env.is_main)
        return folder.writer(name, cols, key, prov, config=config, config_ignore=CONFIG_IGNORE)
    return Writers(w("steps.csv", STEP_COLUMNS, ["run", "step"], cfg_json),
                   w("fp8.csv", FP8_COLUMNS, ["run", "step", "module", "role"]),
                   w("layers.csv", LAYER_COLUMNS, ["run", "step", "layer"]),
                   w("events.csv", EVENT_COLUMNS, ["run", "step", "kind", "metric"]),
                   extra={"bound": w("bound.csv", bound.COLUMNS, bound.KEY)} if bound_csv else {})


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
        gone = sum(w.discard("run", spec.name) for w in (writers.steps, writers.fp8, writers.layers, writers.events)
                   if w is not None)
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


def bound_shape(cfg: Config) -> dict:
    """bound.csv's key for this plan's model."""
    return dict(d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads, seq_len=cfg.seq_len,
                batch=cfg.batch)


def bound_due(cfg: Config, spec: RunSpec, writers: Writers) -> bool:
    """Whether this run still owes the plan its FP8 bound: the base-seed BF16 run, where asked (one GPU), once."""
    writer = writers.extra.get("bound")
    return writer is not None and spec.precision == "bf16" and spec.seed == cfg.seed and \
        not writer.done(bound_shape(cfg))


def measure_bound(cfg: Config, spec: RunSpec, tr: Trainer, writers: Writers) -> None:
    """The FP8 bound of this model (bound.py), from its base-seed BF16 run (see bound_due)."""
    if not bound_due(cfg, spec, writers):
        return
    writer, shape = writers.extra["bound"], bound_shape(cfg)
    b = bound.measure_trainer(tr, bound.mapped_linears(tr.mcfg, cfg.fp8_modules, cfg.hp_modules), cfg.steps)
    writer.write(dict(shape, tokens_per_step=tr.tokens_per_step, compiled=tr.p.compiled, **b.row()))
    print0(f"   FP8 bound: BF16 step {b.bf16_step_ms:.1f} ms, FP8-able GEMMs {b.bf16_gemm_ms:.1f} ms "
           f"({b.bf16_gemm_ms / b.bf16_step_ms:.0%}) -> {b.fp8_gemm_ms:.1f} ms in FP8: at most "
           f"{b.speedup:.2f}x with free casts")


def prune_checkpoints(done: list[Path], keep: int) -> None:
    """Delete the checkpoints of completed runs beyond the newest `keep` (a big model's is ~19 GB)."""
    for path in done[:max(0, len(done) - keep)]:
        path.unlink(missing_ok=True)


def experiment(cfg: Config, hardware) -> list[str]:
    """The measurement flags in which this run differs from its preset's run (what `make fp8-train GPU=` trains):
    none, the run publishes to results/; any, it is an experiment and stays in runs/ (common.runs)."""
    return experiment_flags(cfg, dataclasses.replace(preset(hardware.name), gpu=cfg.gpu), OPERATIONAL)


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    try:
        cfg, hardware, explicit = parse(argv, description=description, prog="fp8-train")
        if cfg.list_runs:  # answers without a GPU: what a GPU slot would train, in order
            return list_runs(cfg, hardware, explicit)
        on_gpu = device_kind(hardware) == "cuda"  # the one line when torch cannot use CUDA (driver, build, fix)
    except (ValueError, backends.BackendUnavailable) as e:
        fail(str(e), 2)
    changed = experiment(cfg, hardware)
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, hardware, on_gpu, explicit, changed)
    finally:
        torch.set_num_threads(threads)


def list_runs(cfg: Config, preset, explicit: bool) -> int:
    """--list-runs: the plan's lines (plan.listing), nothing written. A GPU preset on a machine without a usable
    CUDA device is listed as planned, its backends unprobed (said so): what gpu-quick's dry run plans with."""
    mcfg = GPTConfig(seq_len=cfg.seq_len, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads)
    world, _, nnodes = planned_world()
    check_batch_split(cfg.batch, cfg.grad_accum, world, nnodes)
    probe = preset.name == "cpu" or torch.cuda.is_available()
    device = select_device("cpu" if preset.name == "cpu" else "cuda") if probe else None
    specs, skipped = plan(cfg, device, explicit, mcfg)
    print("\n".join(listing(cfg, specs, skipped, probed=probe)), flush=True)
    return 0


def checkpoint_dir(cfg: Config, out: Path) -> Path:
    """Where a plan's checkpoints (and, for big models, its initial weights) live: inside its run folder
    (runs/<tag>/checkpoints/), so that they belong to that run and no other; --ckpt-dir names another place."""
    return Path(cfg.ckpt_dir) if cfg.ckpt_dir else run_dir_for(out.parent, out.name) / "checkpoints"


def out_dir(cfg: Config, preset) -> Path:
    """Where complete runs are published: results/<preset>_ws<N>[_n<nodes>] (h100_ws1, h100_ws8, h100_ws16_n2:
    one world size never replaces another); the run writes into runs/<that name>/ first."""
    world, _, nnodes = planned_world()
    return results_path(cfg.out, LAB, preset.run_tag(world, nnodes))


def _check(cfg: Config, preset, on_gpu: bool, explicit: bool, out: Path):
    """Everything checkable before the process group: (specs, skipped, data, model, saved config)."""
    mcfg = GPTConfig(seq_len=cfg.seq_len, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads)
    world, _, nnodes = planned_world()
    check_batch_split(cfg.batch, cfg.grad_accum, world, nnodes)  # every micro-batch splits over the ranks
    # this rank's GPU (LOCAL_RANK) made current first: the backend probes below allocate on it
    specs, skipped = plan(cfg, select_device("cuda" if on_gpu else "cpu"), explicit, mcfg)
    data = _load_data(cfg.data, parse_size(cfg.data_size))
    cfg_json = {**config_dict(cfg), "preset": preset.name, "data": data.source, "data_fingerprint":
                data.fingerprint, "skipped_runs": [str(k) for k in skipped]}
    if not launched_by_torchrun():  # the launcher's check pass, or the one process of a CPU run
        run_dir = run_dir_for(out.parent, out.name)
        check_free(run_dir)
        if cfg.resume or cfg.publish_finished:
            check_resumable(run_dir)
            check_resume(run_dir / "steps.csv", STEP_COLUMNS, cfg_json, CONFIG_IGNORE)
    return specs, skipped, data, dataclasses.replace(mcfg, vocab_size=data.vocab_size), cfg_json


def _run(cfg: Config, preset, on_gpu: bool, explicit: bool, changed: list[str]) -> int:
    out = out_dir(cfg, preset)
    try:
        specs, skipped, data, mcfg, cfg_json = _check(cfg, preset, on_gpu, explicit, out)
    except (ValueError, backends.BackendUnavailable, RunError) as e:
        fail(str(e), 2)
    if cfg.publish_finished:
        return publish_finished(cfg, specs, out)
    if not selected(specs, cfg.only, skipped):  # --only named preset runs that cannot run here
        for k in skipped:
            print0(f"skipped {k}")
        print0(f"--only {','.join(cfg.only)}: nothing to train here; nothing written")
        return 0
    with distributed(device="cuda" if on_gpu else "cpu") as env:
        # The bound profiles one process's BF16 step (bound.py): one GPU, and only where asked.
        wants_bound = cfg.bound and env.device.type == "cuda" and env.world_size == 1
        if cfg.bound and not wants_bound:
            print0("FP8 bound: measured on one GPU only (bound.py); not measured in this launch")
        ckpt_dir = checkpoint_dir(cfg, out)
        folder, error = None, None
        if env.is_main:
            try:
                folder = RunFolder.open(run_dir_for(out.parent, out.name), out, "resume" if cfg.resume else "fresh")
                writers = writers_for(folder, env, provenance(env, BENCH_VERSION), cfg_json, bound_csv=wants_bound)
            except (SchemaMismatch, RunError) as e:  # resuming into rows written with other settings
                error = str(e)
                if folder is not None:
                    folder.close()
        else:
            writers = writers_for(None, env, provenance(env, BENCH_VERSION), cfg_json)
        if (error := from_rank0(error)) is not None:
            fail(error, 2)
        run_path = folder.path if folder else out
        for note in (folder.notes if folder else []) + [f"skipped {n}" for n in skipped]:
            print0(note)
        try:
            code = _train_all(cfg, specs, selected(specs, cfg.only, skipped), mcfg, env, data, writers, run_path,
                              ckpt_dir, preset)
        except BaseException:
            if folder is not None:
                folder.finish(complete=False, changed=changed)
            raise
        if folder is not None:
            for line in folder.finish(complete=code == 0, changed=changed, promote=cfg.promote):
                print(line, flush=True)
    return 0 if code == INCOMPLETE else code


def publish_finished(cfg: Config, specs: list[RunSpec], out: Path) -> int:
    """--publish-finished: the plan's finished runs merged into results/ by key, the unfinished ones kept out.

    The end of a short GPU job: whatever runs of the plan finished are results of their own (a BF16 run and
    an FP8 run of one model compare without the third seed). A run cut off mid-way has rows but no end: they
    are dropped, with its checkpoint, so that neither a report nor a later --resume reads half a run.
    """
    run_dir = run_dir_for(out.parent, out.name)
    if read_manifest(run_dir).get("state") in ("promoted", "merged"):
        print(f"{shown(run_dir)}: published already (every run of the plan finished)")
        return 0
    try:
        folder = RunFolder.open(run_dir, out, "resume")
    except RunError as e:
        fail(str(e), 2)
    ckpt_dir = checkpoint_dir(cfg, out)
    with folder.path.joinpath("steps.config.json").open() as f:
        saved = json.load(f)
    writers = writers_for(folder, None, {}, saved)
    states = {s.name: rows_state(writers, s.name, cfg.steps) for s in specs}
    for name in (n for n, state in states.items() if state == "partial"):
        gone = sum(w.discard("run", name) for w in (writers.steps, writers.fp8, writers.layers, writers.events))
        (ckpt_dir / f"{name}.pt").unlink(missing_ok=True)
        print(f"{name}: cut off mid-way; its {gone} rows and checkpoint dropped (--resume trains it again)")
    folder.finish(complete=False, changed=[])
    done = [n for n, state in states.items() if state == "complete"]
    if not done:
        print(f"no run of the plan finished: nothing published ({shown(folder.path)} keeps the plan)")
        return 0
    files = promote_run(folder.path, merge=True)
    print(f"published {', '.join(done)} ({len(files)} file(s) merged into {shown(out)}); not run yet: "
          f"{', '.join(n for n, state in states.items() if state != 'complete') or 'none'}")
    return 0


def _train_all(cfg: Config, specs, now, mcfg: GPTConfig, env: DistInfo, data, writers: Writers, run_path: Path,
               ckpt_dir: Path, preset) -> int:
    """Train `now` (the runs --only selects, in the plan's order) of the plan `specs`."""
    completed: list[Path] = []
    if not cfg.resume and env.is_main:  # a fresh plan: nothing of it may come from an older plan's files
        for s in specs:
            (ckpt_dir / f"{s.name}.pt").unlink(missing_ok=True)
        forget_initial_weights(ckpt_dir)
    with checkpoint.GracefulStop() as stop:
        for spec in now:
            try:
                ckpt = run_one(cfg, spec, mcfg, env, data, writers, run_path, ckpt_dir, preset.peak_tflops("bf16"),
                               stop)
            except checkpoint.CheckpointError as e:
                fail(str(e), 2)
            except Preempted as e:  # not success: a requeue script must see it (common.failures)
                report(str(e), PREEMPTED, "preempted")
                return PREEMPTED
            except StopRun as e:
                print0(f"{spec.name}: {e}")
                return 3
            if ckpt is not None and env.is_main:
                completed.append(ckpt)
                prune_checkpoints(completed, cfg.keep_ckpts)
            free_memory(env.device)
    have = [s for s in specs if rows_state(writers, s.name, cfg.steps) != "none"]
    if env.is_main and len(have) > 1:
        from health import dashboard
        dashboard.write([(run_path, s.name, None) for s in have], run_path / "dashboard.html",
                        f"fp8-train {run_path.name}: all runs")
    if cfg.sweep_hidden:
        sweep(cfg, specs, env, data, run_path, provenance(env, BENCH_VERSION))
    left = [s.name for s in specs if rows_state(writers, s.name, cfg.steps) != "complete"]
    if env.is_main and left:
        print0(f"not run yet: {', '.join(left)}; the run folder stays unpublished until they are "
               "(run again with --resume)")
        return INCOMPLETE
    return 0
