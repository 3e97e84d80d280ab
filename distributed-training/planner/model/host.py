"""The host's side of a step: what the framework's host work costs the CPU, and the step it paces.

An eager step is priced by the framework's floor (floor.py): the host work its stack issues per layer and
micro-batch, counted as the framework issues it (aten ops, DTensor ops, FSDP2's hook events), at a measured or
published cost per unit, and every collective call at c10d's host cost (host_step). costs.py serialises that host
time with the GPU's inside each synchronisation interval. A compiled or graph-replayed step launches kernels, not
Python ops: it is priced by its launches, as below.

A GPU runs what the host has queued. Every kernel and collective a step runs is first launched by the host: the
Python of the framework, PyTorch's dispatcher and autograd bookkeeping, the CUDA launch. The host runs ahead of
the GPU and the queue hides its time while kernels are longer than their launches; when they are shorter (small
models, high TP, eager elementwise kernels) the GPU waits for the host. A step is then the larger of the two:

    step = max(GPU time, host time),    host time = launches per step x HOST_US[runtime]

(the GPU time being costs.step_costs' step; the max is the steady state of a queue between synchronisations,
Lumos and SimAI's host/device timelines replayed in the same way). Launches are counted from the same op list the
GPU time is priced from (compute.py: every GEMM, memory-bound kernel and attention kernel of a layer, the head,
the optimizer's kernels) plus every collective the step issues (costs.py: TP's per layer, SP's all-gather and
reduce-scatter pairs, CP's ring sends, PP's sends, FSDP's per-layer gathers and scatters, DP's buckets), on the
busiest pipeline rank. TP and CP shrink each rank's kernels, not their number: the host's time per rank stays,
which is why small models at high TP are host-paced.

Host time per launch, by the runtime that issues it (HOST_US):
- eager: PyTorch eager mode, Megatron-LM's Python around fused kernels, TransformerEngine's modules: 10 us per
  launched kernel (Python, pybind, autograd recording, the dispatcher and cudaLaunchKernel: 5-25 us per op on a
  server CPU, "From PyTorch op to kernel launch", jiahuanglin.xyz gpu_kernel_serving lesson 18; the middle);
- compiled: torch.compile's generated wrapper launches its kernels with no dispatcher or autograd per op: the CUDA
  launch itself, 4 us (NVIDIA's CUDA Graphs post: 3.8 us from launch to launch of a 2.9 us kernel in a stream);
- graphs: CUDA graphs replay a captured step with one launch (Megatron-Core's CudaGraphManager, TE's
  make_graphed_callables): 0 per kernel.
A collective costs the host more than a kernel: PyTorch's ProcessGroupNCCL records events, makes the NCCL stream
wait on the compute stream, creates its work object and enqueues the NCCL kernel. COLLECTIVE_HOST_US is measured:
back-to-back in-place all_reduce calls on one rank (no byte moves; allreduce-bench's overhead benchmark, bare loop,
results/overhead_h100_ws1.csv: torch 2.11, NCCL 2.28 on an H100 host) take a median 17.8 us per call from 1 to 32 MiB,
which is what c10d and NCCL cost per call; a CUDA graph replays its collectives with the rest (0).
Where a measured row has the GPU's busy time (fp8-train's gpu_busy_ms), the host's share is read from it
instead (explain_rows.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from .compute import OPTIMIZER_KERNELS, Kernels, Rates, fused_softmax_available, head_times, layer_times
from .degrees import FULL, NONE, OP, SELECTIVE, Degrees
from .floor import PUBLISHED, HostCosts, layer_host_s, megatron_floor, pytorch_floor

HOST_US = {"eager": 10.0, "compiled": 4.0, "graphs": 0.0}
# Host time per collective call (module docstring), by runtime: eager and compiled stacks issue collectives through
# c10d alike (torch.compile leaves FSDP2's and DTensor's collectives to them).
COLLECTIVE_HOST_US = {"eager": 17.8, "compiled": 17.8, "graphs": 0.0}
CLIP_KERNELS = 2  # the gradient-norm clip: a norm (foreach) and its scale


def host_us(runtime: str) -> float:
    if runtime not in HOST_US:
        raise ValueError(f"unknown host runtime {runtime!r}; valid: {', '.join(HOST_US)}")
    return HOST_US[runtime]


def counting(r: Rates) -> Rates:
    """Rates under which every time of compute.py is a kernel count: nothing takes time but a kernel, 1 s each."""
    inf = float("inf")
    return replace(r, matmul=inf, bf16_matmul=inf, attention=inf, hbm=inf, consts=replace(r.consts, kernel_us=1e6))


def layer_collectives(deg: Degrees, ker: Kernels, regather=0.0):
    """Collective calls of one layer for one micro-batch: TP's (an all-gather and a reduce-scatter for each
    all-reduce under SP, and Megatron's SP gathers the two column-parallel inputs again in the backward: `regather`,
    costs.py), CP's ring sends, FSDP's per-layer gathers and reduce-scatters (ZeRO-3: 2 + 1, ZeRO-2: 1)."""
    t, c, full = deg.t, deg.c, deg.recompute == FULL
    tp = np.where(t > 1, (4 + 2 * full) * np.where(ker.sequence_parallel, 2, 1) + 2 * np.asarray(regather), 0)
    cp = np.where(c > 1, (c - 1) * (1 + full) + 2 * (c - 1), 0)
    fsdp = np.select([deg.zero == 3, deg.zero == 2], [3, 1], 0)
    return tp + cp + fsdp


class Launches(NamedTuple):
    """What the host launches in one step (arrays over configurations): kernels, and collective calls."""
    kernels: np.ndarray
    collectives: np.ndarray


def step_launches(shape, deg: Degrees, ker: Kernels, r: Rates, layers, dp_calls, regather=0.0) -> Launches:
    """Kernels and collectives the busiest pipeline rank launches in one step (arrays over configurations).

    layers: the busiest stage's layers; dp_calls: the step's DP collective calls (gradient buckets, ZeRO-1's
    gathers); regather: 1 where SP gathers the column-parallel inputs again in the backward (layer_collectives)."""
    cr = counting(r)
    lt = layer_times(shape, deg.t, deg.c, deg.b, ker, cr)
    ht = head_times(shape, deg.t, deg.c, deg.b, ker, cr)
    rec = np.select([deg.recompute == FULL, deg.recompute == SELECTIVE, deg.recompute == OP],
                    [lt["recompute_full"], lt["recompute_selective"], lt["recompute_op"]], 0.0)
    weights = lt["fp8_weights_per_step"]  # cached FP8 weight casts: launched once per step
    per_layer = lt["fwd"] - weights + lt["bwd"] + rec
    head = np.where(deg.p == 1, ht["embedding"] + ht["head"], ht["head"])
    kernels = deg.m * (layers * per_layer + head) + layers * weights + OPTIMIZER_KERNELS[ker.optimizer] + CLIP_KERNELS
    pp = np.where(deg.p > 1, 2 * deg.v, 0)
    collectives = deg.m * (layers * layer_collectives(deg, ker, regather) + pp) + dp_calls
    return Launches(np.asarray(kernels, float), np.asarray(collectives, float))


def host_time(launches: Launches, ker: Kernels):
    """Seconds the host spends launching a step (module docstring): kernels at the runtime's cost per launch,
    collectives at its cost per call."""
    return (launches.kernels * host_us(ker.host) + launches.collectives * COLLECTIVE_HOST_US[ker.host]) * 1e-6


class HostStep(NamedTuple):
    """Host seconds on the busiest pipeline rank (arrays): one micro-batch's forward and backward (its layers, head
    and collectives; the recompute in the backward), and what the step adds once (the optimizer, DP's calls)."""
    fwd_mb: np.ndarray
    bwd_mb: np.ndarray
    step: np.ndarray

    def total(self, m) -> np.ndarray:
        return m * (self.fwd_mb + self.bwd_mb) + self.step


def framework_floor(deg: Degrees, ker: Kernels, precision: str = "bf16", shape=None):
    """The counted host work of the stack that runs `ker` (floor.py); Megatron's with its unfused softmax where the
    fused kernel is not available (scores in HBM only: without FlashAttention)."""
    if ker.framework == "pytorch":
        return pytorch_floor(precision, deg.t, deg.zero, deg.recompute)
    fused = True if ker.flash or shape is None else fused_softmax_available(
        ker, deg.b, shape.heads / deg.t, shape.seq / deg.c, shape.seq)
    return megatron_floor(deg.recompute, fused_softmax=fused)


def host_step(shape, deg: Degrees, ker: Kernels, r: Rates, layers, dp_calls, regather=0.0,
              costs: HostCosts = PUBLISHED, precision: str = "bf16") -> HostStep:
    """The host's time of a step, phase by phase (HostStep): an eager stack's counted floor (floor.py) at `costs`,
    a compiled one's kernel launches (HOST_US) and FSDP2's hooks, which stay eager around compiled blocks; every
    collective call at c10d's cost."""
    coll = np.asarray(layer_collectives(deg, ker, regather), float) * COLLECTIVE_HOST_US[ker.host] * 1e-6
    pp = np.where(deg.p > 1, 2 * deg.v, 0) * COLLECTIVE_HOST_US[ker.host] * 1e-6
    step_calls = np.asarray(dp_calls, float) * COLLECTIVE_HOST_US[ker.host] * 1e-6
    fl = framework_floor(deg, ker, precision, shape)
    if ker.host == "eager":
        f, b, rec = layer_host_s(fl, costs)
        rec = np.where(deg.recompute != NONE, rec, 0.0)
        head = fl.per_microbatch.ops * costs.op_s + fl.per_microbatch.dtensor_ops * costs.dtensor_op_s
        once = (fl.per_step.ops + layers * fl.per_layer_step.ops) * costs.optimizer_op_s \
            + (fl.per_step.dtensor_ops + layers * fl.per_layer_step.dtensor_ops) * costs.dtensor_op_s
        return HostStep(layers * (f + coll / 2) + head / 2 + pp / 2, layers * (b + rec + coll / 2) + head / 2 + pp / 2,
                        once + step_calls)
    cr = counting(r)
    lt, ht = layer_times(shape, deg.t, deg.c, deg.b, ker, cr), head_times(shape, deg.t, deg.c, deg.b, ker, cr)
    rec = np.select([deg.recompute == FULL, deg.recompute == SELECTIVE, deg.recompute == OP],
                    [lt["recompute_full"], lt["recompute_selective"], lt["recompute_op"]], 0.0)
    per = host_us(ker.host) * 1e-6
    hooks = fl.fsdp_events * costs.fsdp_event_s if ker.framework == "pytorch" and ker.host == "compiled" else 0.0
    head = np.where(deg.p == 1, ht["embedding"] + ht["head"], ht["head"]) * per
    fwd = layers * (lt["fwd"] * per + coll / 2 + np.minimum(hooks, costs.fsdp_event_s)) + head / 2 + pp / 2
    bwd = layers * ((lt["bwd"] + rec) * per + coll / 2 + hooks - np.minimum(hooks, costs.fsdp_event_s)) + head / 2 \
        + pp / 2
    once = (OPTIMIZER_KERNELS[ker.optimizer] + CLIP_KERNELS) * per + step_calls
    return HostStep(np.asarray(fwd, float), np.asarray(bwd, float), np.asarray(once, float))
