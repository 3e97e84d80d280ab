"""FSDP2 (`fully_shard`) applied to the common GPT the way torchtitan does it.

Each transformer block becomes its own FSDP unit (one all-gather before its forward, one
reduce-scatter after its backward), then the root wraps what is left: the embeddings, the final
norm and the LM head. Used by fsdp-scaling for the zero2 / zero3 / hsdp strategies and by
fp8-train for multi-GPU runs.

reshard_after_forward is always passed explicitly: True frees each block's gathered parameters
after its forward and gathers them again for backward (ZeRO-3: ~3 Psi of traffic per step),
False keeps them until backward (ZeRO-2: ~2 Psi, more memory). Its default changed between
torch releases, so relying on it would make results depend on the version.

A 1-D mesh shards over every rank; a 2-D mesh ("replicate", "shard") is HSDP: parameters
sharded within a group and replicated across groups (gradients all-reduced across them).
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from .model import GPT


def mixed_precision(param_dtype: torch.dtype | None) -> MixedPrecisionPolicy:
    """bf16 compute with fp32 gradient reduction (torchtitan's default); None = full fp32."""
    if param_dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)


def apply_fsdp(model: GPT, mesh: DeviceMesh, *, reshard_after_forward: bool,
               param_dtype: torch.dtype | None = None) -> GPT:
    """Shard `model` in place, block by block and then the root; returns it for chaining."""
    mp = mixed_precision(param_dtype)
    for block in model.layers:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    # The root's parameters (embeddings, head) are used at both ends of the step; resharding
    # them after forward would only gather them again at once for the head's backward.
    fully_shard(model, mesh=mesh, reshard_after_forward=False, mp_policy=mp)
    return model
