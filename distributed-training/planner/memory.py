"""Memory per GPU: ZeRO model states, Korthikanti activations, framework buffers.

Every function takes numpy arrays of degrees (one element per configuration: the search evaluates
thousands at once) or plain numbers, and returns bytes. The terms, each with its source:

Model states (ZeRO, Rajbhandari et al. SC20 §3-5): mixed-precision Adam keeps bf16 weights (2 B),
gradients (2 B; 4 B with fp32 accumulation as Megatron's main_grad does, --grad-bytes 4) and K = 12 B
of optimizer state (fp32 master, momentum, variance). Stage 1 shards the optimizer state over the
N data-parallel ranks, stage 2 also the gradients, stage 3 also the weights:
    stage 0: (2 + g + 12)·Ψ     1: (2 + g)·Ψ + 12Ψ/N     2: 2Ψ + (g + 12)·Ψ/N     3: (2 + g + 12)·Ψ/N
with Ψ the parameters one GPU's model shard holds: a pipeline stage's layers divided by TP (so the
issue's "divided by TP·PP", with the embedding on the first stage and the LM head on the last).
N = DP·CP: context-parallel ranks hold the same weights and join the gradient reduction (Megatron
shards its distributed optimizer over the DP×CP group). ZeRO-3 also holds the gathered unit being
computed, DeepSpeed's estimator term 4·largest_layer_params (bf16 weights + gradients of one unit).

Activations (Korthikanti et al. 2022, Table 2; bytes per layer per micro-batch, s = sequence per CP
rank, b = micro-batch, h = hidden, a = heads, t = TP):
    no recompute, TP + sequence parallel     s·b·h·(34 + 5·a·s/h) / t
    no recompute, TP without SP              s·b·h·(10 + 24/t + 5·a·s/(h·t))
    selective recompute (attention core)     the 5·a·s/h term is dropped
    full recompute (layer input only)        2·s·b·h  (/t with SP: the input is already sequence-sharded)
The 34 is 18 + 16 for ffn = 4h; for another ffn f it is 18 + 4f/h (the MLP stores its input, the
GeLU input and output: 2sbh + 2sbf + 2sbf + a dropout mask). Without dropout (--no-dropout, the
default: LLM pre-training runs without it) the two 1-byte masks go, 32 + ..., and the scores cost
2·a·s/h (softmax output only). FlashAttention never stores the a·s² scores, so with it (the
default) that term is zero whatever the recompute setting. With FP8 (TransformerEngine) the inputs
of the four linear layers are saved in 1 byte instead of 2: 15 + 3f/h with dropout masks.
1F1B keeps min(p, m) micro-batches in flight on the first stage, each with L/p layers: L layers'
worth in total (Korthikanti eq. 5); interleaving v chunks multiplies it by 1 + (p-1)/(p·v). The LM
head adds 4·s·b·(h + V)/t for its fp32 logits (Korthikanti's embedding/logits term).

Buffers: 1 GB for the CUDA context and cuBLAS/NCCL workspaces, two 40M-element fp32 gradient
buckets unless ZeRO-3 (Megatron's default bucket size), the send/receive buffers of pipeline
point-to-point, and under FP8 a 1-byte cached copy of the local weights (TE's FP8 weight cache).
A configuration fits if the total stays under MEMORY_HEADROOM of the GPU's memory (allocator
fragmentation: ZeRO §3.2 reports OOMs with 30% still free in the worst case).
"""

from __future__ import annotations

import numpy as np

from shapes import Shape

OPTIMIZER_BYTES = 12.0  # fp32 master weights + Adam momentum + variance (ZeRO's K)
WEIGHT_BYTES = 2.0  # bf16 working weights
CONTEXT_BYTES = 1.0e9  # CUDA context + cuBLAS / NCCL workspaces
BUCKET_BYTES = 2 * 40e6 * 4  # two fp32 gradient buckets of 40M elements (Megatron's ddp bucket size)
MEMORY_HEADROOM = 0.90  # usable fraction of HBM (fragmentation allowance)
RECOMPUTE = ("none", "selective", "full")  # recompute codes 0, 1, 2 in the arrays


def model_state_bytes(psi, n_shard, stage, grad_bytes: float = 2.0):
    """(weights, gradients, optimizer) bytes per GPU for Ψ parameters sharded N ways at a ZeRO stage."""
    psi, n, stage = np.asarray(psi, float), np.asarray(n_shard, float), np.asarray(stage)
    weights = WEIGHT_BYTES * psi / np.where(stage >= 3, n, 1.0)
    grads = grad_bytes * psi / np.where(stage >= 2, n, 1.0)
    optim = OPTIMIZER_BYTES * psi / np.where(stage >= 1, n, 1.0)
    return weights, grads, optim


def stage_params(shape: Shape, t, p):
    """Parameters of the largest pipeline stage on one GPU: L/p blocks and the embedding or LM head, /t."""
    t, p = np.asarray(t, float), np.asarray(p, float)
    blocks = shape.layers / p * shape.layer_params
    first = blocks + shape.embedding_params
    last = blocks + shape.head_params
    return np.where(p == 1, blocks + shape.embedding_params + shape.head_params, np.maximum(first, last)) / t


def activation_coefficient(shape: Shape, t, recompute, sequence_parallel: bool, flash: bool, fp8: bool,
                           dropout: bool = False):
    """Bytes per (s·b·h) of one layer's saved activations per GPU (the bracket of Korthikanti Table 2)."""
    t, r = np.asarray(t, float), np.asarray(recompute)
    f_over_h = shape.ffn / shape.hidden
    masks = 2.0 if dropout else 0.0  # two 1-byte dropout masks (attention output, MLP output)
    linear = (13 + 3 * f_over_h if fp8 else 16 + 4 * f_over_h) + masks  # 34 for ffn = 4h, bf16, dropout
    # Scores: softmax output (2 B) + dropout mask (1 B) + dropout output (2 B) per a·s² element.
    scores = 0.0 if flash else (5.0 if dropout else 2.0) * shape.heads * shape.seq / shape.hidden
    sp = sequence_parallel & (t > 1)
    replicated = 8 + masks  # LayerNorm inputs, block input, dropout masks: not split by TP without SP
    kept = np.where(sp, linear / t, replicated + (linear - replicated) / t)
    none = kept + scores / t
    full = np.where(sp, 2.0 / t, 2.0)
    return np.where(r == 0, none, np.where(r == 1, kept, full))


def activation_bytes(shape: Shape, t, p, c, b, v, m, recompute, sequence_parallel: bool = True,
                     flash: bool = True, fp8: bool = False, dropout: bool = False):
    """Activations on the busiest GPU: the in-flight micro-batches of the first stage, or the LM head's."""
    t, p, c, b, v, m = (np.asarray(x, float) for x in (t, p, c, b, v, m))
    sbh = shape.seq / c * b * shape.hidden  # tokens of one micro-batch on one CP rank × hidden
    per_layer = sbh * activation_coefficient(shape, t, recompute, sequence_parallel, flash, fp8, dropout)
    in_flight = np.where(v > 1, 1 + (p - 1) / (p * v), np.minimum(p, m) / p)  # layers' worth: L × this
    first = shape.layers * per_layer * in_flight
    # Full recompute re-materialises one whole layer during its backward.
    working = np.where(np.asarray(recompute) == 2,
                       sbh * activation_coefficient(shape, t, 0, sequence_parallel, flash, fp8, dropout), 0.0)
    logits = 4.0 * shape.seq / c * b * (shape.hidden + shape.vocab) / t
    last = shape.layers / p * per_layer + logits
    return np.where(p == 1, first + logits, np.maximum(first, last)) + working


def buffer_bytes(shape: Shape, t, p, c, b, zero, fp8: bool, local_params):
    """Context, gradient buckets, pipeline send/receive buffers and the FP8 weight cache."""
    p, c, b = (np.asarray(x, float) for x in (p, c, b))
    buckets = np.where(np.asarray(zero) >= 3, 0.0, BUCKET_BYTES)
    p2p = np.where(p > 1, 4 * 2.0 * shape.seq / c * b * shape.hidden, 0.0)  # fwd/bwd × send/recv, bf16
    fp8_cache = np.asarray(local_params, float) if fp8 else 0.0
    return CONTEXT_BYTES + buckets + p2p + fp8_cache


def memory_breakdown(shape: Shape, t, p, c, d, b, v, m, zero, recompute, *, grad_bytes: float = 2.0,
                     sequence_parallel: bool = True, flash: bool = True, fp8: bool = False,
                     dropout: bool = False) -> dict:
    """Bytes per GPU by category (arrays), and the total."""
    psi = stage_params(shape, t, p)
    n = np.asarray(d, float) * np.asarray(c, float)
    weights, grads, optim = model_state_bytes(psi, n, zero, grad_bytes)
    z3 = np.asarray(zero) >= 3
    unit = max(shape.layer_params, shape.vocab * shape.hidden) / np.asarray(t, float)  # largest gathered unit
    weights = weights + np.where(z3, 2.0 * unit, 0.0)  # DeepSpeed: 4·largest_layer = bf16 weights + grads
    grads = grads + np.where(z3, 2.0 * unit, 0.0)
    acts = activation_bytes(shape, t, p, c, b, v, m, recompute, sequence_parallel, flash, fp8, dropout)
    local_weights = psi / np.where(z3, n, 1.0)
    buffers = buffer_bytes(shape, t, p, c, b, zero, fp8, local_weights)
    total = weights + grads + optim + acts + buffers
    return {"params": weights, "grads": grads, "optimizer": optim, "activations": acts, "buffers": buffers,
            "total": total}
