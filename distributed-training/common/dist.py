"""The torchrun environment contract, implemented once for every lab.

A process is part of a distributed job if and only if torchrun (or anything that speaks its
contract: Slurm + torchrun, the test helper in `testkit`) set RANK, LOCAL_RANK and
WORLD_SIZE. Otherwise it runs as a single process, still inside a one-rank process group so
that lab code can call collectives unconditionally.

    with distributed(device="auto", timeout_s=300) as env:
        print0(f"rank {env.rank} of {env.world_size} on {env.device} ({env.backend})")

Backend: NCCL only when CUDA is there (the CPU wheel has no NCCL at all, and asking for
"cpu:gloo,cuda:nccl" raises), gloo otherwise. The device is set *before* init_process_group so
NCCL binds its communicator to the right GPU (select_device: a runner that probes the GPU before its
process group calls it first), and an explicit timeout makes a dead or stuck
peer an error instead of a hang.

Checking arguments before torchrun: with DT_CHECK_ARGS=1 in the environment, distributed() exits 0
instead of starting, so a runner validates everything it can before its process group exists and
then stops. common.launch (make's torchrun) runs every script that way first, in one plain process,
with DT_PLANNED_WORLD/_LOCAL telling it the world it will get (planned_world()): bad input is one
line and exit 2, not N ranks' copies wrapped in torchrun's ChildFailedError (exit 1).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterator

import torch
import torch.distributed as dist

_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@dataclass(frozen=True)
class DistInfo:
    """Who this process is. Passed around instead of globals."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def nnodes(self) -> int:
        # torchrun starts the same number of workers on every node (--nproc-per-node).
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return all(v in os.environ for v in _TORCHRUN_VARS)


def resolve_device(device: str, local_rank: int) -> torch.device:
    """'auto' -> cuda:<local_rank> when CUDA is there, else cpu; 'cpu' / 'cuda' force one."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda was asked for but torch sees no CUDA device (see `make doctor`)")
    if device == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def select_device(device: str = "auto") -> torch.device:
    """This rank's device, made current before anything else touches CUDA: cuda:<LOCAL_RANK> (or cpu).

    Call it first thing in a rank, before any check that probes the GPU: a bare `cuda` (a capability
    query, a probe tensor) means the current device, which is GPU 0 until set_device, so 8 ranks that
    probe first put 8 CUDA contexts (~500 MiB each) on GPU 0. distributed() calls it too."""
    local_rank = int(os.environ["LOCAL_RANK"]) if launched_by_torchrun() else 0
    dev = resolve_device(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    return dev


@contextmanager
def distributed(device: str = "auto", timeout_s: float = 300.0) -> Iterator[DistInfo]:
    """Initialise the default process group from the torchrun environment and tear it down.

    Without torchrun variables this is a one-rank group on an in-memory store, so the same
    lab code runs as `python run.py` and as `torchrun --nproc-per-node N run.py`.
    """
    if os.environ.get("DT_CHECK_ARGS") == "1":
        raise SystemExit(0)  # the arguments passed every check made before this point
    if launched_by_torchrun():
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ["LOCAL_RANK"])
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    else:
        rank, world, local_rank, local_world = 0, 1, 0, 1
    dev = select_device(device)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    kwargs: dict = {"backend": backend, "timeout": timedelta(seconds=timeout_s)}
    if dev.type == "cuda":
        kwargs["device_id"] = dev  # eager NCCL init: a missing peer fails here, not mid-sweep
    if not launched_by_torchrun():
        kwargs.update(store=dist.HashStore(), rank=0, world_size=1)
    already = dist.is_initialized()
    if not already:
        dist.init_process_group(**kwargs)
    try:
        yield DistInfo(rank, local_rank, world, local_world, dev, backend)
    finally:
        if not already and dist.is_initialized():
            dist.destroy_process_group()


def from_rank0(obj, group=None):
    """Rank 0's value of a picklable object on every rank of `group` (e.g. what only rank 0 read from a CSV)."""
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    return box[0]


REDUCTIONS = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "sum": dist.ReduceOp.SUM,
              "mean": dist.ReduceOp.SUM}  # mean: a sum, divided by the group's size


def reduce_across_ranks(values, reduce: str = "max", group=None) -> list[float]:
    """Element-wise max, min, sum or mean of a list of numbers over the ranks of `group`; every rank gets it.

    One all-reduce of float64 (exact for byte counts up to 2^53), on the GPU when the group is NCCL's."""
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return [float(v) for v in values]
    backend = dist.get_backend(group)
    dev = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=REDUCTIONS[reduce], group=group)
    if reduce == "mean":
        t /= dist.get_world_size(group)
    return t.tolist()


def get_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", 0))


def print0(*args, **kwargs) -> None:
    """print() on global rank 0 only, flushed so logs interleave sensibly under torchrun."""
    if get_rank() == 0:
        kwargs.setdefault("flush", True)
        print(*args, **kwargs)


def fail(msg: str, code: int = 1) -> None:
    """Stop with one clear line (every rank exits; who prints it: common.failures.report)."""
    from .failures import report
    report(msg, code)
    raise SystemExit(code)


def planned_world() -> tuple[int, int, int]:
    """(world, local world, nodes) this run has, or will have: from torchrun's variables inside a
    rank, from common.launch's DT_PLANNED_* in its check pass before the ranks start, else 1 rank."""
    if launched_by_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    elif "DT_PLANNED_WORLD" in os.environ:
        world = int(os.environ["DT_PLANNED_WORLD"])
        local = int(os.environ.get("DT_PLANNED_LOCAL", world))
    else:
        world = local = 1
    return world, local, max(1, world // max(1, local))


def ranks_phrase(world: int, nnodes: int = 1) -> str:
    """'16 ranks (2 nodes x 8)' or '4 ranks': how a refusal names the world it was checked against."""
    return f"{world} rank{'s' if world != 1 else ''}" + (f" ({nnodes} nodes x {world // nnodes})" if nnodes > 1 else "")


def check_batch_split(global_batch: int, grad_accum: int, world: int, nnodes: int = 1,
                      flag: str = "--batch") -> None:
    """A global batch of sequences per optimizer step, cut into `grad_accum` micro-batches whose rows are
    split evenly over the ranks (common.data): ValueError (one line, exit 2 upstream) unless it divides."""
    if global_batch % (grad_accum * world):
        micro = f"{grad_accum} micro-batches" if grad_accum > 1 else "one micro-batch"
        raise ValueError(f"{flag} {global_batch} (sequences per step, in {micro}) does not split evenly over "
                         f"{ranks_phrase(world, nnodes)}: use a multiple of {grad_accum * world}, "
                         "or other NPROC/NNODES")
