"""The collectives a piece of code issues, seen where every one of them passes: the dispatcher.

    with CollectiveCalls() as calls:
        y = block(x)
    calls.counts          # {"all_reduce": 2}
    calls.describe()      # 'all_reduce:2': the counts in one CSV cell (describe(counts) for saved counts)

A TorchDispatchMode sees every operator, including the c10d ops behind torch.distributed's collectives and
point-to-point calls (allreduce_, _allgather_base_, send, recv_, ...) and the _c10d_functional ops DTensor and
PyTorch's context parallelism issue, forward and backward alike, inside autograd Functions too; it is what
CommDebugMode (torch.distributed.tensor.debug) is built on. Counting there, rather than inside one's own code, also
catches a collective nobody meant to issue: one of no kind below is counted under its own op name, so nothing
hides. A subclass counts what it needs of each call in `seen` (tp-attention's CommCounter: ring bytes of each
collective's full tensor; cp-attention's Traffic: the bytes each rank sends).
"""

from __future__ import annotations

from collections import Counter

# Entering a dispatch mode imports torch._dynamo lazily (seconds); importing it here once lets forked ranks share it.
import torch._dynamo  # noqa: F401
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

KINDS = {
    "allreduce_": "all_reduce", "all_reduce": "all_reduce", "all_reduce_": "all_reduce",
    "_allgather_base_": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all_single": "all_to_all", "alltoall_base_": "all_to_all",
    "send": "send", "recv_": "recv", "recv_any_source_": "recv",
}
BOOKKEEPING = {"wait_tensor", "_wrap_tensor_autograd", "barrier"}  # the functional collectives' own ops; a barrier


def describe(counts: dict[str, int]) -> str:
    """e.g. 'recv:3 send:3': counts by kind in one cell."""
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items())) or "none"


class CollectiveCalls(TorchDispatchMode):
    """Counts every c10d / functional collective by kind while active, and hands each call to `seen`.

    defer_to_dtensor: let DTensor desugar first, so that the mode sees the local ops and the collectives its handlers
    issue (PyTorch's context parallelism runs its ring inside its SDPA handler on CUDA)."""

    defer_to_dtensor = False

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.defer_to_dtensor and any(t is DTensor for t in types):
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        if func.namespace in ("c10d", "_c10d_functional"):
            name = func._overloadpacket.__name__
            if name not in BOOKKEEPING:
                kind = KINDS.get(name, name)
                self.counts[kind] += 1
                self.seen(kind, name, args, kwargs or {}, out)
        return out

    def seen(self, kind: str, name: str, args: tuple, kwargs: dict, out) -> None:
        """One collective call of `kind` (the op `name`, its arguments and result); a subclass counts its bytes."""

    def describe(self) -> str:
        return describe(self.counts)
