"""The communication of Megatron tensor parallelism: four autograd Functions, one per arrow.

Shoeybi et al. 2019 (Megatron-LM, arXiv 1909.08053, section 3, Fig. 3) put two conjugate
operators around every tensor-parallel region (an attention block or an MLP):

    f  identity forward, all-reduce backward   at the entry: the input is replicated, and each
                                               rank's column-parallel matmuls produce only a
                                               partial dL/dX that must be summed
    g  all-reduce forward, identity backward   at the exit, after the row-parallel matmul whose
                                               per-rank outputs are partial sums of Y

Korthikanti et al. 2022 (arXiv 2205.05198, section 4.2.2) shard the activations *between* the
regions along the sequence (sequence parallelism) and replace the pair with another one that
moves the same bytes (an all-reduce is a reduce-scatter followed by an all-gather):

    gather_seq          all-gather on the sequence forward, reduce-scatter backward   (entry)
    reduce_scatter_seq  reduce-scatter on the sequence forward, all-gather backward   (exit)

Why hand-written Functions: torch.distributed.nn.functional.all_reduce is differentiable, but
its backward all-reduces the gradient *again*; with the loss replicated on every TP rank that
multiplies every upstream gradient by t (measured: ../shared/reference/cpu-feasibility.md
section 4). g's backward must be the identity.

At t = 1 every operator is the identity and issues no collective, as in Megatron and picotron.
`without_communication()` swaps the collectives for local stand-ins of the same shapes, so that
the benchmark can time the same block with its communication removed (results then are wrong).
Activations are batch-first (B, T, d) like the common GPT; Megatron keeps them (T, B, d) so that
the sequence is dim 0 and the gathers need no transposes, which here cost one copy each.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.distributed as dist

# torch 2.13 renamed the tensor-in/tensor-out collectives (the old names warn); older torch has only the old ones.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass(frozen=True)
class TPGroup:
    """The tensor-parallel group a module belongs to: its process group, size t and this rank's index."""

    group: dist.ProcessGroup | None
    size: int
    rank: int

    @classmethod
    def of(cls, group: dist.ProcessGroup | None = None) -> "TPGroup":
        return cls(group, dist.get_world_size(group), dist.get_rank(group))


_communicate = True


@contextmanager
def without_communication() -> Iterator[None]:
    """Replace every collective in this module by a local stand-in of the same shapes (timing only)."""
    global _communicate
    before, _communicate = _communicate, False
    try:
        yield
    finally:
        _communicate = before


def _all_reduce_(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    if _communicate:
        dist.all_reduce(x, group=tp.group)
    return x


def _gather_seq(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """(B, T/t, d) on each rank -> (B, T, d), rank r's rows at r*T/t."""
    B, T_local, d = x.shape
    if not _communicate:
        return x.repeat(1, tp.size, 1)
    chunks = x.new_empty((tp.size * B, T_local, d))  # the collective concatenates the ranks' inputs along dim 0
    _all_gather(chunks, x.contiguous(), group=tp.group)
    return chunks.view(tp.size, B, T_local, d).movedim(0, 1).reshape(B, tp.size * T_local, d)  # (B, T, d)


def _reduce_scatter_seq(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """(B, T, d) partial sums on each rank -> (B, T/t, d): rank r's rows, summed over ranks."""
    B, T, d = x.shape
    chunks = x.reshape(B, tp.size, T // tp.size, d).movedim(1, 0)  # (t, B, T/t, d), chunk r for rank r
    if not _communicate:
        return chunks[tp.rank].contiguous()
    out = x.new_empty((B, T // tp.size, d))
    _reduce_scatter(out, chunks.reshape(tp.size * B, T // tp.size, d), group=tp.group)  # rank r: summed chunks[r]
    return out


class _CopyToTP(torch.autograd.Function):
    """f: identity forward; backward sums the partial input-gradients of the ranks' column shards."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
        ctx.tp = tp
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        # In place, as Megatron does: the gradient arriving here is the sum of the column-parallel
        # matmuls' input-gradients, a fresh tensor nobody else holds.
        return _all_reduce_(grad.contiguous(), ctx.tp), None


class _ReduceFromTP(torch.autograd.Function):
    """g: forward sums the row-parallel partial outputs; backward passes the (replicated) gradient on."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
        # In place on the row-parallel matmul's output, which no one saved for backward.
        ctx.mark_dirty(x)
        return _all_reduce_(x, tp)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


class _GatherSeq(torch.autograd.Function):
    """Sequence-parallel entry: all-gather the sequence shards; backward reduce-scatters dL/dX."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
        ctx.tp = tp
        return _gather_seq(x, tp)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _reduce_scatter_seq(grad, ctx.tp), None


class _ReduceScatterSeq(torch.autograd.Function):
    """Sequence-parallel exit: reduce-scatter the partial outputs; backward all-gathers dL/dY."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
        ctx.tp = tp
        return _reduce_scatter_seq(x, tp)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _gather_seq(grad, ctx.tp), None


def copy_to_tp(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """f (region entry, input replicated on every rank)."""
    return x if tp.size == 1 else _CopyToTP.apply(x, tp)


def reduce_from_tp(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """g (region exit): the sum over ranks of x, replicated on every rank."""
    return x if tp.size == 1 else _ReduceFromTP.apply(x, tp)


def gather_seq(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """Sequence-parallel region entry: (B, T/t, d) -> (B, T, d)."""
    return x if tp.size == 1 else _GatherSeq.apply(x, tp)


def reduce_scatter_seq(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    """Sequence-parallel region exit: (B, T, d) partial sums -> this rank's (B, T/t, d) of the total."""
    return x if tp.size == 1 else _ReduceScatterSeq.apply(x, tp)
