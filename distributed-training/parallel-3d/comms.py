"""Every collective and point-to-point transfer of a step, counted at the dispatcher, per mesh dimension.

A TorchDispatchMode sees each c10d op (FSDP2's all-gathers and reduce-scatters, pipelining's send and
recv) and each functional collective DTensor issues (TP's all-gathers, reduce-scatters, all-reduces),
forward and backward alike. CommDebugMode (torch.distributed.tensor.debug) is built the same way, but
its module tracker breaks when a stage module runs once per micro-batch inside one context, and it does
not say which process group a collective used; this log keeps the group, mapped to the mesh dimension
(pp, dp, cp or tp) it belongs to.

Bytes follow nccl-tests (doc/PERFORMANCE.md): the payload S of a collective is its full buffer (the
all-gather output, the reduce-scatter input, the all-reduced tensor, the tensor sent or received), and
the bus bytes one rank moves are S x 2(n-1)/n for all-reduce, S x (n-1)/n for all-gather and
reduce-scatter, S for a send (0 for a receive: the sender's link carries it), n the group size. Bus
bytes over bus bandwidth is the time a bandwidth-bound ring takes: the planner's units.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import torch
# Entering a dispatch mode imports torch._dynamo lazily (seconds); importing it once here lets forked ranks share it.
import torch._dynamo  # noqa: F401
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from common.collective_cost import COLLECTIVES, busbw_factor
from context_parallel import registered_group
from parallelize import shard_mesh

_KINDS = {
    "_allgather_base_": "all_gather", "allgather_": "all_gather", "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_out": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce", "broadcast_": "broadcast", "broadcast": "broadcast",
    "send": "send", "recv_": "recv", "recv_any_source_": "recv",
    "alltoall_base_": "all_to_all", "all_to_all_single": "all_to_all",
}
_BOOKKEEPING = {"wait_tensor", "_wrap_tensor_autograd", "barrier", "monitored_barrier_"}
_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "send", "recv")
_SHARD = " shard"  # mesh_groups' entry for FSDP2's dp x cp group (not a process-group name)
_ATTENTION = " attention"  # mesh_groups' entry naming CP attention's own group (context_parallel.attention_group)


def bus_factor(kind: str, n: int) -> float:
    """Bytes one rank moves per payload byte: nccl-tests' bus factor (common.collective_cost); a send moves its
    payload once, a receive nothing more (the sender's link carried it)."""
    if kind == "send":
        return busbw_factor("send_recv", 2)
    if n <= 1 or kind not in COLLECTIVES:
        return 0.0
    return busbw_factor(kind, n)


class Call(NamedTuple):
    dim: str  # pp, dp, tp, or the group's name when it is none of them
    kind: str  # all_gather, reduce_scatter, all_reduce, broadcast, send, recv, or the op's name
    payload_bytes: int
    group_size: int

    @property
    def bus_bytes(self) -> float:
        return self.payload_bytes * bus_factor(self.kind, self.group_size)


class Total(NamedTuple):
    dim: str
    kind: str
    count: int
    payload_bytes: int
    bus_bytes: float


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _sum_bytes(obj) -> int:
    return sum(_nbytes(t) for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor))


def _payload(namespace: str, kind: str, args, out) -> int:
    """The full buffer: c10d ops take (outputs, inputs, ...) for gathers and scatters, (tensors, ...) otherwise;
    a functional collective's full buffer is the larger of its input and its output."""
    if namespace == "c10d":
        return _sum_bytes(args[1] if kind == "reduce_scatter" else args[0])
    tensors = [t for t in tree_flatten((args, out))[0] if isinstance(t, torch.Tensor)]
    return max((_nbytes(t) for t in tensors), default=0)


class CollectiveLog(TorchDispatchMode):
    """Collect a Call per collective while active; `groups` maps process-group names to (dimension, size)."""

    def __init__(self, groups: dict[str, tuple[str, int]]):
        super().__init__()
        self.groups = groups
        self.calls: list[Call] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace in _NAMESPACES:
            name = func._overloadpacket.__name__
            call = self._call(func.namespace, name, args, kwargs or {}, out) if name not in _BOOKKEEPING else None
            if call is not None:  # 1-rank groups too: that FSDP2 at dp = 1 issues nothing is a tested fact
                self.calls.append(call)
        return out

    def _call(self, namespace: str, name: str, args, kwargs, out) -> Call:
        kind = _KINDS.get(name, name)
        dim, size, name = "unknown", 0, None
        for a in tree_flatten((args, kwargs))[0]:
            if isinstance(a, torch.ScriptObject) and "ProcessGroup" in str(a._type()):  # c10d ops carry the group
                pg = dist.ProcessGroup.unbox(a)
                name = pg.group_name
                dim, size = self.groups.get(name, (name, pg.size()))
            elif isinstance(a, str) and a in self.groups:  # functional collectives carry its name
                name = a
                dim, size = self.groups[a]
        if dim == "cp" and name != self.groups.get(_ATTENTION, ("",))[0]:  # CP attention has a group of its own:
            dim, size = self.groups.get(_SHARD, (dim, size))  # a collective on the mesh's cp group is FSDP2's (dp = 1)
        return Call(dim, kind, _payload(namespace, kind, args, out), size)

    def totals(self) -> list[Total]:
        """Count, payload and bus bytes per (dimension, kind), sorted."""
        acc: dict[tuple[str, str], list] = {}
        for c in self.calls:
            t = acc.setdefault((c.dim, c.kind), [0, 0, 0.0])
            t[0] += 1
            t[1] += c.payload_bytes
            t[2] += c.bus_bytes
        return [Total(d, k, n, p, b) for (d, k), (n, p, b) in sorted(acc.items())]

    def counts(self) -> Counter:
        return Counter((c.dim, c.kind) for c in self.calls)


def mesh_groups(mesh) -> dict[str, tuple[str, int]]:
    """Process-group name -> (mesh dimension, size), for every dimension of a DeviceMesh; with context parallelism
    the flattened dp x cp group FSDP2 shards over counts as "dp" (the gradient group, the planner's DP×CP)."""
    groups = {mesh[d].get_group().group_name: (d, mesh[d].size()) for d in mesh.mesh_dim_names}
    if "cp" in mesh.mesh_dim_names and mesh["cp"].size() > 1:
        flat = shard_mesh(mesh)  # at dp = 1 the same group as cp's: the CP entry stays, collectives go to _SHARD
        groups.setdefault(flat.get_group().group_name, ("dp", flat.size()))
        groups[_SHARD] = ("dp", flat.size())
        attention = registered_group(mesh)  # CP attention's own group: its collectives are "cp", whatever their kind
        if attention is not None:
            groups[attention.group_name] = ("cp", attention.size())
            groups[_ATTENTION] = (attention.group_name, attention.size())
    return groups
