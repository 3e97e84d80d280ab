"""The scaffolding of an attention lab that verifies a parallel implementation against one device and times it over a
parallel degree: tp-attention (Megatron TP, --tp) and cp-attention (context parallelism, --cp) stand on it, and so
can any other attention implementation (all-gather or Ulysses CP, document masks): a lab plugs in its flags, presets,
shape rules, tables and measurements (Sweep), and gets the runner, the verify command and interleaved timing.

    runner        run_sweep(SWEEP, argv): the preset --gpu picks (its degrees: every one that divides the planned
                  world), checks before any rank starts (--require-gpu, degrees vs ranks, the lab's shape rules, the
                  run folder), one mesh per degree (groups of consecutive ranks; the other ranks run replicas, so every
                  device is busy as in DP x TP), the run folder opened by common.runner.open_run (runs/<tag>/ ->
                  results/), then the lab's measurements: a correctness grid, then timing rows, each skipped where
                  --resume finds its row
    verify        verify_main(...): one configuration checked on a mesh of its degree, one JSON line, exit 0 / 1 / 2
    timing        time_interleaved: implementations timed in turn, one iteration each per round, so that drift on a
                  shared machine hits all alike; each sample the max over ranks (common.timing)

    @dataclass(frozen=True, kw_only=True)
    class BenchConfig(SweepFlags):              # common/attention_flags.py
        DEGREE = "tp"
        tp: tuple[int, ...] = field(metadata={"help": "TP degrees"})
        d_models: tuple[int, ...] = field(metadata={"help": "hidden sizes"})

    SWEEP = Sweep("tp-attention", LAB, "tp", BenchConfig, preset, check_shapes, tables, measure, describe)
    def main(argv=None) -> int:
        return run_sweep(SWEEP, argv, __doc__)
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import torch
from torch.distributed.device_mesh import init_device_mesh
from tqdm import tqdm

from .attention_flags import SweepFlags
from .config import parse_preset
from .dist import DistInfo, distributed, fail, from_rank0, get_rank, planned_world, print0
from .hardware import device_kind, get_preset
from .results import NoWriter, provenance
from .runner import RunPlan, Table, check_before_launch, experiment, open_run, saved_config
from .timing import time_iterations

BENCH_VERSION = "1"


def for_hardware(gpu: str, cpu: Callable[[int], SweepFlags], cuda: Callable[[int], SweepFlags]) -> SweepFlags:
    """The preset --gpu picks (auto: this machine's), over the degrees of the world the launch plans."""
    world = planned_world()[0]
    return replace(cpu(world) if get_preset(gpu).name == "cpu" else cuda(world), gpu=gpu)


class Sweep(NamedTuple):
    """What an attention lab plugs into the runner."""

    lab: str  # tp-attention: the header's name and the CPU target a GPU-less --require-gpu points to
    folder: Path  # the lab's folder: results/ and runs/ are in it
    degree: str  # tp: the degree's flag and mesh dimension
    config: type  # the lab's BenchConfig
    preset: Callable[[str], Any]  # preset(gpu): the config --gpu picks
    check: Callable[[Any, int], None]  # the lab's shape rules at `world` ranks: ValueError, one line
    tables: Callable[[Any, str], Sequence[Table | None]]  # its CSVs for a run tag; None: one this sweep leaves out
    measure: Callable[[Any, DistInfo, dict, list], None]  # (cfg, env, meshes by degree, writers as tables)
    describe: Callable[[Any], str]  # the sweep, in the header line
    operational: tuple[str, ...] = ()  # flags that change no row (with --require-gpu and the run flags)


def _plan(sweep: Sweep, cfg: Any, tag: str) -> tuple[RunPlan, list[Table | None]]:
    tables = list(sweep.tables(cfg, tag))
    plan = RunPlan.beside(cfg.results_dir(sweep.folder), tag, [t for t in tables if t], config=saved_config(cfg))
    return plan, tables


def run_sweep(sweep: Sweep, argv: list[str] | None, description: str | None) -> int:
    """The lab's runner: bench.py's main (the module docstring)."""
    cfg = parse_preset(sweep.config, argv, sweep.preset, description=description, prog="bench.py")
    world, _, nnodes = planned_world()
    try:
        hw = get_preset(cfg.gpu)
        kind = device_kind(hw)
        if cfg.require_gpu and kind != "cuda":
            raise ValueError(f"this target measures a GPU and torch sees none (CPU runs: make {sweep.lab})")
        cfg = replace(cfg, gpu=hw.name)
        for d in cfg.degrees:
            if world % d:
                raise ValueError(f"--{sweep.degree} {d} must divide the number of ranks ({world}; NPROC x NNODES)")
        sweep.check(cfg, world)
        changed = experiment(cfg, sweep.preset(hw.name), (*sweep.operational, "require_gpu"))
        check_before_launch(_plan(sweep, cfg, hw.run_tag(world, nnodes))[0], cfg)
    except ValueError as e:  # RunError and SchemaMismatch are ValueErrors
        fail(str(e), 2)
    with distributed(device=kind) as env:
        torch.set_float32_matmul_precision("highest")  # no TF32 on GPU: fp32 must mean fp32 here
        meshes = {d: init_device_mesh(kind, (env.world_size // d, d), mesh_dim_names=("replica", sweep.degree))
                  [sweep.degree] for d in cfg.degrees}
        plan, tables = _plan(sweep, cfg, hw.run_tag(env.world_size, env.nnodes))
        with open_run(plan, cfg, env, provenance(env, BENCH_VERSION), changed) as run:
            print0(f"{sweep.lab}: {env.world_size} ranks on {env.device} ({env.backend}), {sweep.describe(cfg)}"
                   + (f" -> {run.path}" if run.path else ""))
            opened = iter(run.writers)
            sweep.measure(cfg, env, meshes, [next(opened) if t else NoWriter() for t in tables])
    return 0


def fill(writer, items: Sequence, desc: str, key: Callable[[Any], dict], rows: Callable[[Any], list[dict]]) -> None:
    """Measure each item whose row key rank 0's writer does not hold yet (every rank learns which from rank 0: a
    --resume skips what it measured), and write its rows (rank 0)."""
    for item in tqdm(items, desc=desc, disable=True if get_rank() != 0 else None):
        if not from_rank0(writer.done(key(item))):
            writer.write_many(rows(item))


def time_interleaved(steps: dict[str, Callable[[], None]], warmup: int, iters: int,
                     device: torch.device) -> dict[str, list[float]]:
    """Seconds per step of each implementation: `warmup` untimed calls each, then `iters` rounds that time each once,
    in turn (drift on a shared machine hits all alike); a sample is the max over ranks."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(iters):
        for name, step in steps.items():
            samples[name] += time_iterations(step, warmup=0, iters=1, device=device).samples_s
    return samples


def verify_main(config: type, preset: Callable[[], Any], degree: str, check: Callable[[Any, Any, torch.device], Any],
                argv: list[str] | None, description: str | None,
                refuse: Callable[[Any, str], None] | None = None) -> int:
    """The verify command: one configuration of `config` (flags over preset()) checked by check(cfg, mesh, device) on
    a mesh of its degree (the other ranks run replicas), its result as one JSON line; exit 0 when it passed, 1 when
    not, 2 on bad input (checked before any rank starts; `refuse(cfg, device kind)` adds the lab's own refusals)."""
    cfg = parse_preset(config, argv, preset, keys=(), description=description, prog="verify.py")
    world, n = planned_world()[0], getattr(cfg, degree)  # checked before any rank starts (the launcher's check pass)
    try:
        kind = device_kind(get_preset(cfg.gpu))
        if world % n:
            raise ValueError(f"--{degree} {n} must divide the number of ranks ({world}); the rest are replicas")
        if refuse is not None:
            refuse(cfg, kind)
    except ValueError as e:
        fail(str(e), 2)
    torch.set_float32_matmul_precision("highest")  # no TF32 on GPU: fp32 must mean fp32 here
    with distributed(device=kind) as env:
        mesh = init_device_mesh(kind, (env.world_size // n, n), mesh_dim_names=("replica", degree))
        result = check(cfg, mesh[degree], env.device)
        print0(json.dumps(result.as_json()))
    return 0 if result.passed else 1
