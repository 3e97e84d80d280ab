"""GPU only: how much communication does compute hide? torch.profiler on a few steps, per strategy,
with FSDP2's explicit prefetching off and on.

Every CUDA kernel of the profiled steps is an interval on the device timeline; NCCL kernels are
communication, the rest compute. Exposed communication = the time some NCCL kernel runs while no
compute kernel does (|comm| - |comm n compute|, on the unions of intervals). It is the part of the
communication the step pays for in full; the FSDP paper (Zhao et al. 2023, section 6.3) reports
backward prefetch alone worth ~18% on GPT-175B for exactly this reason.

On one GPU there is nothing to hide: FSDP2 issues no collectives at world size 1 and NCCL's
one-rank all-reduce is a local copy. The numbers mean something from 2 GPUs up. Nothing here runs
on CPU (the interval arithmetic is tested on its own). bench.py runs it per strategy (Run.profile) and
writes results/overlap_<hw>.csv with the columns below.
"""

from __future__ import annotations

import torch

from strategies import Trainer

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
