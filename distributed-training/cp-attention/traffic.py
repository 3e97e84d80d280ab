"""The bytes one rank sends, counted at the dispatcher: point-to-point sends and the collectives PyTorch's
context parallelism rotates K/V with.

    with Traffic() as t:
        out = ring_attention(q, k, v, group)
    t.sent_bytes          # what this rank put on the wire
    t.counts              # {"send": 1, "recv": 1} per kind

Counted at the dispatcher (common/collective_calls.py): the c10d ops behind dist.batch_isend_irecv (send, recv_)
and the functional collectives behind PyTorch's rotaters (all_gather_into_tensor, all_to_all_single), inside
autograd Functions and DTensor's op handlers too (the mode steps aside for DTensor, as parallel-3d's footprint.py
does, so the collectives inside context_parallel's SDPA handler are seen).

What counts as sent, per rank:
    send                 the tensor, exactly (a receive sends nothing)
    all_gather           its own shard to each of the n-1 others: input x (n-1), the ring's traffic
                         (all_gather_into_tensor's output is n inputs; a ring forwards n-1 of them)
    all_to_all_single    the rows of its input addressed to other ranks (input_split_sizes; what it
                         addresses to itself stays): PyTorch's "alltoall" rotation is a ring shift that
                         addresses its whole buffer to the next rank; Ulysses sends N-1 of its N head groups
    reduce_scatter       the n-1 of its input's n shards that other ranks own (the all-gather CP's dK/dV)
    all_reduce           nothing counted as payload: the only one the CP attentions issue is their input check
                         (common/cp_checks.py, a few integers), seen in the calls column as all_reduce:1
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist

from common.collective_calls import CollectiveCalls


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _group(name_or_pg) -> dist.ProcessGroup:
    if isinstance(name_or_pg, str):
        from torch.distributed.distributed_c10d import _resolve_process_group
        return _resolve_process_group(name_or_pg)
    return dist.ProcessGroup.unbox(name_or_pg)


def _all_to_all_sent(t: torch.Tensor, input_splits, group) -> int:
    """Bytes of the rows of `t` addressed to ranks other than this one (equal splits when none are given)."""
    n, me = group.size(), group.rank()
    splits = list(input_splits) if input_splits else [t.shape[0] // n] * n
    row = _nbytes(t) // max(1, t.shape[0])
    return sum(rows * row for peer, rows in enumerate(splits) if peer != me)


def sent_by(kind: str, name: str, args) -> int:
    """Bytes this rank sends for one c10d / functional-collective call (see the module docstring)."""
    if kind == "send":
        return sum(_nbytes(t) for t in args[0])
    if name == "all_gather_into_tensor":  # (input, group_size, group_name)
        return _nbytes(args[0]) * (args[1] - 1)
    if name == "_allgather_base_":  # (output, input, group, ...)
        return _nbytes(args[1]) * (_group(args[2]).size() - 1)
    if name == "all_to_all_single":  # (input, output_split_sizes, input_split_sizes, group_name)
        return _all_to_all_sent(args[0], args[2], _group(args[3]))
    if name == "alltoall_base_":  # (output, input, group, output_split_sizes, input_split_sizes, ...)
        return _all_to_all_sent(args[1], args[4], _group(args[2]))
    if name == "_reduce_scatter_base_":  # (output, input, group, op, ...): the shards other ranks own
        n = _group(args[2]).size()
        return _nbytes(args[1]) * (n - 1) // n
    if name == "reduce_scatter_tensor":  # functional: (input, reduce_op, group_size, group_name)
        return _nbytes(args[0]) * (args[2] - 1) // args[2]
    return 0


class Traffic(CollectiveCalls):
    """Counts of every c10d / functional-collective call by kind, and the bytes this rank sends, while active."""

    defer_to_dtensor = True

    def __init__(self):
        super().__init__()
        self.sent: Counter[str] = Counter()

    def seen(self, kind: str, name: str, args: tuple, kwargs: dict, out) -> None:
        self.sent[kind] += sent_by(kind, name, args)

    @property
    def sent_bytes(self) -> int:
        return sum(self.sent.values())
