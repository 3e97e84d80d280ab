"""The same tensor parallelism through PyTorch's own API: DTensor's parallelize_module.

    ColwiseParallel   on wq, wk, wv, w1   weight Shard(0): whole heads / hidden units per rank
    RowwiseParallel   on wo, w2           weight Shard(1); output Replicate (an all-reduce), or
                                          Shard(1) with sequence parallelism (a reduce-scatter)
    PrepareModuleInput on attn and mlp    input_layouts -> Replicate(): the one place where the
                                          input becomes a replicated DTensor, so its gradient
                                          is reduced once for the three projections
    SequenceParallel  on norm1, norm2     (sequence parallelism) LayerNorm on (B, T/t, d) shards

Without the PrepareModuleInput each ColwiseParallel converts the plain input itself and reduces
its gradient itself: 3 all-reduces in attention's backward where Megatron has 1 (measured on
torch 2.13 CPU/gloo, ../shared/reference/fsdp-tp-anchors.md sections 0 and 7.4); that plan is kept
as impl "dtensor-naive" so the difference shows in the counts. The sequence-parallel plan is
torchtitan's (apply_tp in torchtitan/models/llama3/infra/parallelize.py, anchors section 2.2):
its input is this rank's plain (B, T/t, d) shard, and LayerNorm weights end up with Partial
gradients that DTensor reduces when they are redistributed (the optimizer step does it).

The module is the common GPT's own Block / Attention / MLP, unchanged: Attention reads its heads
off the projection width, so on local shards it runs on the local heads.
"""

from __future__ import annotations

import copy

import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
                                               parallelize_module)

from common.model import MLP, Attention, Block


def _region_plan(prefix: str, cols: tuple[str, ...], row: str, sequence_parallel: bool, prepare_input: bool) -> dict:
    """One TP region (attention or MLP): column-parallel inputs, a row-parallel output."""
    seq = Shard(1)  # (B, T, d): dim 1 is the sequence
    plan = {f"{prefix}{c}": ColwiseParallel() for c in cols}
    plan[f"{prefix}{row}"] = RowwiseParallel(output_layouts=seq if sequence_parallel else Replicate())
    if prepare_input:
        plan[prefix.rstrip(".")] = PrepareModuleInput(input_layouts=(seq if sequence_parallel else Replicate(),),
                                                      desired_input_layouts=(Replicate(),))
    return plan


def dtensor_parallel(ref: nn.Module, tp_mesh: DeviceMesh, *, sequence_parallel: bool = False,
                     prepare_input: bool = True) -> nn.Module:
    """A deep copy of a common Block / Attention / MLP, tensor-parallel over the 1-D mesh `tp_mesh`."""
    if sequence_parallel and not prepare_input:
        raise ValueError("sequence parallelism needs PrepareModuleInput: it is where the sequence is all-gathered")
    module = copy.deepcopy(ref)
    attn_cols, mlp_cols = ("wq", "wk", "wv"), ("w1",)
    if isinstance(ref, Block):
        plan = {**_region_plan("attn.", attn_cols, "wo", sequence_parallel, prepare_input),
                **_region_plan("mlp.", mlp_cols, "w2", sequence_parallel, prepare_input)}
        if sequence_parallel:
            plan.update({"norm1": SequenceParallel(), "norm2": SequenceParallel()})
        return parallelize_module(module, tp_mesh, plan)
    if isinstance(ref, (Attention, MLP)):
        cols, row = (attn_cols, "wo") if isinstance(ref, Attention) else (mlp_cols, "w2")
        plan = _region_plan("", cols, row, sequence_parallel, prepare_input=False)
        if prepare_input:  # the plan's key for the module itself would be "", so it is applied on its own
            seq = Shard(1) if sequence_parallel else Replicate()
            parallelize_module(module, tp_mesh, PrepareModuleInput(input_layouts=(seq,),
                                                                   desired_input_layouts=(Replicate(),)))
        return parallelize_module(module, tp_mesh, plan)
    raise TypeError(f"no DTensor plan for {type(ref).__name__}")
