"""The runner behind train.py: a plan of runs, checked before anything is written, then trained one by one.

    plan.py              the runs of the preset or --runs, each backend resolved before anything is written;
                         --only picks some of them, --list-runs prints them
    TABLES, run_plan     what a plan writes (common.runner.RunPlan): runs/<tag>/, published to results/<tag>/ (or
                         --results) once the plan is complete
    main, _run           the checks before launch, then the plan's runs inside common.runner.open_run (rank 0's
                         writers, the outcome recorded and published)
    _train_all           each run (one_run.py: built, resumed or started, trained, its bound), the checkpoints kept,
                         the dashboard of all runs, the sweep
    sweep                the hidden-size sweep (sweep.csv), where --sweep-hidden asks for one
    publish_finished     --publish-finished: the plan's finished runs merged into results/, the rest kept out

What it measures, the presets and the commands: train.py, whose docstring is this runner's --help.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import torch

from common.config import parse_size
from common.data import load_data
from common.dist import DistInfo, check_batch_split, distributed, fail, planned_world, print0, select_device
from common.failures import PREEMPTED, report
from common.hardware import device_kind
from common.model import GPTConfig
from common.results import ResultsWriter, provenance
from common.runner import (RESUME_MAY_CHANGE, RunPlan, Table, check_before_launch, experiment, open_run,
                           saved_config)
from common.runs import RunError, RunFolder, promote_run, read_manifest, run_dir_for, shown
from precision import backends
from precision.modes import LOW, RunSpec
from precision.prepare import forget_initial_weights
from training import bound, checkpoint
from training.one_run import build, free_memory, rows_state, run_one
from training.plan import listing, plan, selected
from training.runloop import EVENT_COLUMNS, FP8_COLUMNS, LAYER_COLUMNS, STEP_COLUMNS, Preempted, Writers
from training.settings import OPERATIONAL, Config, parse, preset
from training.trainer import StopRun, Trainer

LAB = Path(__file__).resolve().parents[1]  # the lab: results/, runs/
BENCH_VERSION = "1"
INCOMPLETE = -1  # _train_all: every run it was asked for ended well, but --only left some of the plan


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
            row = dict(d_model=d, n_layers=4, run=spec.name, precision=spec.precision,
                       precision_backend=prep.backend.name, compiled=prep.compiled,
                       tokens_per_s=tr.tokens_per_step / t, step_time_s=t, tokens_per_step=tr.tokens_per_step,
                       peak_mem_MiB=torch.cuda.max_memory_allocated() / 2**20 if env.device.type == "cuda" else None)
            w.write(row)
            print0(f"sweep d_model={d:5d} {spec.name:22s} {row['tokens_per_s']:12,.0f} tokens/s")
            del tr, prep
            free_memory(env.device)  # the next size starts from a clean allocator


@functools.lru_cache(maxsize=2)
def _load_data(path: str | None, nbytes: int):
    """The corpus, read once per process (listing the stdlib takes a second; tests call main() often)."""
    return load_data(path, nbytes)


# OPERATIONAL (settings.py): flags that do not change what is measured; CONFIG_IGNORE: what a resumed run may change
# ("out": a run folder begun before --out became --results saved it).
CONFIG_IGNORE = (*RESUME_MAY_CHANGE, "out", "progress", "skipped_runs", "ckpt_dir", "only", "list_runs",
                 "publish_finished")
# What a plan writes, in the order of the Writers record (runloop.py); the saved config rides with steps.csv.
TABLES = (Table("steps.csv", STEP_COLUMNS, ("run", "step")),
          Table("fp8.csv", FP8_COLUMNS, ("run", "step", "module", "role"), config=False),
          Table("layers.csv", LAYER_COLUMNS, ("run", "step", "layer"), config=False),
          Table("events.csv", EVENT_COLUMNS, ("run", "step", "kind", "metric"), config=False))
BOUND = Table("bound.csv", bound.COLUMNS, bound.KEY, config=False)


def results_dir(cfg: Config, hardware) -> Path:
    """Where complete runs are published: results/<preset>_ws<N>[_n<nodes>] (h100_ws1, h100_ws8, h100_ws16_n2:
    one world size never replaces another), or --results; the run writes into runs/<that name>/ first."""
    world, _, nnodes = planned_world()
    return cfg.results_dir(LAB, hardware.run_tag(world, nnodes))


def run_plan(out: Path, cfg_json: dict, with_bound: bool) -> RunPlan:
    """The plan's run folder and tables; bound.csv only where the bound will be measured (a file with a header
    alone reads as damaged)."""
    return RunPlan(run_dir_for(out.parent, out.name), out, TABLES + ((BOUND,) if with_bound else ()), cfg_json,
                   CONFIG_IGNORE)


def scratch_writers(folder: Path, env: DistInfo, prov: dict) -> Writers:
    """Every table's writer in a scratch folder outside any run folder (the benchmarks time a run's loop)."""
    return Writers(*(ResultsWriter(folder / t.name, t.columns, t.key, prov, enabled=env.is_main) for t in TABLES))


def prune_checkpoints(done: list[Path], keep: int) -> None:
    """Delete the checkpoints of completed runs beyond the newest `keep` (a big model's is ~19 GB)."""
    for path in done[:max(0, len(done) - keep)]:
        path.unlink(missing_ok=True)


def changed(cfg: Config, hardware) -> list[str]:
    """The measurement flags in which this run differs from its preset's run (what `make fp8-train GPU=` trains):
    none, the run publishes to results/; any, it is an experiment and stays in runs/ (common.runner.experiment)."""
    return experiment(cfg, dataclasses.replace(preset(hardware.name), gpu=cfg.gpu), OPERATIONAL)


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    cfg, hardware, explicit = parse(argv, description=description, prog="fp8-train")
    try:
        if cfg.list_runs:  # answers without a GPU: what a GPU slot would train, in order
            return list_runs(cfg, hardware, explicit)
        on_gpu = device_kind(hardware) == "cuda"  # the one line when torch cannot use CUDA (driver, build, fix)
    except (ValueError, backends.BackendUnavailable) as e:
        fail(str(e), 2)
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, hardware, on_gpu, explicit)
    finally:
        torch.set_num_threads(threads)


def list_runs(cfg: Config, hardware, explicit: bool) -> int:
    """--list-runs: the plan's lines (plan.listing), nothing written. A GPU preset on a machine without a usable
    CUDA device is listed as planned, its backends unprobed (said so): what gpu-quick's dry run plans with."""
    mcfg = GPTConfig(seq_len=cfg.seq_len, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads)
    world, _, nnodes = planned_world()
    check_batch_split(cfg.batch, cfg.grad_accum, world, nnodes)
    probe = hardware.name == "cpu" or torch.cuda.is_available()
    device = select_device("cpu" if hardware.name == "cpu" else "cuda") if probe else None
    specs, skipped = plan(cfg, device, explicit, mcfg)
    print("\n".join(listing(cfg, specs, skipped, probed=probe)), flush=True)
    return 0


def checkpoint_dir(cfg: Config, where: RunPlan) -> Path:
    """Where a plan's checkpoints (and, for big models, its initial weights) live: inside its run folder
    (runs/<tag>/checkpoints/), so that they belong to that run and no other; --ckpt-dir names another place."""
    return Path(cfg.ckpt_dir) if cfg.ckpt_dir else where.folder / "checkpoints"


def _check(cfg: Config, hardware, on_gpu: bool, explicit: bool):
    """Everything checkable before the process group: (specs, skipped, data, model, run plan)."""
    mcfg = GPTConfig(seq_len=cfg.seq_len, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads)
    world, _, nnodes = planned_world()
    check_batch_split(cfg.batch, cfg.grad_accum, world, nnodes)  # every micro-batch splits over the ranks
    # this rank's GPU (LOCAL_RANK) made current first: the backend probes below allocate on it
    specs, skipped = plan(cfg, select_device("cuda" if on_gpu else "cpu"), explicit, mcfg)
    data = _load_data(cfg.data, parse_size(cfg.data_size))
    cfg_json = {**saved_config(cfg), "preset": hardware.name, "data": data.source, "data_fingerprint":
                data.fingerprint, "skipped_runs": [str(k) for k in skipped]}
    # The bound profiles one process's BF16 step (bound.py): one GPU, and only where asked.
    where = run_plan(results_dir(cfg, hardware), cfg_json, cfg.bound and on_gpu and world == 1)
    check_before_launch(where, cfg, "resume" if cfg.resume or cfg.publish_finished else None)
    return specs, skipped, data, dataclasses.replace(mcfg, vocab_size=data.vocab_size), where


def _run(cfg: Config, hardware, on_gpu: bool, explicit: bool) -> int:
    try:
        specs, skipped, data, mcfg, where = _check(cfg, hardware, on_gpu, explicit)
    except (ValueError, backends.BackendUnavailable) as e:  # RunError and SchemaMismatch are ValueErrors
        fail(str(e), 2)
    if cfg.publish_finished:
        return publish_finished(cfg, specs, where)
    now = selected(specs, cfg.only, skipped)
    if not now:  # --only named preset runs that cannot run here
        for k in skipped:
            print0(f"skipped {k}")
        print0(f"--only {','.join(cfg.only)}: nothing to train here; nothing written")
        return 0
    with distributed(device="cuda" if on_gpu else "cpu") as env:
        if cfg.bound and BOUND not in where.tables:
            print0("FP8 bound: measured on one GPU only (bound.py); not measured in this launch")
        with open_run(where, cfg, env, provenance(env, BENCH_VERSION), changed(cfg, hardware)) as run:
            for k in skipped:
                print0(f"skipped {k}")
            code = _train_all(cfg, specs, now, mcfg, env, data, Writers(*run.writers), where.folder,
                              checkpoint_dir(cfg, where), hardware)
            run.complete = code == 0
    return 0 if code == INCOMPLETE else code


def publish_finished(cfg: Config, specs: list[RunSpec], where: RunPlan) -> int:
    """--publish-finished: the plan's finished runs merged into results/ by key, the unfinished ones kept out.

    The end of a short GPU job: whatever runs of the plan finished are results of their own (a BF16 run and
    an FP8 run of one model compare without the third seed). A run cut off mid-way has rows but no end: they
    are dropped, with its checkpoint, so that neither a report nor a later --resume reads half a run. Not a run
    of its own (open_run would record it incomplete): its folder's state and config stay the plan's.
    """
    if read_manifest(where.folder).get("state") in ("promoted", "merged"):
        print(f"{shown(where.folder)}: published already (every run of the plan finished)")
        return 0
    try:
        folder = RunFolder.open(where.folder, where.target, "resume")
    except RunError as e:
        fail(str(e), 2)
    saved = json.loads((folder.path / "steps.config.json").read_text())  # the plan's config, kept as it is
    writers = Writers(*(folder.writer(t.name, t.columns, t.key, {}, config=saved if t.config else None,
                                      config_ignore=CONFIG_IGNORE) for t in TABLES))
    states = {s.name: rows_state(writers, s.name, cfg.steps) for s in specs}
    for name in (n for n, state in states.items() if state == "partial"):
        gone = sum(w.discard("run", name) for w in writers.of_runs())
        (checkpoint_dir(cfg, where) / f"{name}.pt").unlink(missing_ok=True)
        print(f"{name}: cut off mid-way; its {gone} rows and checkpoint dropped (--resume trains it again)")
    folder.finish(complete=False, changed=[])
    done = [n for n, state in states.items() if state == "complete"]
    if not done:
        print(f"no run of the plan finished: nothing published ({shown(folder.path)} keeps the plan)")
        return 0
    files = promote_run(folder.path, merge=True)
    print(f"published {', '.join(done)} ({len(files)} file(s) merged into {shown(where.target)}); not run yet: "
          f"{', '.join(n for n, state in states.items() if state != 'complete') or 'none'}")
    return 0


def _train_all(cfg: Config, specs, now, mcfg: GPTConfig, env: DistInfo, data, writers: Writers, run_path: Path,
               ckpt_dir: Path, hardware) -> int:
    """Train `now` (the runs --only selects, in the plan's order) of the plan `specs`."""
    completed: list[Path] = []
    if not cfg.resume and env.is_main:  # a fresh plan: nothing of it may come from an older plan's files
        for s in specs:
            (ckpt_dir / f"{s.name}.pt").unlink(missing_ok=True)
        forget_initial_weights(ckpt_dir)
    with checkpoint.GracefulStop() as stop:
        for spec in now:
            try:
                ckpt = run_one(cfg, spec, mcfg, env, data, writers, run_path, ckpt_dir, hardware.peak_tflops("bf16"),
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
