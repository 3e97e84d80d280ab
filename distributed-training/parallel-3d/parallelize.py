"""Context parallelism, tensor parallelism, activation checkpointing and FSDP2 applied to one pipeline stage, in
that order (torchtitan's order, torchtitan/models/llama3/infra/parallelize.py): ring attention swapped in first
(context_parallel.py), TP on the plain modules; checkpoint wrappers next, around each (TP) block;
fully_shard last, so that FSDP's hooks sit outside the checkpointed region and a recomputation never
gathers parameters again.

The mesh is (pp, dp, cp, tp) with tp innermost: a TP group is consecutive ranks (one NVLink domain on a
GPU node), then context parallelism (a CP group joins ranks of the same TP rank, Megatron's TP2CP2 figure),
then data parallelism, then pipeline stages outermost, Megatron's layout ("tp-cp-ep-dp-pp") and Llama 3's
([TP, CP, PP, DP] innermost first). With cp > 1 the dp and cp dimensions are flattened into one "dp_cp"
group for FSDP2 (torchtitan's fsdp = dp_shard x cp): CP ranks hold the same weights.

TP with sequence parallelism (Megatron SC21 and Korthikanti et al. 2022), through DTensor's
parallelize_module. Per block:
    norm1, norm2          SequenceParallel      LayerNorm on (B, T/t, d) shards, weights replicated
    attn, mlp             PrepareModuleInput    Shard(1) -> Replicate: the all-gather of the sequence
    wq, wk, wv, w1        ColwiseParallel       whole heads / MLP units per rank
    wo, w2                RowwiseParallel       output Shard(1): the reduce-scatter back to T/t rows
and around the blocks
    tok_emb, pos_emb      RowwiseParallel      tables split over rows; output Shard(1) (a reduce-scatter)
    norm                  SequenceParallel
    lm_head               ColwiseParallel       input Shard(1) (all-gather), output Replicate (all-gather
                                                of the vocabulary columns): every TP rank computes the loss
The LayerNorm weights are replicated over TP and see only their rank's rows, so their gradients are
DTensor Partial sums: FSDP2 all-reduces them over TP before its reduce-scatter (one all-reduce per
norm weight per step), and without FSDP (dp = 1) the engine does the same (engine.reduce_partial_grads).

FSDP2 over dp: each block is a unit, then the stage module (embeddings or head) is the root unit, as
common/fsdp.py does for the whole GPT. zero 3 = reshard_after_forward=True (gather again for backward),
zero 2 = False (keep the gathered block until backward). The root is never resharded after forward.
With bf16, MixedPrecisionPolicy(bf16 params, fp32 reduce), torchtitan's default. FSDP2 is applied when
dp > 1, and at dp = 1 with bf16 too (fsdp_policy): its policy is what keeps fp32 master weights and
gradients around bf16 compute, so one GPU trains with the numerics of many. On a 1-rank group FSDP2 issues
no collective (it copies instead: pytorch/pytorch#160135, #162021), so design.py predicts no dp traffic at
dp = 1 and the tests count none (comms.py logs 1-rank calls too).

Recompute per block (torch.utils.checkpoint through checkpoint_wrapper, non-reentrant):
    none        nothing
    full        only the block input is kept; the whole block runs again in backward
    op          per-op selective checkpointing (torch.utils.checkpoint.create_selective_checkpoint_contexts;
                torchtitan's selective_ac_option="op"; the planner's `op`):
                the outputs of matmuls and collectives are kept, everything else is recomputed: the
                attention core (Korthikanti's selective recompute), the LayerNorms and GELU; no
                collective runs twice
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
                                               parallelize_module)
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from common.fsdp import mixed_precision
from context_parallel import apply_cp, attention_group
from pipeline_stages import StageModule

MESH_DIMS = ("pp", "dp", "cp", "tp")
SHARD_DIM = "dp_cp"  # the flattened dp x cp mesh FSDP2 shards over when cp > 1
WRAPPED = "_checkpoint_wrapped_module."  # the prefix checkpoint_wrapper adds to parameter names

_aten = torch.ops.aten
# Selective recompute keeps what is expensive to make again: the outputs of the matmuls and of the collectives
# (recomputing those would repeat the communication); everything else, the LayerNorms, GELU and the attention
# core (the fused SDPA kernel), runs again in backward.
_KEEP = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten._scaled_mm.default}


def _is_collective(func) -> bool:
    return func.namespace in ("_c10d_functional", "c10d")


def build_mesh(device_type: str, pp: int, dp: int, tp: int, cp: int = 1) -> DeviceMesh:
    return init_device_mesh(device_type, (pp, dp, cp, tp), mesh_dim_names=MESH_DIMS)


def shard_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The ranks FSDP2 shards over: dp, or dp x cp with context parallelism (flattened on first use, the same mesh
    after; DeviceMesh._flatten is private in torch 2.13, and what torchtitan calls)."""
    return mesh["dp", "cp"]._flatten(SHARD_DIM) if mesh["cp"].size() > 1 else mesh["dp"]


def tp_plan(stage: StageModule) -> dict:
    seq = Shard(1)  # (B, T, d): dim 1 is the sequence
    gather = PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),))
    plan: dict = {}
    if stage.tok_emb is not None:
        plan["tok_emb"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
        plan["pos_emb"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    for key in stage.layers:
        p = f"layers.{key}."
        plan.update({p + "norm1": SequenceParallel(), p + "norm2": SequenceParallel(),
                     p + "attn": gather, p + "mlp": gather,
                     p + "attn.wq": ColwiseParallel(), p + "attn.wk": ColwiseParallel(),
                     p + "attn.wv": ColwiseParallel(), p + "attn.wo": RowwiseParallel(output_layouts=seq),
                     p + "mlp.w1": ColwiseParallel(), p + "mlp.w2": RowwiseParallel(output_layouts=seq)})
    if stage.lm_head is not None:
        plan["norm"] = SequenceParallel()
        plan["lm_head"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
    return plan


def apply_tp(stage: StageModule, tp_mesh: DeviceMesh) -> None:
    parallelize_module(stage, tp_mesh, tp_plan(stage))


def _selective_policy(ctx, func, *args, **kwargs) -> CheckpointPolicy:  # noqa: ARG001 - torch's policy signature
    return CheckpointPolicy.MUST_SAVE if func in _KEEP or _is_collective(func) else CheckpointPolicy.PREFER_RECOMPUTE


def apply_recompute(stage: StageModule, mode: str) -> None:
    """Wrap every block of the stage for `mode` (none, op, full); in place."""
    if mode == "none":
        return
    kw: dict = {"checkpoint_impl": CheckpointImpl.NO_REENTRANT, "preserve_rng_state": False}  # no dropout in the GPT
    if mode == "op":
        kw["context_fn"] = partial(create_selective_checkpoint_contexts, _selective_policy)
    for key, block in list(stage.layers.items()):
        stage.layers[key] = checkpoint_wrapper(block, **kw)


def fsdp_policy(dp: int, param_dtype: torch.dtype | None) -> MixedPrecisionPolicy | None:
    """FSDP2's mixed-precision policy for the stages, or None where they are not fully_shard-ed (fp32 at dp = 1)."""
    if dp == 1 and param_dtype is None:
        return None
    return mixed_precision(param_dtype)


def boundary_dtype(policy: MixedPrecisionPolicy | None) -> torch.dtype:
    """The dtype of the hidden states a stage sends and of the logits it returns: FSDP2 casts a unit's outputs to
    the policy's output_dtype, else leaves them in its compute dtype (param_dtype); no policy, fp32."""
    if policy is None:
        return torch.float32
    return policy.output_dtype or policy.param_dtype or torch.float32


def apply_fsdp(stage: StageModule, dp_mesh: DeviceMesh, zero: int, policy: MixedPrecisionPolicy) -> None:
    for block in stage.layers.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=zero == 3, mp_policy=policy)
    # The root holds the embeddings or the head (or nothing, on a middle stage); used at both ends of the step.
    fully_shard(stage, mesh=dp_mesh, reshard_after_forward=False, mp_policy=policy)


def parallelize(stage: StageModule, mesh: DeviceMesh, *, zero: int, recompute: str,
                policy: MixedPrecisionPolicy | None, cp_kind: str = "ring") -> StageModule:
    """CP (cp > 1), TP (tp > 1), recompute, FSDP2 (where `policy` is given: fsdp_policy) on one stage, in
    torchtitan's order; returns the stage."""
    if mesh["cp"].size() > 1:
        apply_cp(stage, attention_group(mesh), cp_kind)
    if mesh["tp"].size() > 1:
        apply_tp(stage, mesh["tp"])
    apply_recompute(stage, recompute)
    if policy is not None:
        apply_fsdp(stage, shard_mesh(mesh), zero, policy)
    return stage


def plain_name(name: str) -> str:
    """A parameter name without checkpoint_wrapper's prefix: the one-process model's name."""
    return name.replace(WRAPPED, "")


def local_params(modules: list[nn.Module]) -> list[nn.Parameter]:
    return [p for m in modules for p in m.parameters()]
