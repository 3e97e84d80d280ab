"""The framework's floor: the host work a stack issues per layer and micro-batch, counted as it issues it, and
what that work costs.

At the learner's scale (one node, a small model, small micro-batches) a step is not its kernels: every aten op
the framework dispatches, every module call, autograd wrapper and FSDP hook costs the host a fixed time whatever
the op's size, and the GPU waits for it. host.py prices the step from these counts; costs.py serialises host and
GPU inside each synchronisation interval.

What is counted, per stack (a `Floor`: ops per layer and micro-batch, forward and backward, the recompute's extra,
per layer and step, per micro-batch, per step; DTensor ops apart; FSDP2's hook events per unit):

- pytorch (parallel-3d's own code, and FSDP2 as fsdp-scaling runs it): PYTORCH_OPS, counted exactly by running
  parallel-3d's engine on a tiny GPT under a dispatch counter (parallel-3d/host_ops.py; its test recounts this table).
  Per block and micro-batch on plain tensors: 39 forward ops (2 layer norms, 6 linears of 4 ops each: t, view, mm,
  _unsafe_view, q/k/v reshapes 6, SDPA and its detach, the output reshape 2, 2 residual adds, GELU) and their
  backward; TP turns most of them into DTensor ops and adds the sequence-parallel redistributions; recompute repeats
  the forward's ops in the backward; FSDP2 adds its copy-in/copy-out ops and its hooks (FSDP_EVENTS).
- megatron (Megatron-LM's legacy GPT layer as the published runs of 2021-23 ran it): MEGATRON_OPS, counted from
  the code's structure (the comments name each file and function), Python and autograd wrappers around fused kernels.

What one unit of host work costs (a `HostCosts`), from a measurement of the node or a cited default:
- measured: parallel-3d's ranking calibration (ranking_calibration_<hw>.csv: op_us, dtensor_op_us, optimizer_op_us,
  fsdp_unit_us, collective_call_us; planner.calibrate.host_costs reads it with --calibrate); any user runs it in
  under a minute on their node;
- published (PUBLISHED): an eager aten op 10 us (5-25 us from Python to cudaLaunchKernel on a server CPU: "From PyTorch
  op to kernel launch", jiahuanglin.xyz gpu_kernel_serving lesson 18, the middle); an FSDP2 unit's pre-forward hook
  1 ms (pytorch/pytorch#173680: FSDP::pre_forward, "1 ms launches", torch 2.10 on a Xeon host); a c10d collective
  call 17.8 us (allreduce-bench's overhead benchmark on this repository's H100 host, results/overhead_h100_ws1.csv).
  No per-op DTensor cost on a GPU host is published: DTensor ops are priced as eager ops there (a lower bound) until
  the calibration measures them. Compiled stacks launch kernels, not ops (host.HOST_US).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .degrees import FULL, OP, SELECTIVE


class Ops(NamedTuple):
    """Host work counted for one unit (a layer and micro-batch, a micro-batch, a step): aten ops on plain tensors and
    on DTensors, of which `backward` were run by the autograd engine."""
    ops: float = 0.0
    dtensor_ops: float = 0.0
    backward: float = 0.0


class Floor(NamedTuple):
    """A stack's counted host work for one layout class (module docstring)."""
    per_layer: Ops  # per block and micro-batch, forward and backward, no recompute
    recompute: Ops  # what the class's recompute adds per block and micro-batch
    per_layer_step: Ops  # per block and step (the optimizer's share of its parameters)
    per_microbatch: Ops  # embeddings, head, loss (and the pipeline's sends) per micro-batch
    per_step: Ops  # the optimizer's grouping, zero_grad, the loss's reduction
    fsdp_events: float = 0.0  # FSDP2 hook events per unit and micro-batch (FSDP_EVENTS)


# parallel-3d, counted (parallel-3d/host_ops.py, torch 2.13): (tp > 1, FSDP2 ZeRO stage or 0 without FSDP, recompute)
# -> (per_layer, per_layer_step, per_microbatch, per_step), each (ops, dtensor_ops, backward). fp32 as the CPU ranking
# set runs it (no FSDP at dp = 1); bf16 under FSDP2's MixedPrecisionPolicy, as every GPU run does (at dp = 1 too).
PYTORCH_OPS = {
    "fp32": {
        (False, 0, 'none'): ((112, 0, 73), (80, 0, 0), (38, 0, 20), (46, 0, 0)),
        (False, 0, 'op'): ((188, 0, 144), (80, 0, 0), (38, 0, 20), (46, 0, 0)),
        (False, 0, 'full'): ((187, 0, 149), (80, 0, 0), (38, 0, 20), (46, 0, 0)),
        (False, 2, 'none'): ((167, 0, 106), (8, 64, -8), (80, 0, 43), (10, 32, -4)),
        (False, 2, 'op'): ((243, 0, 177), (8, 64, -8), (80, 0, 43), (10, 32, -4)),
        (False, 2, 'full'): ((242, 0, 182), (8, 64, -8), (80, 0, 43), (10, 32, -4)),
        (False, 3, 'none'): ((184, 0, 123), (8, 64, -8), (80, 0, 43), (10, 32, -4)),
        (False, 3, 'op'): ((260, 0, 194), (8, 64, -8), (80, 0, 43), (10, 32, -4)),
        (False, 3, 'full'): ((259, 0, 199), (8, 64, -8), (80, 0, 43), (10, 32, -4)),
        (True, 0, 'none'): ((74, 86, 95), (22, 64, 0), (57, 22, 35), (17, 32, 0)),
        (True, 0, 'op'): ((116, 143, 179), (22, 64, 0), (57, 22, 35), (17, 32, 0)),
        (True, 0, 'full'): ((114, 142, 192), (22, 64, 0), (57, 22, 35), (17, 32, 0)),
        (True, 2, 'none'): ((135, 86, 134), (8, 64, -8), (106, 22, 65), (10, 32, -4)),
        (True, 2, 'op'): ((177, 143, 218), (8, 64, -8), (106, 22, 65), (10, 32, -4)),
        (True, 2, 'full'): ((175, 142, 231), (8, 64, -8), (106, 22, 65), (10, 32, -4)),
        (True, 3, 'none'): ((152, 86, 151), (8, 64, -8), (106, 22, 65), (10, 32, -4)),
        (True, 3, 'op'): ((194, 143, 235), (8, 64, -8), (106, 22, 65), (10, 32, -4)),
        (True, 3, 'full'): ((192, 142, 248), (8, 64, -8), (106, 22, 65), (10, 32, -4)),
    },
    "bf16": {
        (False, 2, 'none'): ((172, 0, 106), (8, 64, -8), (87, 0, 44), (10, 32, -4)),
        (False, 2, 'op'): ((248, 0, 177), (8, 64, -8), (87, 0, 44), (10, 32, -4)),
        (False, 2, 'full'): ((247, 0, 182), (8, 64, -8), (87, 0, 44), (10, 32, -4)),
        (False, 3, 'none'): ((192, 0, 126), (8, 64, -8), (87, 0, 44), (10, 32, -4)),
        (False, 3, 'op'): ((268, 0, 197), (8, 64, -8), (87, 0, 44), (10, 32, -4)),
        (False, 3, 'full'): ((267, 0, 202), (8, 64, -8), (87, 0, 44), (10, 32, -4)),
        (True, 2, 'none'): ((140, 86, 134), (8, 64, -8), (113, 22, 66), (10, 32, -4)),
        (True, 2, 'op'): ((182, 143, 218), (8, 64, -8), (113, 22, 66), (10, 32, -4)),
        (True, 2, 'full'): ((180, 142, 231), (8, 64, -8), (113, 22, 66), (10, 32, -4)),
        (True, 3, 'none'): ((160, 86, 154), (8, 64, -8), (113, 22, 66), (10, 32, -4)),
        (True, 3, 'op'): ((202, 143, 238), (8, 64, -8), (113, 22, 66), (10, 32, -4)),
        (True, 3, 'full'): ((200, 142, 251), (8, 64, -8), (113, 22, 66), (10, 32, -4)),
    },
}
# FSDP2's hook events per unit and micro-batch: its pre-forward unshard (the all-gather path: copy-in, the call,
# copy-out, the parameters swapped in), ZeRO-3's pre-backward unshard again; the post-backward reduce-scatter
# (pytorch/pytorch#114299, FSDP2's runtime). The published cost (PUBLISHED) is the pre-forward's: the unshard events
# are priced; the post-backward reduction is left at its counted ops (a lower bound).
FSDP_EVENTS = {0: 0.0, 2: 1.0, 3: 2.0}

# Megatron-LM's GPT layer (megatron/model/transformer.py ParallelTransformerLayer, 2021-23; megatron/core/transformer/
# transformer_layer.py TransformerLayer since), counted per layer and micro-batch from the code's structure, in
# Python-level host calls (an autograd Function's apply, a module call, an aten op the Python issues):
# forward
#   2 fused layer norms (megatron/core/fusions/fused_layer_norm.py: an autograd Function each)               2 + 2
#   4 linears (tensor_parallel/layers.py ColumnParallelLinear, RowParallelLinear: the module call and
#     LinearWithGradAccumulationAndAsyncCommunication.apply, its matmul)                                       4 x 3
#   TP's f and g (tensor_parallel/mappings.py: _CopyToModelParallelRegion before each column-parallel linear,
#     _ReduceFromModelParallelRegion after each row-parallel one; with sequence parallelism
#     _GatherFromSequenceParallelRegion and _ReduceScatterToSequenceParallelRegion instead)                    4
#   attention core without FlashAttention (CoreAttention.forward): the q/k/v split and views (6), baddbmm, the
#     fused scale-mask-softmax (fusions/fused_softmax.py: an autograd Function, or its unfused fp32 fallback,
#     SOFTMAX_FALLBACK_OPS), the dropout under the tensor-parallel RNG tracker's fork (tensor_parallel/random.py
#     CudaRNGStatesTracker.fork: get and set the CUDA RNG state, twice), bmm, permute, contiguous, view         16
#   bias-dropout-add twice and bias-GeLU (fusions/fused_bias_dropout.py, fused_bias_gelu.py: jit-scripted)   3 x 2
#   module calls: the layer, attention, core attention, MLP, softmax, dropout                                 6
# backward: each autograd Function's Python backward (the linears issue their two matmuls and, under TP, the
#   asynchronous all-reduce or reduce-scatter of the input gradient) and the engine's nodes                  ~ the forward
# full recompute (tensor_parallel/random.py CheckpointFunction): the forward again, with the CPU and CUDA RNG states
#   and the tracker's states saved in forward and restored in backward (3 + 3 calls), detach_variable, and
#   torch.autograd.backward on the recomputed outputs                                                        forward + 8
MEGATRON_FORWARD = 2 * 2 + 4 * 3 + 4 + 16 + 3 * 2 + 6
MEGATRON_BACKWARD = MEGATRON_FORWARD
MEGATRON_RECOMPUTE = MEGATRON_FORWARD + 8
# Megatron's fused softmax (megatron/core/fusions/fused_softmax.py FusedScaleMaskSoftmax.is_kernel_available) runs
# only for fp16/bf16 scores with 16 < sk <= 4096, sq and sk multiples of 4, and b x heads-per-rank a multiple of 4
# (and of the kernel's batches per block: 4 for sk > 128, scaled_masked_softmax.h); otherwise forward_torch_softmax
# runs: upcast, scale, mask, softmax, downcast (5 ops, 4 fp32 passes over the scores more: compute.py prices the
# bytes) and their autograd backward.
SOFTMAX_FALLBACK_OPS = 5 + 5


def megatron_floor(recompute, fused_softmax=True) -> Floor:
    """Megatron's counted host calls (the table above), with the softmax fallback's ops where the kernel is not
    available (compute.fused_softmax_available)."""
    extra = np.where(fused_softmax, 0.0, SOFTMAX_FALLBACK_OPS)
    fwd, bwd = MEGATRON_FORWARD + extra / 2, MEGATRON_BACKWARD + extra / 2
    rec = np.where(np.asarray(recompute) == FULL, MEGATRON_RECOMPUTE + extra / 2, 0.0)
    # Per micro-batch: the embedding, the LM head and the vocab-parallel cross-entropy (tensor_parallel/
    # cross_entropy.py: an autograd Function and its ~12 ops), the loss's data-parallel average
    # (average_losses_across_data_parallel_group: a cat and an all-reduce); per step: the optimizer's
    # multi-tensor-apply calls (about 10: Apex's fused Adam, the clip's norm and scale).
    return Floor(Ops(fwd + bwd, 0.0, bwd), Ops(rec, 0.0, rec), Ops(), Ops(40.0), Ops(10.0))


def pytorch_floor(precision: str, tp, zero, recompute) -> Floor:
    """parallel-3d's counted ops for arrays of layouts (PYTORCH_OPS). FSDP2 runs at ZeRO 2 and 3; a layout without it
    (ZeRO 0/1: DDP or one GPU under autocast, as fsdp-scaling runs them) takes the plain modules' counts. Per-op
    selective recompute (`op`) counts as parallel-3d's selective policy, which it is."""
    shape = np.broadcast(np.asarray(tp), np.asarray(zero), np.asarray(recompute)).shape
    tp, zero, rec = (np.atleast_1d(np.asarray(x)) for x in (tp, zero, recompute))
    rows = []
    for t, z, r in np.broadcast(tp, zero, rec):
        fsdp = 3 if z >= 3 else 2 if z == 2 else 0
        table = PYTORCH_OPS["fp32" if fsdp == 0 or precision == "fp32" else "bf16"]
        mode = "full" if r == FULL else "op" if r in (SELECTIVE, OP) else "none"
        base = table[(bool(t > 1), fsdp, "none")]
        extra = [a - b for a, b in zip(table[(bool(t > 1), fsdp, mode)][0], base[0])]
        rows.append((base, extra, FSDP_EVENTS[fsdp]))

    def ops(values) -> Ops:
        arr = np.asarray(values, float).reshape(*shape, 3)
        return Ops(arr[..., 0], arr[..., 1], np.maximum(arr[..., 2], 0.0))
    return Floor(ops([r[0][0] for r in rows]), ops([r[1] for r in rows]), ops([r[0][1] for r in rows]),
                 ops([r[0][2] for r in rows]), ops([r[0][3] for r in rows]),
                 np.asarray([r[2] for r in rows], float).reshape(shape))


class HostCosts(NamedTuple):
    """Seconds of host time per unit of counted work (module docstring), and where the figures come from."""
    op_s: float  # an aten op in training: module call, autograd, dispatch, the op's launch
    dtensor_op_s: float  # an aten op on DTensors
    optimizer_op_s: float  # an op of the optimizer step (no autograd)
    fsdp_event_s: float  # one FSDP2 hook event of a unit (an unshard)
    collective_s: float  # c10d's host cost of one collective call
    source: str


PUBLISHED = HostCosts(10e-6, 10e-6, 10e-6, 1e-3, 17.8e-6,
                      "published: an eager op 10 us (5-25 us, jiahuanglin.xyz lesson 18), an FSDP2 pre-forward 1 ms "
                      "(pytorch/pytorch#173680), a c10d call 17.8 us (allreduce-bench, H100 host); DTensor ops as "
                      "eager ops (no published figure)")


def layer_host_s(fl: Floor, costs: HostCosts) -> tuple:
    """Host seconds of one block and micro-batch: (forward, backward, the recompute's extra), from its counts."""
    def price(o: Ops):
        return o.ops * costs.op_s + o.dtensor_ops * costs.dtensor_op_s

    total, counted = price(fl.per_layer), fl.per_layer
    share = counted.backward / np.maximum(counted.ops + counted.dtensor_ops, 1.0)
    events = fl.fsdp_events * costs.fsdp_event_s
    fwd_events = np.minimum(events, costs.fsdp_event_s)  # the pre-forward unshard; ZeRO-3's second in backward
    return (total * (1 - share) + fwd_events, total * share + (events - fwd_events), price(fl.recompute))
