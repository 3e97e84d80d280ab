"""GPU only: how much communication does compute hide? torch.profiler on a few steps, per strategy,
with FSDP2's explicit prefetching off and on.

Every CUDA kernel of the profiled steps is an interval on the device timeline; NCCL kernels are
communication, the rest compute. Exposed communication = the time some NCCL kernel runs while no
compute kernel does (|comm| - |comm n compute|, on the unions of intervals). It is the part of the
communication the step pays for in full; the FSDP paper (Zhao et al. 2023, section 6.3) reports
backward prefetch alone worth ~18% on GPT-175B for exactly this reason.

On one GPU there is nothing to hide: FSDP2 issues no collectives at world size 1 and NCCL's
one-rank all-reduce is a local copy. The numbers mean something from 2 GPUs up. Nothing here runs
on CPU (the interval arithmetic is tested on its own).
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from common.dist import from_rank0
from common.results import ResultsWriter, provenance
from strategies import Trainer

if TYPE_CHECKING:
    from bench import Run

Interval = tuple[float, float]
COLUMNS = ["strategy", "prefetch", "profiled_steps", "step_time_ms", "compute_ms", "comm_ms", "exposed_comm_ms",
           "exposed_fraction", "n_comm_kernels"]
KEY = ["strategy", "prefetch", "world_size", "nnodes"]


def union(intervals: list[Interval]) -> list[Interval]:
    """Merge overlapping [start, end) intervals; the result is sorted and disjoint."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals: list[Interval]) -> float:
    return sum(e - s for s, e in intervals)


def overlap_length(a: list[Interval], b: list[Interval]) -> float:
    """Total length of the intersection of two disjoint sorted interval lists (two-pointer sweep)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def exposed(comm: list[Interval], compute: list[Interval]) -> tuple[float, float, float]:
    """(compute time, communication time, communication not overlapped by compute)."""
    cu, pu = union(comm), union(compute)
    return length(pu), length(cu), length(cu) - overlap_length(cu, pu)


def kernel_intervals(prof) -> tuple[list[Interval], list[Interval]]:
    """(communication, compute) CUDA kernel intervals in microseconds from a finished profile."""
    comm, compute = [], []
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        span = (ev.time_range.start, ev.time_range.end)
        (comm if "nccl" in ev.name.lower() else compute).append(span)
    return comm, compute


def profile_trainer(tr: Trainer, get_batch, steps: int = 3, warmup: int = 2) -> dict:
    for i in range(warmup):
        tr.step(get_batch(i))
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.profiler.profile(activities=acts) as prof:
        start.record()
        for i in range(steps):
            tr.step(get_batch(warmup + i))
        end.record()
        torch.cuda.synchronize()
    comm, compute = kernel_intervals(prof)
    comp_us, comm_us, exp_us = exposed(comm, compute)
    return {"profiled_steps": steps, "step_time_ms": start.elapsed_time(end) / steps,
            "compute_ms": comp_us / 1e3 / steps,
            "comm_ms": comm_us / 1e3 / steps, "exposed_comm_ms": exp_us / 1e3 / steps,
            "exposed_fraction": exp_us / comm_us if comm_us else 0.0, "n_comm_kernels": len(comm)}


def profile_all(run: "Run") -> None:
    """Every strategy of the run, prefetch off and (for FSDP2) on; rows in results/overlap_<hw>.csv."""
    from bench import RESULTS  # the runner owns the file layout
    cfg, env = run.cfg, run.env
    writer = ResultsWriter(Path(RESULTS) / f"overlap_{run.preset.tag}.csv", COLUMNS, KEY,
                           provenance(env, "1"), resume=cfg.resume or cfg.append, enabled=env.is_main)
    micro = run.micro_size("strong")
    plan = [(s, p) for s in cfg.strategies if not (s == "single" and env.world_size > 1)
            for p in ((False, True) if s in ("zero2", "zero3", "hsdp") else (False,))]
    todo = from_rank0([(s, p) for s, p in plan if not writer.done({"strategy": s, "prefetch": p})])
    for strategy, prefetch in todo:
        tr = run.trainer(strategy, prefetch)
        stats = profile_trainer(tr, lambda i: run.batches(i, micro))
        # Max over ranks: the slowest rank's exposed communication is what the step waits for.
        t = torch.tensor([stats["exposed_comm_ms"], stats["comm_ms"]], device=env.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        stats["exposed_comm_ms"], stats["comm_ms"] = t.tolist()
        stats["exposed_fraction"] = stats["exposed_comm_ms"] / stats["comm_ms"] if stats["comm_ms"] else 0.0
        writer.write({"strategy": strategy, "prefetch": prefetch, **stats})
        del tr
        gc.collect()
        torch.cuda.empty_cache()
