"""Step time: compute, communication, overlap and the pipeline bubble, for arrays of configurations.

Compute: compute.py prices every kernel of a layer (GEMMs by shape after TP slicing, memory-bound
kernels at HBM bandwidth, attention with or without FlashAttention, recompute, a fixed cost per
kernel), of the embedding and the LM head with its loss, and the optimizer step, with the constants
of calibration.py; stages.py chooses how many layers each pipeline stage gets.

Communication: every collective is priced by common/collective_cost.py, the model fsdp-scaling's
projection uses too (nccl-tests' bus factors; ring steps inside the NVLink domain, tree levels across;
NVLink inside a domain and min(NVLink, n_l x NIC) across, NCCL's ring per NIC; the constants, their
sources and the sizes at half bandwidth they give are there). Each paper's byte term is written first,
as nccl-tests' S of the collective that carries it, then priced. NICs shared by concurrent TP and DP
traffic are not modelled. Groups are laid out as Megatron does: TP innermost, then CP, then DP, then PP
outermost.
- TP (Megatron SC21 §3.2): 4 all-reduces of b·s·h per layer and micro-batch, 8bsh(t-1)/t of traffic;
  6 with full recompute; sequence parallelism turns each into an all-gather + reduce-scatter of the
  same volume (Korthikanti §4.2.2), and Megatron's gathers the two column-parallel inputs again in the
  backward for their weight gradients (one all-reduce's volume more, overlapped with the dgrad GEMMs). The backward ones can overlap with the weight-gradient GEMMs
  (Megatron-Core's async dgrad all-reduce; tp_overlap below); the forward ones are exposed.
- PP (SC21 §3.2, §4.1): b·s·h per micro-batch per boundary, each way; across nodes every TP rank
  sends 1/t of it (scatter/gather). Exposed; interleaving multiplies it by v.
- CP (cp_kinds.py, with the bytes of common/cp_bytes.py that the designs' tests count): the ring (c-1 hops of the
  K/V block each way plus fp32 dK/dV, hidden behind the attention core as far as it lasts), the all-gather (one
  gather hidden behind the local block, a reduce-scatter exposed) or Ulysses (four exposed all-to-alls); `cp_kind`
  pins one, "auto" takes the one with the least exposed time per configuration.
- DP over the DP×CP group: ZeRO-0 all-reduces the gradients once per step, ZeRO-1 reduce-scatters
  them and all-gathers the weights; the reduction can hide behind the backward of the last micro-batch,
  the gather behind the forward of the first (Megatron's overlap_grad_reduce/overlap_param_gather;
  dp_overlap below).
  ZeRO-2 reduce-scatters every micro-batch (the gradients are sharded), ZeRO-3 also gathers the
  weights for every micro-batch's forward and backward (ZeRO §7: 1.5x the volume), each hidden
  behind that micro-batch's compute as far as it lasts. That is Megatron's schedule; FSDP2's, as
  parallel-3d runs it, is the stack's (stacks.fsdp2_schedule).
Overlap depends on the software: `tp_overlap` (Megatron-Core's asynchronous backward collective) hides
the backward TP collectives behind the weight-gradient GEMMs, else every TP collective is exposed (the
Megatron of 2021 and torchtitan's vanilla TP); Kernels.tp_comm_overlap (Megatron-Core's --tp-comm-overlap, the
production setting of NeMo's large runs) hides the forward ones too, behind the GEMMs they feed; `dp_overlap` lets
DP/ZeRO traffic hide behind compute, else it is paid after the backward (the Megatron of 2021-22).
GPU step = m · t_slowest + (Σ t_stage - t_slowest)/v + exposed DP + optimizer + cached FP8 weight casts
(stages.py, fp8_cost.py), t_stage a
stage's time per micro-batch: its layers (compute, exposed TP and CP) plus the embedding on the first
and the LM head on the last, plus PP sends and exposed ZeRO-2/3 traffic; for equal stages the bubble
is (p-1)/(v·m) of the ideal (SC21 §2.2), and bubble_fraction its share of the pipeline's time,
(p-1)/(v·m + p - 1): with fewer micro-batches than stages (m < p, 1F1B or GPipe) (p-1)/(m + p - 1).
The host issues the step (host.py: the framework's counted floor, floor.py), and host and GPU are serialised inside each
synchronisation interval (serialised_step): small kernels at high TP, small micro-batches or eager stacks leave the GPU
waiting for the host, and a pipeline's critical path runs on the serialised time.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from common.collective_cost import Network, collective_time_s, members_per_domain

from . import cp_kinds, fp8_cost, host
from .calibration import ATTENTION_EFFICIENCY, generation
from .cluster import Cluster
from .compute import Kernels, Rates, head_times, layer_times, optimizer_time, sm_count, tensor_rate
from .degrees import FULL, OP, SELECTIVE, Degrees
from .floor import HostCosts
from .memory import WEIGHT_BYTES, stage_params
from .shapes import Shape
from .stacks import zero_schedule
from .stages import StageSplit, balanced_split, even_split, pipeline_step, stage_times

BUCKET_PARAMS = 40e6  # DP gradient bucket (latency is paid per bucket)
ACT_BYTES = 2.0  # bf16 activations between layers


def rates_for(cl: Cluster, kernels: Kernels) -> Rates:
    """The compute model's rates for a cluster: tensor-core, attention and HBM (compute.py, calibration.py)."""
    consts = cl.compute
    matmul = tensor_rate(cl.gpu, cl.precision, cl.matmul_tflops, consts)
    bf16 = matmul if cl.precision == "bf16" else tensor_rate(cl.gpu, "bf16", cl.bf16_matmul_tflops, consts)
    attention = ATTENTION_EFFICIENCY[generation(cl.gpu), kernels.attention] * cl.bf16_peak_tflops * 1e12
    return Rates(matmul, bf16, attention, cl.hbm_gbps * 1e9 * consts.hbm_efficiency, sm_count(cl.gpu),
                 consts, attention_curve=(generation(cl.gpu), kernels.attention))


def fsdp_copy_time(psi, n, zero, r: Rates):
    """FSDP2's local copies around its collectives, per micro-batch (ZeRO-2/3; seconds at the HBM rate).

    Every all-gather first casts this rank's fp32 shard into the bf16 send buffer (MixedPrecisionPolicy: read 4,
    write 2 B per shard element) and then copies the gathered buffer out into the parameters (read and write 2 B
    per element of the whole unit: split_with_sizes_copy); every reduce-scatter copies the bf16 gradients into
    an fp32 input buffer (read 2, write 4 B per element) and accumulates its output shard into the sharded
    gradient (read 4 + 4, write 4 B). ZeRO-3 gathers before the forward and the backward, ZeRO-2 once.
    """
    psi, n = np.asarray(psi, float), np.asarray(n, float)
    gathers = np.select([zero == 3, zero == 2], [2.0, 1.0], 0.0)
    per_param = gathers * (6.0 / n + 4.0) + np.where(zero >= 2, 6.0 + 12.0 / n, 0.0)
    return psi * per_param / r.hbm


class StepCosts(NamedTuple):
    """Seconds per optimizer step, each an array with one element per configuration (module docstring), and
    the stage split they were priced on, so memory is priced on the same layout. *_comm_s is a parallelism's
    collective time, *_hidden_s the part of it hidden behind compute."""
    compute_s: np.ndarray  # layers, embedding and head, FSDP copies, the optimizer, cached FP8 weight casts
    tp_comm_s: np.ndarray
    tp_hidden_s: np.ndarray
    cp_comm_s: np.ndarray
    cp_hidden_s: np.ndarray
    pp_comm_s: np.ndarray
    pp_hidden_s: np.ndarray
    dp_comm_s: np.ndarray
    dp_hidden_s: np.ndarray
    bubble_fraction: np.ndarray  # the bubble's share of the pipeline's time
    bubble_s: np.ndarray
    optimizer_s: np.ndarray
    gpu_step_s: np.ndarray  # what the GPU spends
    host_s: np.ndarray  # what issuing the step costs the host (host.py, floor.py)
    step_s: np.ndarray  # host and GPU serialised per synchronisation interval (serialised_step)
    split: StageSplit  # layers per pipeline stage (stages.py)
    cp_kind: np.ndarray  # the context-parallel design priced: an index into cp_kinds.CP_KINDS


def phase_s(h, g, n):
    """One phase of n equal segments (layers) whose host work h and GPU work g are issued segment by segment: the
    two-machine flow shop's makespan, the GPU starting a segment once the host has issued it, the host never waiting
    for the GPU: (n - 1) max(h, g)/n + (h + g)/n (Johnson 1954: max over the split point j of the host's time up to j
    and the GPU's from j)."""
    n = np.maximum(np.asarray(n, float), 1.0)
    return (n - 1) * np.maximum(h, g) / n + (h + g) / n


def accumulate_s(hf, gf, hb, gb, n, m, ho, go):
    """A step of m micro-batches (forward phase, backward phase each) and a last phase (the optimizer) with no
    synchronisation between them: the flow shop's makespan over the whole sequence. The candidate split points are
    linear in the micro-batch index, so the first and the last micro-batch bound them."""
    out = m * (hf + hb) + ho + go  # the split in the last phase
    for k in (1.0, np.asarray(m, float)):
        before, after = (k - 1) * (hf + hb), (m - k) * (gf + gb) + go
        out = np.maximum(out, before + phase_s(hf, gf, n) + gb + after)
        out = np.maximum(out, before + hf + phase_s(hb, gb, n) + after)
    return out


def serialised_step(hs, slowest, total, fwd_share, layers, m, v, p, once_gpu):
    """The step with host and GPU serialised inside each synchronisation interval (host.py's HostStep; slowest and
    total are the pipeline's GPU seconds per micro-batch). Without a pipeline the step is one interval: the flow shop
    of its micro-batches' forward and backward phases and the optimizer (accumulate_s), the GPU never ahead of what
    the host has issued. With one, every send and receive synchronises the host with its GPU (Megatron's
    batch_isend_irecv is followed by torch.cuda.synchronize: megatron/core/pipeline_parallel/p2p_communication.py
    _communicate, batch_p2p_sync), so each forward and backward phase is its own interval and the pipeline's
    (m + p - 1) critical path runs on their serialised times (stages.pipeline_step)."""
    gf, gb = slowest * fwd_share, slowest * (1 - fwd_share)
    flat = accumulate_s(hs.fwd_mb, gf, hs.bwd_mb, gb, layers, m, hs.step, once_gpu)
    per_mb = phase_s(hs.fwd_mb, gf, layers) + phase_s(hs.bwd_mb, gb, layers)
    scale = per_mb / np.maximum(slowest, 1e-30)
    piped = pipeline_step(m, v, per_mb, total * scale) + hs.step + once_gpu
    return np.where(p > 1, piped, flat)


class DPCollectives(NamedTuple):
    """Seconds for one step's data-parallel collectives of Ψ parameters (arrays)."""
    all_reduce: np.ndarray  # the gradients, ZeRO-0
    reduce_scatter: np.ndarray  # the gradients, ZeRO >= 1 (ZeRO-2/3: every micro-batch)
    all_gather: np.ndarray  # the bf16 weights, ZeRO >= 1 (ZeRO-3: before forward and backward)


def dp_collectives(psi, n, n_local, grad_bytes: float, net: Network, weight_bytes: float = WEIGHT_BYTES, calls=None
                   ) -> DPCollectives:
    """The DP group's collectives (ZeRO §7), each split into `calls` calls of equal size, every call priced with its
    own latency and protocol (common/collective_cost.py): by default one per gradient bucket of BUCKET_PARAMS; FSDP
    gathers and reduce-scatters one unit (a layer) at a time, so ZeRO-2/3 pay a call per layer at least (step_costs).
    weight_bytes: 2 for bf16 weight gathers, 1 where FSDP gathers FP8 weights (fp8_cost.Fp8Backend.fp8_all_gather)."""
    psi = np.asarray(psi, float)
    grads = grad_bytes * psi  # nccl-tests' S of the gradient all-reduce / reduce-scatter
    weights = weight_bytes * psi  # S of the weight all-gather
    calls = np.ceil(psi / BUCKET_PARAMS) if calls is None else np.maximum(np.asarray(calls, float), 1.0)

    def priced(kind: str, nbytes):
        return calls * collective_time_s(kind, nbytes / calls, n, n_local, net)
    return DPCollectives(priced("all_reduce", grads), priced("reduce_scatter", grads), priced("all_gather", weights))


def step_costs(shape: Shape, cl: Cluster, deg: Degrees, *, grad_bytes: float = 2.0, kernels: Kernels = Kernels(),
               tp_overlap: bool = True, dp_overlap: bool = True, even_stages: bool = False,
               tp_layout_copies: bool = False, fsdp_copies: bool = False, rates: Rates | None = None,
               dp_schedule=zero_schedule, host_costs: HostCosts | None = None, cp_kind: str = "ring") -> StepCosts:
    """All time terms (seconds per step, arrays) for the configurations of `deg`.

    Also returns the stage split it chose (StepCosts.split), so memory is priced on the same layout;
    even_stages=True forces L/p layers per stage (p must divide L). `rates` replaces the cluster's
    compute rates (a machine measured directly: planner/evidence/ranking.py's CPU). dp_schedule: the stack's
    data-parallel schedule (stacks.zero_schedule, Megatron's; stacks.fsdp2_schedule, parallel-3d's). host_costs: the
    host's cost per unit of counted work (floor.py), the cluster's unless given (published, or --calibrate's).
    cp_kind: the context-parallel design (cp_kinds.py: ring, allgather, ulysses, or auto: the cheapest per
    configuration).
    """
    t, p, c, d, b, v, m, zero, r = deg.t, deg.p, deg.c, deg.d, deg.b, deg.v, deg.m, deg.zero, deg.recompute
    full = r == FULL
    rt = rates if rates is not None else rates_for(cl, kernels)
    lt = layer_times(shape, t, c, b, kernels, rt)
    rec = np.select([full, r == SELECTIVE, r == OP], [lt["recompute_full"], lt["recompute_selective"],
                                                      lt["recompute_op"]], 0.0)
    layer_compute = lt["fwd"] - lt["fp8_weights_per_step"] + lt["bwd"] + rec  # cached FP8 weights: per step, below
    ht = head_times(shape, t, c, b, kernels, rt)
    tokens = b * shape.seq / c
    net, dom = cl.net, cl.domain

    # TP (SC21 §3.2): per layer and micro-batch 2 all-reduces of b·s·h forward, 2 backward (2 more in a full
    # recompute): 8·b·s·h·(t-1)/t elements of traffic. With SP each is an all-gather + reduce-scatter of the
    # same volume (Korthikanti §4.2.2). The backward ones hide behind the weight-gradient GEMMs when the stack
    # overlaps them (tp_overlap).
    tp_bytes = ACT_BYTES * tokens * shape.hidden  # S of one all-reduce: b·s·h on one CP rank
    ar_tp = collective_time_s("all_reduce", tp_bytes, t, members_per_domain(t, 1, dom), net)
    if kernels.tp_comm_overlap and kernels.fp8 and kernels.sequence_parallel:
        # TransformerEngine's userbuffers all-gather a linear's FP8 input (1 byte per element); reduce-scatters stay
        # bf16 (Megatron-Core --tp-comm-overlap with --fp8-format: ub_overlap_ag with an FP8 buffer).
        ar_tp = (collective_time_s("reduce_scatter", tp_bytes, t, members_per_domain(t, 1, dom), net)
                 + collective_time_s("all_gather", tp_bytes / 2, t, members_per_domain(t, 1, dom), net))
    # DTensor's sequence parallelism shards a batch-first (b, s, h) tensor on s, not its leading dimension: NCCL
    # gathers and scatters along the leading one, so each collective also copies its full b·s·h buffer in HBM
    # (read + write), where Megatron's sequence-first (s, b, h) layout needs none (tp_layout_copies).
    copies = np.where((t > 1) & tp_layout_copies, 2 * 2 * tp_bytes / rt.hbm, 0.0)  # AG copy-out + RS copy-in
    ar_tp = ar_tp + copies
    # Megatron's sequence parallelism keeps only its 1/t shard of the inputs of the column-parallel linears (q/k/v and
    # the MLP's first) and gathers each again in the backward for its weight gradient (Korthikanti §4.2.2; Megatron's
    # LinearWithGradAccumulationAndAsyncCommunication.backward, nanotron's tp_recompute_allgather): two all-gathers of
    # b·s·h more per layer, one all-reduce's worth, overlapped with the activation-gradient GEMM when the stack
    # overlaps. DTensor's sequence parallelism (tp_layout_copies) saves the gathered input instead.
    regather = np.where((t > 1) & kernels.sequence_parallel & (not tp_layout_copies), 1.0, 0.0)
    tp_layer = (4 + 2 * full + regather) * ar_tp
    half_bwd = 0.5 * lt["gemm_bwd"]  # the weight-gradient GEMMs, or the activation-gradient ones
    tp_hidden_layer = (np.minimum(2 * ar_tp, half_bwd) + regather * np.minimum(ar_tp, half_bwd) if tp_overlap
                       else 0.0 * ar_tp)
    if kernels.tp_comm_overlap:
        # Megatron-Core's --tp-comm-overlap (TransformerEngine's userbuffers; Wang et al., ASPLOS 2023, "Overlap
        # communication with dependent computation via decomposition"): each all-gather is split into chunks pipelined
        # with the GEMM that consumes it, each reduce-scatter with the GEMM that produces it, forward and backward: all
        # of a layer's TP traffic hides behind its GEMMs as far as they last.
        tp_hidden_layer = np.minimum(tp_layer, lt["gemm_fwd"] * (1 + full) + lt["gemm_bwd"])
    # CP (cp_kinds.py): the design's bytes (common/cp_bytes.py) as its collectives, hidden as far as it allows.
    cp = cp_kinds.cp_times(cp_kind, shape, t, c, b, lt["attn_fwd"], full, dom, net, ACT_BYTES)
    cp_layer, cp_exposed_layer = cp.comm_s, cp.exposed_s
    layer_s = layer_compute + tp_layer - tp_hidden_layer + cp_exposed_layer
    if even_stages:
        split = even_split(shape.layers, p)
    else:
        split = balanced_split(shape.layers, p, layer_s, ht["embedding"], ht["head"], v)
    # PP (SC21 §3.2, §4.1): b·s·h per micro-batch per stage boundary, each way; every TP rank sends 1/t
    # of it (scatter/gather). One send forward and one backward per micro-batch and chunk.
    pp_bytes = ACT_BYTES * tokens * shape.hidden / t
    pp_pair = np.where(t * c * d * p > dom, 1, 2)
    pp_mb = np.where(p > 1, 2 * v * collective_time_s("send_recv", pp_bytes, 2, pp_pair, net), 0.0)
    # DP over the DP x CP group (stride t): gradients and, with ZeRO >= 1, weight gathers, hidden behind the
    # slowest stage's backward (gradients) and forward (weights) when the stack overlaps them (dp_overlap).
    psi = stage_params(shape, t, p, split)
    n_dp = d * c
    fp8_gather = kernels.fp8 and fp8_cost.backend(kernels.fp8_backend).fp8_all_gather
    slowest_layers = np.maximum(np.maximum(split.first, split.last), split.middle)
    buckets = np.ceil(psi / BUCKET_PARAMS)
    calls = np.where(zero >= 2, np.maximum(buckets, slowest_layers), buckets)  # FSDP: one unit (layer) per call
    ar, rs, ag = dp_collectives(psi, n_dp, members_per_domain(n_dp, t, dom), grad_bytes, net,
                                fp8_cost.FP8_BYTES if fp8_gather else WEIGHT_BYTES, calls)
    fwd_mb = slowest_layers * lt["fwd"] if dp_overlap else 0.0 * ar
    bwd_mb = slowest_layers * (lt["bwd"] + rec) if dp_overlap else 0.0 * ar
    # The stack's schedule of them (stacks.py): ZeRO's as Megatron runs it, or FSDP2's as parallel-3d does.
    dp_step, dp_step_exposed, dp_mb, dp_mb_exposed = dp_schedule(ar, rs, ag, fwd_mb, bwd_mb, deg)

    optimizer = optimizer_time(psi / np.where(zero >= 1, n_dp, 1.0), grad_bytes, rt, bf16_copy=not kernels.autocast,
                               impl=kernels.optimizer)
    fsdp_mb = fsdp_copy_time(psi, n_dp, zero, rt) if fsdp_copies else 0.0 * psi
    per_mb = pp_mb + dp_mb_exposed + fsdp_mb  # paid by every stage for every micro-batch
    slowest, total = stage_times(split, shape.layers, p, layer_s, ht["embedding"], ht["head"])
    slowest, total = slowest + per_mb, total + p * per_mb
    fp8_weights = slowest_layers * lt["fp8_weights_per_step"]  # cached FP8 weight casts: once per step (fp8_cost.py)
    gpu_step = pipeline_step(m, v, slowest, total) + dp_step_exposed + optimizer + fp8_weights
    # The host issues every op, kernel and collective (host.py, floor.py); host and GPU are serialised inside each
    # synchronisation interval (serialised_step).
    dp_calls = np.select([zero == 0, zero == 1], [buckets, 2 * buckets], 0.0) * (n_dp > 1)
    hs = host.host_step(shape, deg, kernels, rt, slowest_layers, dp_calls, regather=regather,
                        costs=host_costs if host_costs is not None else cl.host_costs,
                        precision=cl.precision)
    host_s = hs.total(m)
    fwd_share = (lt["fwd"] - lt["fp8_weights_per_step"]) / layer_compute
    once_gpu = dp_step_exposed + optimizer + fp8_weights
    step = np.maximum(gpu_step, serialised_step(hs, slowest, total, fwd_share, slowest_layers, m, v, p, once_gpu))
    bubble = (total - slowest) / v
    head = np.where(p == 1, ht["embedding"] + ht["head"], ht["head"])
    layers = slowest_layers
    return StepCosts(
        compute_s=(layers * layer_compute + head + fsdp_mb) * m + optimizer + fp8_weights,
        tp_comm_s=layers * tp_layer * m, tp_hidden_s=layers * tp_hidden_layer * m,
        cp_comm_s=layers * cp_layer * m, cp_hidden_s=layers * (cp_layer - cp_exposed_layer) * m,
        pp_comm_s=pp_mb * m, pp_hidden_s=0.0 * pp_mb,
        dp_comm_s=dp_step + dp_mb * m, dp_hidden_s=dp_step - dp_step_exposed + (dp_mb - dp_mb_exposed) * m,
        bubble_fraction=bubble / (m * slowest + bubble), bubble_s=bubble,
        optimizer_s=optimizer, gpu_step_s=gpu_step, host_s=host_s, step_s=step, split=split, cp_kind=cp.kind)
