"""Step time: compute, communication, overlap and the pipeline bubble, for arrays of configurations.

Compute. Each GEMM costs T0 + F / R (a Hockney form for kernels): R is the measured large-GEMM rate
(MAMF, cluster.py) and T0 = 2 us a fixed cost per kernel (launch, prologue/epilogue, the last partial
wave). T0 = 2 us reproduces Calculon's A100 GEMM-efficiency table (0.6 / 0.9 / 0.95 of peak at 1 /
16 / 128 GFLOP, calculon-ai/calculon systems/a100_80g.json) to within 0.05 at R = 0.95·peak, so the
achievable fraction of peak falls for small GEMMs: a 1-GFLOP GEMM runs at 65% of R on an A100 and at
39% on an H100 (faster GPUs need bigger GEMMs). Backward = 2x the forward GEMMs (input and weight gradients). Attention's QK^T and
AV are batched GEMMs in bf16 even under FP8 (TransformerEngine keeps attention in high precision);
FP8 linear layers run at the FP8 MAMF with FP8_CAST_OVERHEAD for amax/cast kernels (TE GEMM
profiling: ~17% of current-scaling time is quantization). Everything else (LayerNorm, GeLU, dropout,
residuals, softmax without FlashAttention) is memory-bound: each byte of Korthikanti's saved
activations is taken as written and read once in the forward and twice in the backward, at 90% of
HBM bandwidth. The optimizer step streams its states once. Full recompute repeats the forward of
every layer (with its TP communication), selective recompute the attention core.

Communication (alpha-beta with ring factors, Thakur/Rabenseifner/Gropp; allreduce-anchors §5): a
group of n GPUs with n_l of them per NVLink domain all-reduces S bytes in
    2(n-1)/n · S / B  +  2(n_l-1)·a_in + 2·ceil(log2 k)·a_out,      k = n/n_l domains,
with B the NVLink bus rate inside one domain and, across domains, min(NVLink, n_l x per-GPU network):
NCCL runs one ring per NIC, so a group with 8 GPUs per node gets the node's 8 NICs (nccl-tests: 370-380
GB/s busbw on DGX H100 nodes with 8 x 400G, allreduce-anchors §3.5), a group with one GPU per node one
NIC. The latency across domains is a tree's (NCCL picks trees at scale) at a_out = 40 us per level, which
puts the half-bandwidth size of multi-node all-reduces at 64-256 MiB for 32 to 8K GPUs, as NVIDIA's
NVLSTree scan shows (allreduce-anchors §3.2). Reduce-scatter and all-gather cost half. NICs shared by
concurrent TP and DP traffic are not modelled. Groups are laid out as Megatron does: TP innermost, then
CP, then DP, then PP outermost.
- TP (Megatron SC21 §3.2): 4 all-reduces of b·s·h per layer and micro-batch, 8bsh(t-1)/t of traffic;
  6 with full recompute; sequence parallelism turns each into an all-gather + reduce-scatter of the
  same volume (Korthikanti §4.2.2). The backward ones overlap with the weight-gradient GEMMs
  (Megatron-Core's async dgrad all-reduce); the forward ones are exposed.
- PP (SC21 §3.2, §4.1): b·s·h per micro-batch per boundary, each way; across nodes every TP rank
  sends 1/t of it (scatter/gather). Exposed; interleaving multiplies it by v.
- CP (ring attention): K and V chunks travel c-1 steps forward and twice that backward, hidden
  behind the attention-core compute as far as it lasts.
- DP over the DP×CP group: ZeRO-0 all-reduces the gradients once per step, ZeRO-1 reduce-scatters
  them and all-gathers the weights; the reduction hides behind the backward of the last micro-batch,
  the gather behind the forward of the first (Megatron's overlap_grad_reduce/overlap_param_gather).
  ZeRO-2 reduce-scatters every micro-batch (the gradients are sharded), ZeRO-3 also gathers the
  weights for every micro-batch's forward and backward (ZeRO §7: 1.5x the volume), each hidden
  behind that micro-batch's compute as far as it lasts.
Step = t_mb·(m + (p-1)/v) + exposed DP + optimizer, t_mb the slowest stage's time per micro-batch
(the last stage: it also runs the LM head); the bubble is (p-1)/(v·m) of the ideal (SC21 §2.2).
"""

from __future__ import annotations

import numpy as np

from cluster import Cluster
from memory import activation_coefficient, stage_params
from shapes import Shape

T0 = 2e-6  # fixed cost per GEMM kernel, s
FP8_CAST_OVERHEAD = 1.2  # FP8 GEMM time multiplier for amax + cast kernels
BUCKET_PARAMS = 40e6  # DP gradient bucket (latency is paid per bucket)


def ceil_log2(k):
    """Exact ceil(log2 k) for k >= 1 (frexp: no transcendental functions, same bits on every machine)."""
    return np.frexp(np.asarray(k, float) - 1.0)[1]


def members_per_domain(n, stride, domain: int):
    """How many members of a group (size n, consecutive ranks `stride` apart) share one NVLink domain."""
    n, stride = np.asarray(n, float), np.asarray(stride, float)
    return np.where(stride >= domain, 1.0, np.minimum(n, np.floor(domain / stride)))


def allreduce_time(nbytes, n, n_local, cl: Cluster):
    """Ring all-reduce of `nbytes` per GPU over n GPUs, n_local of them per NVLink domain (seconds)."""
    nbytes, n, nl = (np.asarray(x, float) for x in (nbytes, n, n_local))
    k = np.ceil(n / nl)
    # Across domains NCCL runs one ring per NIC: the bus rate is the domain's NICs or NVLink, whichever is less.
    bus = np.where(k > 1, np.minimum(cl.intra_gbps, nl * cl.inter_gbps), cl.intra_gbps) * 1e9
    latency = 2 * (nl - 1) * cl.alpha_intra_us * 1e-6 + 2 * ceil_log2(k) * cl.alpha_inter_us * 1e-6
    return np.where(n > 1, 2 * (n - 1) / n * nbytes / bus + latency, 0.0)


def gemm_time(flops, tflops: float):
    return T0 + np.asarray(flops, float) / (tflops * 1e12)


def layer_compute(shape: Shape, cl: Cluster, t, c, b, *, sp: bool, flash: bool, fp8: bool, dropout: bool) -> dict:
    """Forward pieces of one block for one micro-batch on one GPU, seconds."""
    t, c, b = (np.asarray(x, float) for x in (t, c, b))
    h, s, f = shape.hidden, shape.seq, shape.ffn
    tokens = b * s / c
    rate = cl.matmul_tflops / (FP8_CAST_OVERHEAD if fp8 else 1.0)
    linear = (gemm_time(2 * tokens * h * (h + 2 * shape.kv_dim) / t, rate) + gemm_time(2 * tokens * h * h / t, rate)
              + gemm_time(2 * tokens * h * f / t, rate) + gemm_time(2 * tokens * f * h / t, rate))
    attn = 2 * gemm_time(2 * b * (shape.heads / t) * (s / c) * s * shape.head_dim, cl.bf16_matmul_tflops)
    coef = activation_coefficient(shape, t, 0, sp, flash, fp8, dropout)
    elementwise = 2 * tokens * h * coef / (cl.hbm_gbps * 1e9)
    score_bytes = (5.0 if dropout else 2.0) * shape.heads * s / h / t
    scores = 0.0 if flash else 2 * tokens * h * score_bytes / (cl.hbm_gbps * 1e9)
    return {"linear": linear, "attn": attn, "elementwise": elementwise, "scores": scores}


def step_costs(shape: Shape, cl: Cluster, t, p, c, d, b, v, m, zero, recompute, *, grad_bytes: float = 2.0,
               sp: bool = True, flash: bool = True, fp8: bool = False, dropout: bool = False) -> dict:
    """All time terms (seconds per step, arrays) for the configurations given as arrays."""
    t, p, c, d, b, v, m = (np.asarray(x, float) for x in (t, p, c, d, b, v, m))
    zero, r = np.asarray(zero), np.asarray(recompute)
    lc = layer_compute(shape, cl, t, c, b, sp=sp, flash=flash, fp8=fp8, dropout=dropout)
    fwd = lc["linear"] + lc["attn"] + lc["elementwise"]
    bwd = 2 * fwd
    rec = np.where(r == 2, fwd, np.where(r == 1, lc["attn"] + lc["scores"], 0.0))
    layers = shape.layers / p
    tokens = b * shape.seq / c
    # LM head in bf16 even under FP8 (the first and last layers usually stay in high precision), then fp32
    # logits and cross-entropy read and written in 3 passes.
    logits = 3 * gemm_time(2 * tokens * shape.hidden * shape.vocab / t, cl.bf16_matmul_tflops) \
        + 24 * tokens * shape.vocab / t / (cl.hbm_gbps * 1e9)
    compute_mb = layers * (fwd + bwd + rec) + logits

    act = 2.0 * tokens * shape.hidden  # bytes of one b x s x h bf16 activation on one CP rank
    # TP: all-reduce-equivalents per layer: 2 forward, 2 backward, 2 more in a full recompute.
    ar_tp = allreduce_time(act, t, members_per_domain(t, 1, cl.domain), cl)
    tp_layer = (4 + 2 * (r == 2)) * ar_tp
    tp_hidden_layer = np.minimum(2 * ar_tp, lc["linear"])  # backward ones under the wgrad GEMMs
    # CP: K and V chunks of this rank, c-1 ring steps forward, 2(c-1) backward.
    kv = 2 * 2.0 * tokens * shape.kv_dim / t
    cp_in_domain = t * c <= cl.domain
    cp_step = np.where(cp_in_domain, kv / (cl.intra_gbps * 1e9) + cl.alpha_intra_us * 1e-6,
                       kv / (cl.inter_gbps * 1e9) + cl.alpha_inter_us * 1e-6) * (c > 1)
    cp_fwd, cp_bwd = (c - 1) * cp_step, 2 * (c - 1) * cp_step
    cp_layer = cp_fwd * (1 + (r == 2)) + cp_bwd
    cp_exposed_layer = (np.maximum(0, cp_fwd - lc["attn"]) * (1 + (r == 2)) + np.maximum(0, cp_bwd - 2 * lc["attn"]))
    # PP: one send forward and one backward per micro-batch (and per chunk when interleaved).
    pp_cross = t * c * d * p > cl.domain
    pp_xfer = np.where(pp_cross, act / t / (cl.inter_gbps * 1e9) + cl.alpha_inter_us * 1e-6,
                       act / t / (cl.intra_gbps * 1e9) + cl.alpha_intra_us * 1e-6)
    pp_mb = np.where(p > 1, 2 * v * pp_xfer, 0.0)
    # DP over the DP x CP group (stride t): gradients and, with ZeRO >= 1, weight gathers.
    psi = stage_params(shape, t, p)
    n_dp = d * c
    nl_dp = members_per_domain(n_dp, t, cl.domain)
    buckets = np.ceil(psi / BUCKET_PARAMS)
    ar = allreduce_time(grad_bytes * psi, n_dp, nl_dp, cl)
    lat = allreduce_time(0.0, n_dp, nl_dp, cl) * (buckets - 1)  # latency paid once per bucket
    rs = ar / 2 + lat / 2
    ag = allreduce_time(2.0 * psi, n_dp, nl_dp, cl) / 2 + lat / 2  # bf16 weights
    fwd_mb, bwd_mb = layers * fwd, layers * (bwd + rec)
    dp_step = np.select([zero == 0, zero == 1, zero == 2], [ar + lat, rs + ag, ag], 0.0)  # per step
    dp_step_exposed = np.select([zero == 0, zero == 1], [np.maximum(0, ar + lat - bwd_mb),
                                                         np.maximum(0, rs - bwd_mb) + np.maximum(0, ag - fwd_mb)],
                                np.where(zero == 2, np.maximum(0, ag - fwd_mb), 0.0))
    dp_mb = np.select([zero == 2, zero == 3], [rs, 2 * ag + rs], 0.0)  # per micro-batch
    dp_mb_exposed = np.select([zero == 2, zero == 3], [np.maximum(0, rs - bwd_mb),
                                                       np.maximum(0, 2 * ag + rs - fwd_mb - bwd_mb)], 0.0)
    has_dp = n_dp > 1
    dp_step, dp_step_exposed = dp_step * has_dp, dp_step_exposed * has_dp
    dp_mb, dp_mb_exposed = dp_mb * has_dp, dp_mb_exposed * has_dp

    opt_params = psi / np.where(zero >= 1, n_dp, 1.0)
    optimizer = opt_params * (26.0 + grad_bytes) / (cl.hbm_gbps * 1e9)  # read 4+4+4+g, write 4+4+4+2

    t_mb = (compute_mb + layers * (tp_layer - tp_hidden_layer + cp_exposed_layer) + pp_mb + dp_mb_exposed)
    ticks = m + (p - 1) / v
    step = t_mb * ticks + dp_step_exposed + optimizer
    return {
        "compute_s": compute_mb * m + optimizer,
        "tp_comm_s": layers * tp_layer * m, "tp_hidden_s": layers * tp_hidden_layer * m,
        "cp_comm_s": layers * cp_layer * m, "cp_hidden_s": layers * (cp_layer - cp_exposed_layer) * m,
        "pp_comm_s": pp_mb * m, "pp_hidden_s": 0.0 * pp_mb,
        "dp_comm_s": dp_step + dp_mb * m, "dp_hidden_s": dp_step - dp_step_exposed + (dp_mb - dp_mb_exposed) * m,
        "bubble_fraction": (p - 1) / (v * m), "bubble_s": t_mb * (p - 1) / v,
        "optimizer_s": optimizer, "step_s": step,
    }
