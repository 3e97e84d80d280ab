"""The host work parallel-3d's step issues, counted as the framework issues it: the floor the planner prices.

A GPU runs what the host has launched, and a CPU rank is its own host: every aten op the step dispatches costs the
host a fixed time whatever its size (Python, the module call, autograd's recording and its engine, the dispatcher),
and an op on a DTensor costs more (sharding propagation, the local op, the wrapping). This module counts them for
one rank of a layout by running the real engine (engine.py, built by parallelize.py) on a tiny GPT under a
TorchDispatchMode, in one process that joins PyTorch's fake process group (torch.testing._internal.distributed.
fake_pg, private: collectives return at once) as rank 0 of the layout's world:

    ops           aten ops on plain tensors (forward, the autograd engine's backward ops, the optimizer's)
    dtensor_ops   aten ops with a DTensor argument (DTensor TP, FSDP2's sharded parameters in the optimizer)

and splits a step's count into its parts by differences of runs with 2 and 4 blocks and 1 and 2 micro-batches:

    per_layer     per block and micro-batch (forward, backward, a recompute's re-forward)
    per_layer_step per block and step (the optimizer's share of a block's parameters, FSDP2's once-a-step work)
    per_microbatch the embeddings, LM head and loss, the pipeline's sends, per micro-batch
    per_step      the rest (the optimizer's grouping, zero_grad, the loss)

planner/model/floor.py holds these counts as its table for the pytorch stack (PYTORCH_OPS), and
tests/test_host_ops.py recounts them here: the table is exact, not a guess. ranking.py's calibration uses
`tiny_block_ops` to turn a timed tiny block into a cost per op.

    PYTHONPATH=distributed-training python distributed-training/parallel-3d/host_ops.py   # print the table
"""

from __future__ import annotations

import collections
import sys
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

from common.model import GPTConfig

TINY = dict(vocab_size=256, seq_len=16, d_model=16, n_heads=4, d_ff=64)  # the op count does not depend on sizes


class Ops(NamedTuple):
    """Dispatched aten ops, by what they run on, and how many of them the autograd engine ran (the backward)."""
    ops: int = 0
    dtensor_ops: int = 0
    backward: int = 0  # of the two above, those dispatched while the autograd engine ran

    def __add__(self, o):  # noqa: D105
        return Ops(*(a + b for a, b in zip(self, o)))

    def __sub__(self, o):  # noqa: D105
        return Ops(*(a - b for a, b in zip(self, o)))

    def half(self) -> "Ops":
        if any(x % 2 for x in self):
            raise ValueError(f"{self} is not two equal parts")
        return Ops(*(x // 2 for x in self))


class Counter(TorchDispatchMode):
    """Counts every aten op dispatched while active: on DTensors (any DTensor argument) or plain tensors."""

    def __init__(self):
        super().__init__()
        self.by_kind = collections.Counter()
        self.by_op = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.by_kind["dtensor_ops" if any(issubclass(t, DTensor) for t in types) else "ops"] += 1
        self.by_kind["backward"] += torch._C._current_graph_task_id() != -1
        self.by_op[str(func)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> Ops:
        return Ops(self.by_kind["ops"], self.by_kind["dtensor_ops"], self.by_kind["backward"])


class Split(NamedTuple):
    """A step's ops in parts (module docstring)."""
    per_layer: Ops
    per_layer_step: Ops
    per_microbatch: Ops
    per_step: Ops


def step_ops(tp: int, pp: int, dp: int, *, zero: int = 3, recompute: str = "none", layers: int = 2,
             microbatches: int = 1, bf16: bool = False) -> Ops:
    """The ops one optimizer step dispatches on rank 0 of a tp x pp x dp layout of the tiny GPT (fake group)."""
    from at_scale import skip_p2p_vote
    from engine import Batch, Engine
    from parallelize import build_mesh
    from settings import Layout, Variant
    from torch.testing._internal.distributed.fake_pg import FakeStore

    g = GPTConfig(n_layers=layers, **TINY)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp * pp * dp)
    try:
        mesh = build_mesh("cpu", pp, dp, tp, 1)
        eng = Engine(g, Layout(tp, pp, dp, 1, microbatches, 1), Variant(zero, recompute, 1), mesh,
                     torch.device("cpu"), param_dtype=torch.bfloat16 if bf16 else None)
        if eng.schedule is not None:
            skip_p2p_vote(eng.schedule)
        rows = microbatches
        batch = Batch(torch.randint(0, g.vocab_size, (rows, g.seq_len)), torch.randint(0, g.vocab_size,
                                                                                     (rows, g.seq_len)))
        eng.train_step(batch)  # the first step makes the optimizer's state and the caches
        with Counter() as c:
            eng.train_step(batch)
        return c.total
    finally:
        dist.destroy_process_group()


def split(tp: int, pp: int, dp: int, *, zero: int = 3, recompute: str = "none", bf16: bool = False) -> Split:
    """A layout class's ops per block and micro-batch, per block and step, per micro-batch, per step (rank 0: the
    first pipeline stage, whose embeddings stand for the last stage's head in the per-micro-batch part)."""
    def c(layers, m):
        return step_ops(tp, pp, dp, zero=zero, recompute=recompute, layers=layers * pp, microbatches=m, bf16=bf16)
    c21, c41, c22, c42 = c(2, 1), c(4, 1), c(2, 2), c(4, 2)
    per_layer = ((c42 - c22) - (c41 - c21)).half()
    per_layer_step = (c41 - c21).half() - per_layer
    per_microbatch = c22 - c21 - per_layer - per_layer
    per_step = c21 - per_layer - per_layer - per_layer_step - per_layer_step - per_microbatch
    return Split(per_layer, per_layer_step, per_microbatch, per_step)


# The layout classes the planner's table holds (planner/model/floor.py PYTORCH_OPS): (tp > 1, FSDP2's ZeRO stage
# or 0 without FSDP, recompute) on one pipeline stage, in fp32 (the CPU ranking set) and bf16 (FSDP2's mixed
# precision, every GPU run).
CLASSES = [(tp, zero, rec) for tp in (1, 2) for zero in (0, 2, 3) for rec in ("none", "op", "full")]


def class_split(tp: int, zero: int, recompute: str, bf16: bool = False) -> Split:
    """The split for a class: no FSDP (zero 0) is dp = 1 in fp32; FSDP2 is dp = 2."""
    if zero == 0 and bf16:
        raise ValueError("bf16 runs FSDP2 at every dp (parallelize.fsdp_policy): no zero-0 class in bf16")
    return split(tp, 1, 1 if zero == 0 else 2, zero=max(zero, 2), recompute=recompute, bf16=bf16)


def pipeline_extra(tp: int = 1) -> Ops:
    """What a pipeline stage adds per micro-batch (the schedule's sends, receives and bookkeeping): a 2-stage
    pipeline's rank 0 against one stage holding the same blocks."""
    return split(tp, 2, 1).per_microbatch - split(tp, 1, 1).per_microbatch


def main() -> int:
    torch.set_num_threads(1)
    for bf16 in (False, True):
        for tp, zero, rec in CLASSES:
            if zero == 0 and bf16:
                continue
            s = class_split(tp, zero, rec, bf16)
            print(f"{'bf16' if bf16 else 'fp32'} tp{'>1' if tp > 1 else '=1'} zero{zero} {rec:9s} "
                  + " ".join(f"{k} {tuple(v)}" for k, v in s._asdict().items()))
    print("pipeline per micro-batch", tuple(pipeline_extra()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
