"""Published runs of small models on one node (and on a few nodes): the regime issue 29 found priced far too fast.

Each row pins what its source states and the stack that ran it (cases.py); what the source leaves open the planner
fills in with the fastest setting, as published.py does. Every row is held out: the fitted constants never saw it.
The error is that of per-GPU throughput, as in published.py. All rows are H100/H200 BF16.

Sources (each number as its source prints it):
- nanotron / the Ultra-Scale Playbook, best configuration per model size and node count (huggingface/nanotron
  `docs/benchmark_summary.svg`, committed c252843, read at 2411b02; the figure's text is in the SVG's comments):
  nanotron v0.5 on nodes of 8 H100 80 GB, seq 4,096, 1M tokens per batch (DP x GAS x MBS = 256 sequences), vocab
  131,072 (scripts/scaling_benchmarks.py), models 1.34B (16 layers, hidden 2048, 32 heads, SwiGLU 8192), 3.57B
  (28, 3072, 32, 8192), 8.86B (32, 4096, 32, 14336), no GQA (NUM_KEY_VALUE_HEADS = None). The cells of 1, 2 and
  4 nodes (fewer than 64 GPUs) are here with their DP/TP/PP, GAS, MBS and ZeRO stage, but for the 80B model's (no
  small model: the figure's 4-node 80B cell, TP8 x PP4 at 14.76% MFU, is not this regime's).
  The figure prints MFU; nanotron's model FLOPs (models/llama.py get_flops: 3 x the forward matmuls, attention
  included, LM head included, embedding not) are the planner's model FLOPs, so the row is MFU x 989.4 model
  TFLOP/s per GPU (the H100 SXM dense BF16 peak; the figure does not print the peak it divides by).
- nanotron's TP series (huggingface/nanotron `scripts/scaling_benchmarks.py` at e24d248, the comment of
  tp_mbs_configs; ../shared/reference/anchors-2026.md §5.3): the 3.57B model on one node at TP 2, 4, 8 with the
  largest micro-batch that fit (3, 9, 18), 14,167 / 13,460 / 10,889 tokens/s/GPU. Its TFLOP/s over its tokens/s
  give 25.67 GFLOP per token: the 3.57B model at seq 4,096 with vocab 131,072 exactly. One micro-batch per step
  and no DP (the series varies TP and MBS only; assumed), ZeRO-0, TP in REDUCE_SCATTER mode (sequence parallel).
- Megatron-Core weak scaling (NVIDIA/Megatron-LM `images/model_table.png`, f2e5db4, July 2024, described in its
  README "Performance Benchmarking"): GPT models from 1.7B (24 layers, hidden 2048, 16 heads, 48 H100s) to 462B,
  DP 48 throughout, batch 192 to 3,072 at seq 4,096, vocab 131,072, per-GPU model TFLOP/s (Megatron's
  num_floating_point_operations counts what the planner's model FLOPs count: 6·N' + 12·L·h·s per token; the
  parameter counts it prints fit a GELU MLP of 4h and untied embeddings), with the distributed optimizer, overlapped
  gradient reduce and parameter gather, and --tp-comm-overlap. The whole table is here (it is one source); its 1.7B
  row is this regime's, the others land in the larger regimes. Micro-batch and recompute are not printed: the planner
  takes the fastest.

Not here: KempnerForge's MFU report (KempnerInstitute/KempnerForge benchmarks/mfu_scaling/mfu_scaling.md, 4 H200s per
node) has one-node TP-vs-FSDP groups, but its one-GPU row (the 8B shape, full activation checkpointing, 10,471
tokens/s) implies 762 TFLOP/s of executed FLOPs, 96% of the H100/H200 BF16 MAMF (794.5), and its FSDP rows 86-89%:
more than any GEMM benchmark reaches, so its rates cannot be read as measurements until that is explained.

Everything the planner prints here is a projection; nothing was measured on a GPU here.
"""

from __future__ import annotations

from planner.model.shapes import Shape
from planner.search.search import Pins

from .cases import Case, Software, gpt

NANOTRON = "nanotron / Ultra-Scale Playbook"
NANOTRON_TP = "nanotron TP series"
MCORE = "Megatron-Core weak scaling"
SOURCES = (NANOTRON, NANOTRON_TP, MCORE)
H100_PEAK_TFLOPS = 989.4  # dense BF16 (common/hardware.py), the denominator of the MFU the nanotron figure prints

# nanotron v0.5: gradients accumulated in fp32 (accumulate_grad_in_fp32), FlashAttention-2 (flash-attn), fused RMSNorm
# and rotary kernels, q/k/v one GEMM, REDUCE_SCATTER TP (sequence parallel) with tp_linear_async_communication (the
# backward collectives under the weight-gradient GEMMs), DDP buckets overlapped with the backward, eager PyTorch.
NANOTRON_STACK = Software(grad_bytes=4.0, rope=True, attention_kernel="fa2", host="eager")
# Megatron-Core of 2024: TransformerEngine's fused kernels and attention, fp32 main gradients, overlapped DP, and
# --tp-comm-overlap.
MCORE_STACK = Software(grad_bytes=4.0, tp_comm_overlap=True)


def nanotron_shape(layers: int, hidden: int, heads: int, swiglu: int) -> Shape:
    """A nanotron benchmark model: Llama with SwiGLU width `swiglu` (a GELU MLP of 1.5x), seq 4096, vocab 131072."""
    return Shape(layers, hidden, heads, heads, 131072, 4096, swiglu * 3 // 2)


NANOTRON_MODELS = {"1.34B": nanotron_shape(16, 2048, 32, 8192), "3.57B": nanotron_shape(28, 3072, 32, 8192),
                   "8.86B": nanotron_shape(32, 4096, 32, 14336)}
# (model, nodes, DP, TP, PP, GAS, MBS, ZeRO, MFU %): the figure's cells of 1, 2 and 4 nodes of 8 H100s.
NANOTRON_BEST = [("1.34B", 1, 4, 1, 2, 16, 4, 1, 44.32), ("3.57B", 1, 4, 1, 2, 32, 2, 1, 46.68),
                 ("8.86B", 1, 2, 1, 4, 128, 1, 1, 45.22),
                 ("1.34B", 2, 8, 1, 2, 32, 1, 1, 41.59), ("3.57B", 2, 8, 1, 2, 16, 2, 1, 43.77),
                 ("8.86B", 2, 4, 4, 1, 16, 4, 1, 43.94),
                 ("1.34B", 4, 16, 1, 2, 16, 1, 1, 38.38), ("3.57B", 4, 16, 1, 2, 8, 2, 1, 40.39),
                 ("8.86B", 4, 16, 1, 2, 16, 1, 1, 43.31)]
# (params B, heads, hidden, layers, TP, PP, GPUs, batch, model TFLOP/s per GPU): Megatron-Core's table, DP 48.
MCORE_WEAK_SCALING = [(1.7, 16, 2048, 24, 1, 1, 48, 192, 408.8), (7.1, 32, 4096, 30, 2, 1, 96, 192, 465.9),
                      (16, 48, 6144, 32, 4, 1, 192, 192, 489.1), (32, 56, 7168, 48, 8, 1, 384, 192, 459.6),
                      (70, 64, 8192, 84, 8, 2, 768, 384, 419.7), (119, 80, 10240, 92, 8, 4, 1536, 768, 420.5),
                      (177, 96, 12288, 96, 8, 6, 2304, 1152, 432.8), (314, 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
                      (462, 144, 18432, 112, 8, 16, 6144, 3072, 459.9)]
# (TP, MBS, tokens/s/GPU): the 3.57B model, one micro-batch per step.
NANOTRON_TP_SERIES = [(2, 3, 14167.25), (4, 9, 13460.16), (8, 18, 10888.53)]


def cases() -> list[Case]:
    out = []
    for model, nodes, dp, tp, pp, gas, mbs, zero, mfu in NANOTRON_BEST:
        gpus = 8 * nodes
        out.append(Case(NANOTRON, f"{model} on {gpus} GPUs, TP{tp} PP{pp} DP{dp}", NANOTRON_MODELS[model], "h100",
                        gpus, dp * gas * mbs, Pins(tp=tp, pp=pp, dp=dp, cp=1, zero=zero, microbatch=mbs, interleave=1,
                                                   recompute="none"),
                        "model_tflops_per_gpu", round(mfu / 100 * H100_PEAK_TFLOPS, 1), "held-out",
                        software=NANOTRON_STACK))
    for tp, mbs, tps in NANOTRON_TP_SERIES:
        out.append(Case(NANOTRON_TP, f"3.57B TP{tp} on {tp} GPUs, MBS {mbs}", NANOTRON_MODELS["3.57B"], "h100", tp, mbs,
                        Pins(tp=tp, pp=1, dp=1, cp=1, zero=0, microbatch=mbs, recompute="none"),
                        "tokens_per_s_per_gpu", tps, "held-out", software=NANOTRON_STACK,
                        group="nanotron 3.57B, TP degree on one node"))
    for params, heads, hidden, layers, tp, pp, gpus, batch, tflops in MCORE_WEAK_SCALING:
        out.append(Case(MCORE, f"{params:g}B on {gpus:,} GPUs, TP{tp} PP{pp} DP48",
                        gpt(layers, hidden, heads, seq=4096, vocab=131072), "h100", gpus, batch,
                        Pins(tp=tp, pp=pp, dp=48, cp=1, zero=1), "model_tflops_per_gpu", tflops, "held-out",
                        software=MCORE_STACK))
    return out
