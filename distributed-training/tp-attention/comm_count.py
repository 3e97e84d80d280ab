"""Count the collectives a piece of code issues, and the bytes they move, at the dispatcher.

    with CommCounter(tp=2) as fwd:
        y = block(x)
    fwd.counts        # {"all_reduce": 2}
    fwd.wire_bytes    # bytes each rank sends, under the ring algorithm

Counted at the dispatcher (common/collective_calls.py), which sees the c10d ops behind
torch.distributed's all_reduce / all_gather_single / reduce_scatter_single and the _c10d_functional
ops DTensor issues, forward and backward alike. Counting there, rather than inside our own f and g,
also catches a collective we did not mean to issue: anything collective that is not one of the
three kinds below is counted under its own op name, so nothing hides.

Bytes: each collective's *full* tensor N (all-reduce: the tensor; all-gather: the gathered
output; reduce-scatter: the input before scattering) is read off the op's arguments and result,
and each rank's traffic is N times the ring factor: 2(t-1)/t for all-reduce and (t-1)/t for
all-gather and reduce-scatter, the factors nccl-tests uses for bus bandwidth (nccl-tests
doc/PERFORMANCE.md; common/collective_cost.busbw_factor). That is what a ring
moves, the model behind SC21's 8bsh(t-1)/t. Other algorithms move other bytes: NCCL may pick
tree or NVLink SHARP, and gloo implements reduce-scatter as an all-reduce followed by a local
chunk (pytorch/pytorch#118911), twice the ring's bytes.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._pytree import tree_flatten

from common.collective_calls import CollectiveCalls
from common.collective_cost import busbw_factor

RING = ("all_reduce", "all_gather", "reduce_scatter")  # the kinds a ring moves busbw_factor x the full tensor for


def tp_bytes_per_layer(batch: int, seq_len: int, d_model: int, tp: int, elem_bytes: int) -> float:
    """Bytes per rank per transformer layer, forward + backward: 8*b*s*h*(t-1)/t elements.

    Narayanan et al. 2021 (SC21, arXiv 2104.04473, section 3.2): two all-reduces of b*s*h forward and
    two backward per layer; with sequence parallelism the same bytes as all-gathers + reduce-scatters
    (Korthikanti et al. 2022, section 4.2.2).
    """
    return 8.0 * batch * seq_len * d_model * (tp - 1) / tp * elem_bytes


class CommCounter(CollectiveCalls):
    """Counts collectives by kind and sums their full-tensor bytes while active (see the module doc)."""

    def __init__(self, tp: int):
        super().__init__()
        self.tp = tp
        self.tensor_bytes: Counter[str] = Counter()

    def seen(self, kind: str, name: str, args: tuple, kwargs: dict, out) -> None:
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        self.tensor_bytes[kind] += max((t.numel() * t.element_size() for t in tensors), default=0)

    @property
    def wire_bytes(self) -> float:
        """Bytes each rank sends for the counted collectives under the ring algorithm."""
        return sum(n * busbw_factor(kind, self.tp) for kind, n in self.tensor_bytes.items() if kind in RING)
