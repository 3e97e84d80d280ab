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

Communication: every collective is priced by common/collective_cost.py, the model fsdp-scaling's
projection uses too (nccl-tests' bus factors; ring steps inside the NVLink domain, tree levels across;
NVLink inside a domain and min(NVLink, n_l x NIC) across, NCCL's ring per NIC; the constants, their
sources and the sizes at half bandwidth they give are there). Each paper's byte term is written first,
as nccl-tests' S of the collective that carries it, then priced. NICs shared by concurrent TP and DP
traffic are not modelled. Groups are laid out as Megatron does: TP innermost, then CP, then DP, then PP
outermost.
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

from typing import NamedTuple

import numpy as np

from cluster import Cluster
from common.collective_cost import Network, collective_time_s, latency_s, members_per_domain
from degrees import FULL, SELECTIVE, Degrees
from memory import WEIGHT_BYTES, activation_coefficient, stage_params
from shapes import Shape

T0 = 2e-6  # fixed cost per GEMM kernel, s
FP8_CAST_OVERHEAD = 1.2  # FP8 GEMM time multiplier for amax + cast kernels
BUCKET_PARAMS = 40e6  # DP gradient bucket (latency is paid per bucket)
ACT_BYTES = 2.0  # bf16 activations between layers


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
    coef = activation_coefficient(shape, t, 0, sequence_parallel=sp, flash=flash, fp8=fp8, dropout=dropout)
    elementwise = 2 * tokens * h * coef / (cl.hbm_gbps * 1e9)
    score_bytes = (5.0 if dropout else 2.0) * shape.heads * s / h / t
    scores = 0.0 if flash else 2 * tokens * h * score_bytes / (cl.hbm_gbps * 1e9)
    return {"linear": linear, "attn": attn, "elementwise": elementwise, "scores": scores}


class DPCollectives(NamedTuple):
    """Seconds for one step's data-parallel collectives of Ψ parameters (arrays)."""
    all_reduce: np.ndarray  # the gradients, ZeRO-0
    reduce_scatter: np.ndarray  # the gradients, ZeRO >= 1 (ZeRO-2/3: every micro-batch)
    all_gather: np.ndarray  # the bf16 weights, ZeRO >= 1 (ZeRO-3: before forward and backward)


def dp_collectives(psi, n, n_local, grad_bytes: float, net: Network) -> DPCollectives:
    """The DP group's collectives (ZeRO §7); the latency is paid once per gradient bucket of BUCKET_PARAMS."""
    grads = grad_bytes * np.asarray(psi, float)  # nccl-tests' S of the gradient all-reduce / reduce-scatter
    weights = WEIGHT_BYTES * np.asarray(psi, float)  # S of the weight all-gather
    more_buckets = np.ceil(np.asarray(psi, float) / BUCKET_PARAMS) - 1

    def priced(kind: str, nbytes):
        extra = more_buckets * np.where(np.asarray(n) > 1, latency_s(kind, n, n_local, net), 0.0)
        return collective_time_s(kind, nbytes, n, n_local, net) + extra
    return DPCollectives(priced("all_reduce", grads), priced("reduce_scatter", grads), priced("all_gather", weights))


def step_costs(shape: Shape, cl: Cluster, deg: Degrees, *, grad_bytes: float = 2.0, sp: bool = True,
               flash: bool = True, fp8: bool = False, dropout: bool = False) -> dict:
    """All time terms (seconds per step, arrays) for the configurations of `deg`."""
    t, p, c, d, b, v, m, zero, r = deg.t, deg.p, deg.c, deg.d, deg.b, deg.v, deg.m, deg.zero, deg.recompute
    full = r == FULL
    lc = layer_compute(shape, cl, t, c, b, sp=sp, flash=flash, fp8=fp8, dropout=dropout)
    fwd = lc["linear"] + lc["attn"] + lc["elementwise"]
    bwd = 2 * fwd
    rec = np.where(full, fwd, np.where(r == SELECTIVE, lc["attn"] + lc["scores"], 0.0))
    layers = shape.layers / p
    tokens = b * shape.seq / c
    # LM head in bf16 even under FP8 (the first and last layers usually stay in high precision), then fp32
    # logits and cross-entropy read and written in 3 passes.
    logits = 3 * gemm_time(2 * tokens * shape.hidden * shape.vocab / t, cl.bf16_matmul_tflops) \
        + 24 * tokens * shape.vocab / t / (cl.hbm_gbps * 1e9)
    compute_mb = layers * (fwd + bwd + rec) + logits
    net, dom = cl.net, cl.domain

    # TP (SC21 §3.2): per layer and micro-batch 2 all-reduces of b·s·h forward, 2 backward (2 more in a full
    # recompute): 8·b·s·h·(t-1)/t elements of traffic. With SP each is an all-gather + reduce-scatter of the
    # same volume (Korthikanti §4.2.2).
    tp_bytes = ACT_BYTES * tokens * shape.hidden  # S of one all-reduce: b·s·h on one CP rank
    ar_tp = collective_time_s("all_reduce", tp_bytes, t, members_per_domain(t, 1, dom), net)
    tp_layer = (4 + 2 * full) * ar_tp
    tp_hidden_layer = np.minimum(2 * ar_tp, lc["linear"])  # backward ones under the wgrad GEMMs
    # CP (ring attention): this rank's K and V chunks, c-1 ring steps forward and 2(c-1) backward.
    kv_bytes = 2 * ACT_BYTES * tokens * shape.kv_dim / t
    cp_pair = np.where(t * c <= dom, 2, 1)  # neighbours in one NVLink domain, or across the network
    cp_step = collective_time_s("send_recv", kv_bytes, 2, cp_pair, net) * (c > 1)
    cp_fwd, cp_bwd = (c - 1) * cp_step, 2 * (c - 1) * cp_step
    cp_layer = cp_fwd * (1 + full) + cp_bwd
    cp_exposed_layer = (np.maximum(0, cp_fwd - lc["attn"]) * (1 + full) + np.maximum(0, cp_bwd - 2 * lc["attn"]))
    # PP (SC21 §3.2, §4.1): b·s·h per micro-batch per stage boundary, each way; every TP rank sends 1/t
    # of it (scatter/gather). One send forward and one backward per micro-batch and chunk.
    pp_bytes = ACT_BYTES * tokens * shape.hidden / t
    pp_pair = np.where(t * c * d * p > dom, 1, 2)
    pp_mb = np.where(p > 1, 2 * v * collective_time_s("send_recv", pp_bytes, 2, pp_pair, net), 0.0)
    # DP over the DP x CP group (stride t): gradients and, with ZeRO >= 1, weight gathers.
    psi = stage_params(shape, t, p)
    n_dp = d * c
    ar, rs, ag = dp_collectives(psi, n_dp, members_per_domain(n_dp, t, dom), grad_bytes, net)
    fwd_mb, bwd_mb = layers * fwd, layers * (bwd + rec)
    dp_step = np.select([zero == 0, zero == 1, zero == 2], [ar, rs + ag, ag], 0.0)  # per step
    dp_step_exposed = np.select([zero == 0, zero == 1], [np.maximum(0, ar - bwd_mb),
                                                         np.maximum(0, rs - bwd_mb) + np.maximum(0, ag - fwd_mb)],
                                np.where(zero == 2, np.maximum(0, ag - fwd_mb), 0.0))
    dp_mb = np.select([zero == 2, zero == 3], [rs, 2 * ag + rs], 0.0)  # per micro-batch
    dp_mb_exposed = np.select([zero == 2, zero == 3], [np.maximum(0, rs - bwd_mb),
                                                       np.maximum(0, 2 * ag + rs - fwd_mb - bwd_mb)], 0.0)

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
