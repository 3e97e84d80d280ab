"""Timing, done the same way in every lab.

    t = time_iterations(lambda: dist.all_reduce(x), warmup=5, iters=20, device=env.device)
    t.median_s, t.min_s, t.max_s, t.samples_s, t.method, t.reduction, t.loop_s

The method (after nccl-tests' BenchTime and the ml-engineering benchmarks):
- `warmup` untimed iterations first (first calls pay for connection set-up, allocator growth,
  NCCL channel creation, autotuning);
- a barrier before each timed iteration so every rank starts it together; the barrier itself is
  outside the timed region;
- on GPU the iteration is bracketed by CUDA events on the current stream (device time, not host
  launch time); on CPU by time.perf_counter (gloo collectives return when they are complete);
- the raw per-iteration samples are kept, and after the loop they are reduced across ranks with
  one all-reduce: by default MAX, because a collective is only as fast as its slowest rank;
- beside them, nccl-tests' own statistic (src/common.cu): one timer around the whole loop divided by
  the iterations, averaged over ranks (its default -a 1): `loop_s`. Back-to-back it is the mean time
  per call; with barriers (nccl-tests -z 1) the barriers are inside the loop, as they are there.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from .dist import reduce_across_ranks


@dataclass(frozen=True)
class Timing:
    samples_s: tuple[float, ...]  # per timed iteration, already reduced across ranks
    method: str  # "cuda_event" or "perf_counter"
    reduction: str  # e.g. "max over 4 ranks"
    loop_s: float = math.nan  # nccl-tests' statistic: each rank's loop time / iterations, mean over ranks

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def max_s(self) -> float:
        return max(self.samples_s)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.samples_s)


def _barrier(group) -> None:
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.barrier(group=group)


def time_iterations(fn: Callable[[], object], *, warmup: int, iters: int, device: torch.device,
                    group=None, reduce: str = "max", barrier: bool = True) -> Timing:
    """Run fn warmup+iters times and return the timed iterations' durations.

    Collective: every rank of `group` must call it with the same warmup/iters.
    """
    if iters <= 0 or warmup < 0:
        raise ValueError(f"iters must be > 0 and warmup >= 0, got iters={iters}, warmup={warmup}")
    cuda = device.type == "cuda"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize(device)
    samples: list[float] = []
    if cuda:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for start, end in events:
            if barrier:
                _barrier(group)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        samples = [s.elapsed_time(e) / 1e3 for s, e in events]
        loop = events[0][0].elapsed_time(events[-1][1]) / 1e3
    else:
        t_loop = time.perf_counter()
        for _ in range(iters):
            if barrier:
                _barrier(group)
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        loop = time.perf_counter() - t_loop
    reduced = reduce_across_ranks(samples, reduce, group)
    (loop_mean,) = reduce_across_ranks([loop / iters], "mean", group)
    return Timing(tuple(reduced), "cuda_event" if cuda else "perf_counter", _reduction_label(reduce, group), loop_mean)


def _reduction_label(reduce: str, group) -> str:
    n = dist.get_world_size(group) if dist.is_initialized() else 1
    return f"{reduce} over {n} ranks" if n > 1 else "single rank"


class StepTimer:
    """Duration of a training step: CUDA events on GPU (device time of everything queued between
    the two events, launch gaps included), perf_counter on CPU. The device is synchronised before
    the start so the previous step's queued work is not counted, and after the end to read the time.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._t0 = 0.0
        self.elapsed_s = 0.0

    def __enter__(self) -> "StepTimer":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._events[0].record()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self._events[1].record()
            self._events[1].synchronize()
            self.elapsed_s = self._events[0].elapsed_time(self._events[1]) / 1e3
        else:
            self.elapsed_s = time.perf_counter() - self._t0
