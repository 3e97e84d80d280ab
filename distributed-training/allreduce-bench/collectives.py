"""The six collectives as torch.distributed calls: buffer shapes, the calls, exact test data.

Sizes and counts follow nccl-tests (see common/collective_cost.py for S and the bandwidth factors). For the
collectives whose S is split into n parts, each part is rounded down to a multiple of 16 bytes,
as nccl-tests' `*GetCollByteCount` does, so the size in a row can be a little under the one asked.

Correctness (nccl-tests' #wrong, after their verifiable/ kernels): every rank fills its input from
(rank, element index) with small non-negative integers, sparse enough that every partial sum stays
below the dtype's exact-integer limit (2^24 fp32, 2^11 fp16, 2^8 bf16). Any reduction order then
gives the exact result, and the output is compared for equality, element by element. The data
repeats with a short period, so expected outputs are built from one period, never per element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from common.collective_cost import PARTS

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
EXACT_INT_LIMIT = {torch.float32: 2**24, torch.float16: 2**11, torch.bfloat16: 2**8}
ALIGN_BYTES = 16  # nccl-tests rounds per-rank counts down to 16-byte multiples
ROOT = 0  # broadcast root, as nccl-tests' default -r 0

# torch 2.13 deprecates the *_tensor names for *_single (FutureWarning); older torch has only the old.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def shape(collective: str, size_bytes: int, n: int, dtype: torch.dtype) -> tuple[int, int]:
    """(count, actual size_bytes) for a requested size: counts as nccl-tests prints them.

    For the collectives whose S is split into n parts, the part is rounded down to a 16-byte
    multiple (so 1 KiB on 3 ranks is 3 x 336 B = 1008 B); a count of 0 means the size is too small.
    """
    elem = torch.tensor([], dtype=dtype).element_size()
    if collective in PARTS:
        per = (size_bytes // n // elem) // (ALIGN_BYTES // elem) * (ALIGN_BYTES // elem)
        return per, per * n * elem
    count = size_bytes // elem
    return count, count * elem


# ---- buffers and calls ------------------------------------------------------------------------

@dataclass
class Buffers:
    """The tensors of one collective call; `out` is what the correctness check reads."""

    inp: torch.Tensor
    out: torch.Tensor


IN_PLACE = ("all_reduce", "broadcast")  # torch has no out-of-place form of these


def moves_data(collective: str, n: int) -> bool:
    """Does one call move any bytes? On one rank an in-place all_reduce or broadcast is a no-op for NCCL
    (its time is launch overhead, its "bandwidth" meaningless), while the out-of-place collectives still
    copy their input into their output buffer (a device-local copy)."""
    return n > 1 or collective not in IN_PLACE


def allocate(collective: str, count: int, n: int, dtype: torch.dtype, device: torch.device) -> Buffers:
    def empty(k: int) -> torch.Tensor:
        return torch.empty(k, dtype=dtype, device=device)

    if collective in IN_PLACE:
        buf = empty(count)
        return Buffers(buf, buf)
    if collective == "all_gather":
        return Buffers(empty(count), empty(count * n))  # [count] -> [n * count]
    if collective == "reduce_scatter":
        return Buffers(empty(count * n), empty(count))  # [n * count] -> [count]
    if collective == "all_to_all":
        return Buffers(empty(count * n), empty(count * n))  # part p of inp goes to rank p
    if collective == "send_recv":
        return Buffers(empty(count), empty(count))
    raise ValueError(f"unknown collective {collective!r}")


def make_call(collective: str, bufs: Buffers, rank: int, n: int, group=None) -> Callable[[], None]:
    """A zero-argument function doing one blocking call of the collective (what the timer runs).

    `group` spans every rank (group rank = global rank), so ROOT and peers are global ranks too.
    """
    inp, out = bufs.inp, bufs.out
    if collective == "all_reduce":
        return lambda: dist.all_reduce(inp, group=group)
    if collective == "all_gather":
        return lambda: _all_gather(out, inp, group=group)
    if collective == "reduce_scatter":
        return lambda: _reduce_scatter(out, inp, group=group)
    if collective == "broadcast":
        return lambda: dist.broadcast(inp, src=ROOT, group=group)
    if collective == "all_to_all":
        return lambda: dist.all_to_all_single(out, inp, group=group)
    if collective == "send_recv":
        # nccl-tests' sendrecv: a ring shift, every rank sends to rank+1 and receives from rank-1 at
        # once. Batched, so NCCL groups the pair and neither side can deadlock waiting for the other.
        if n < 2:
            raise ValueError("send_recv needs at least 2 ranks")
        ops = [dist.P2POp(dist.isend, inp, (rank + 1) % n, group),
               dist.P2POp(dist.irecv, out, (rank - 1) % n, group)]

        def send_recv() -> None:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return send_recv
    raise ValueError(f"unknown collective {collective!r}")


# ---- exact test data --------------------------------------------------------------------------

def _stride(n: int, dtype: torch.dtype) -> int:
    # Values are 1..4 and a rank contributes to one element in `stride`, so any partial sum of an
    # element is at most 4 * ceil(n / stride) <= the dtype's exact-integer limit.
    return max(1, math.ceil(4 * n / EXACT_INT_LIMIT[dtype]))


def _period(n: int, dtype: torch.dtype) -> int:
    return math.lcm(4, _stride(n, dtype))


def _values(rank: int, start: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """One period of rank `rank`'s data from element `start` on, as int64 (the pattern repeats)."""
    i = torch.arange(start, start + _period(n, dtype))
    return (1 + (i + 3 * rank) % 4) * ((i + rank) % _stride(n, dtype) == 0)


def _tile(period: torch.Tensor, length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    reps = -(-length // period.numel())
    return period.to(device=device, dtype=dtype).repeat(reps)[:length]


def pattern(rank: int, start: int, length: int, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Rank `rank`'s data for elements [start, start + length) of its input buffer."""
    return _tile(_values(rank, start, n, dtype), length, dtype, device)


def reduced(ranks: range, start: int, length: int, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The exact sum over `ranks` of their data for elements [start, start + length)."""
    total = sum(_values(r, start, n, dtype) for r in ranks)
    return _tile(total, length, dtype, device)


def fill(collective: str, bufs: Buffers, rank: int, n: int) -> None:
    """Fresh input data (before timing and again before the check)."""
    x = bufs.inp
    if collective == "broadcast" and rank != ROOT:
        x.fill_(-1)  # anything but the root's data, so a broadcast that did nothing is caught
        return
    x.copy_(pattern(rank, 0, x.numel(), n, x.dtype, x.device))
    if bufs.out is not bufs.inp:
        bufs.out.fill_(-1)


def expected(collective: str, count: int, rank: int, n: int, dtype: torch.dtype,
             device: torch.device) -> torch.Tensor:
    """What `Buffers.out` must hold on `rank` after one call on freshly filled inputs."""
    if collective == "all_reduce":
        return reduced(range(n), 0, count, n, dtype, device)
    if collective == "all_gather":  # part q is rank q's input
        return torch.cat([pattern(q, 0, count, n, dtype, device) for q in range(n)])
    if collective == "reduce_scatter":  # the sum of every rank's part `rank`
        return reduced(range(n), rank * count, count, n, dtype, device)
    if collective == "all_to_all":  # part q is part `rank` of rank q's input
        return torch.cat([pattern(q, rank * count, count, n, dtype, device) for q in range(n)])
    if collective == "broadcast":
        return pattern(ROOT, 0, count, n, dtype, device)
    if collective == "send_recv":
        return pattern((rank - 1) % n, 0, count, n, dtype, device)
    raise ValueError(f"unknown collective {collective!r}")


def count_wrong(out: torch.Tensor, want: torch.Tensor) -> int:
    """Elements that differ from the exact expectation (0 ULP tolerance, as nccl-tests for sum)."""
    return int(torch.ne(out, want).sum().item())
