"""Column- and row-parallel linears, built by slicing the single-device module's weights.

For Y = X W^T + b with W of shape (out, in) (nn.Linear's layout):

    ColumnParallelLinear  rank r holds rows r of W (a block of output features) and of b:
                          Y_r = X W_r^T + b_r is this rank's slice of Y's last dim. No
                          communication: X must already be on every rank (f, or the sequence
                          all-gather, at the region entry puts it there).
    RowParallelLinear     rank r holds columns r of W (a block of input features) and consumes
                          the matching slice X_r of its input: X_r W_r^T is a partial sum of Y.
                          The sum over ranks (g, or the sequence reduce-scatter) happens inside,
                          and b is added once, after it.

Megatron-Core's ColumnParallelLinear applies f itself; here f sits once at the region entry
instead, because attention has three column-parallel projections (wq, wk, wv) reading the same
input: one f costs one backward all-reduce, one per projection would cost three. That is the
difference between DTensor's default plan and Megatron's (../shared/reference/fsdp-tp-anchors.md
sections 0 and 7.4).

Initialisation by slicing one master weight (Megatron's use_cpu_initialization, picotron's
master weight, ../shared/reference/fsdp-tp-anchors.md sections 5.3 and 6): every rank builds the
same single-device module from the same seed and keeps its slice, so TP = t and TP = 1 start from
the same function. Each parameter records where it came from (`param.master_slices`), which the
verify command uses to compare gradients, and parameters that are replicated but see only a
sequence shard carry `param.sequence_parallel = True`: their gradients are partial sums over the
TP group (Megatron all-reduces those once per step, as `sync_sequence_parallel_grads` does).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from mappings import TPGroup, reduce_from_tp, reduce_scatter_seq


@dataclass(frozen=True)
class MasterSlice:
    """Where (part of) a local parameter lives in the single-device module's parameter `name`."""

    name: str  # e.g. "attn.wq.weight"
    dim: int | None  # the master dim that was cut; None = replicated (this rank holds all of it)
    start: int = 0  # [start, stop) along dim
    stop: int = 0
    local_start: int = 0  # rows [local_start, local_start + stop - start) of the local parameter
    whole_local: bool = True  # the slice fills the local parameter (False: one part of a fused weight)

    def of_master(self, master: torch.Tensor) -> torch.Tensor:
        return master if self.dim is None else master.narrow(self.dim, self.start, self.stop - self.start)

    def of_local(self, local: torch.Tensor) -> torch.Tensor:
        return local if self.whole_local else local.narrow(0, self.local_start, self.stop - self.start)


def _param(data: torch.Tensor, *slices: MasterSlice, sequence_parallel: bool = False) -> nn.Parameter:
    p = nn.Parameter(data.detach().clone())  # never alias the master
    p.master_slices = slices
    p.sequence_parallel = sequence_parallel
    return p


def replicate(module: nn.Module, prefix: str, sequence_parallel: bool) -> nn.Module:
    """A copy of a replicated module (LayerNorm) whose parameters record their master and SP status."""
    clone = copy.deepcopy(module)
    for name, p in list(clone.named_parameters(recurse=False)):
        setattr(clone, name, _param(p, MasterSlice(prefix + name, None), sequence_parallel=sequence_parallel))
    return clone


class ColumnParallelLinear(nn.Module):
    """This rank's rows of one or more master linears (several: a fused projection such as QKV)."""

    def __init__(self, parts: Sequence[tuple[str, nn.Linear, int, int]]):
        """parts: (master name, master linear, first row, last row + 1), concatenated in this order."""
        super().__init__()
        w_slices, b_slices, offset = [], [], 0
        for name, lin, start, stop in parts:
            whole = len(parts) == 1
            w_slices.append(MasterSlice(f"{name}.weight", 0, start, stop, offset, whole))
            b_slices.append(MasterSlice(f"{name}.bias", 0, start, stop, offset, whole))
            offset += stop - start
        self.weight = _param(torch.cat([lin.weight[a:b] for _, lin, a, b in parts]), *w_slices)
        with_bias = [lin.bias is not None for _, lin, _, _ in parts]
        if any(with_bias) != all(with_bias):
            raise ValueError("fused parts must all have a bias or all have none")
        self.bias = _param(torch.cat([lin.bias[a:b] for _, lin, a, b in parts]), *b_slices) if all(with_bias) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)  # (B, T, in) @ (in, out/t) -> (B, T, out/t)


class RowParallelLinear(nn.Module):
    """Columns [start, stop) of a master linear; the partial outputs are summed over the TP group."""

    def __init__(self, name: str, master: nn.Linear, start: int, stop: int, tp: TPGroup, sequence_parallel: bool):
        super().__init__()
        self.tp, self.sequence_parallel = tp, sequence_parallel
        self.weight = _param(master.weight[:, start:stop], MasterSlice(f"{name}.weight", 1, start, stop))
        # The bias is replicated and added after the reduction (adding it on every rank before would count it t times).
        self.bias = None if master.bias is None else \
            _param(master.bias, MasterSlice(f"{name}.bias", None), sequence_parallel=sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight)  # (B, T, in/t) @ (in/t, out) -> (B, T, out), a partial sum
        y = reduce_scatter_seq(y, self.tp) if self.sequence_parallel else reduce_from_tp(y, self.tp)
        return y if self.bias is None else y + self.bias


@torch.no_grad()
def sync_sequence_parallel_grads(params: Iterable[nn.Parameter], tp: TPGroup) -> None:
    """Sum over the TP group the gradients of replicated parameters that saw only a sequence shard.

    One all-reduce for all of them (flattened), once per step after backward, as Megatron-Core
    does for LayerNorm weights and row-parallel biases under sequence parallelism.
    """
    grads = [p.grad for p in params if getattr(p, "sequence_parallel", False) and p.grad is not None]
    if tp.size == 1 or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=tp.group)
    for g, synced in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(synced.view_as(g))
