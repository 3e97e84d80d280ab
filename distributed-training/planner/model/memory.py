"""Memory per GPU: ZeRO model states, Korthikanti activations, framework buffers.

Every function takes numpy arrays of degrees (one element per configuration: the search evaluates
thousands at once) or plain numbers, and returns bytes. The terms, each with its source:

Model states (ZeRO, Rajbhandari et al. SC20 §3-5; the formula is common/zero_memory.py, shared with
fsdp-scaling): mixed-precision Adam keeps bf16 weights (2 B),
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
of the four linear layers are saved in 1 byte instead of 2: 15 + 3f/h with dropout masks; without SP
two of them (the QKV and MLP-up inputs) are among the replicated terms, which then fall from 10 to 8.
torchtitan's per-op selective AC (recompute "op") drops the two LayerNorm outputs and the GeLU
output, which it recomputes from the GEMM outputs it keeps.
1F1B keeps min(p, m) micro-batches in flight on the first stage, each with its L/p layers: L layers'
worth in total (Korthikanti eq. 5); interleaving v chunks multiplies it by 1 + (p-1)/(p·v). With
unequal stages (stages.py) each stage holds its own layers times its micro-batches in flight (p - i
on stage i), so the busiest can be the second. The LM head adds 4·s·b·(h + V)/t for its fp32 logits
(Korthikanti's embedding/logits term).

Buffers: 1 GB for the CUDA context and cuBLAS/NCCL workspaces, two 40M-element fp32 gradient
buckets unless ZeRO-3 (Megatron's default bucket size), the send/receive buffers of pipeline
point-to-point, and under FP8 a 1-byte cached copy of the local weights (TE's FP8 weight cache).
A configuration fits if the total stays under the usable memory (`usable_bytes`), the memory as PyTorch's
caching allocator sees it: the capacity CUDA reports, less a share for the allocator's fragmentation.
- Capacity: a GPU sold as "80 GB" has 80 GiB of HBM, of which CUDA reports 79.11 GiB as the device's total
  (PyTorch's out-of-memory message on an H100 80GB HBM3: "GPU 0 has a total capacity of 79.11 GiB",
  vllm-project/vllm#27508; an A100 80GB: 79.15 GiB, Lightning-AI/litgpt tutorials/oom.md; an H200 141GB:
  139.80 GiB), so CAPACITY_PER_GB = 79.11/80 GiB per GB of the hardware table, the H100's ratio (the smallest).
  What lives outside the allocator, the CUDA context and the libraries' workspaces, is CONTEXT_BYTES of the
  buffers below (litgpt's A100 holds 0.51 GiB of non-PyTorch memory in use at its out-of-memory error).
- Headroom: what a run reserves beyond what the model projects it allocates. The allocator's fragmentation, memory
  reserved but not handed out, is 2.7% of what was reserved at litgpt's error above (2.14 GiB beside 76.28 GiB
  allocated) and 0.5% at vLLM's (331 MiB beside 68.83 GiB); ZeRO (§3.2) reports out-of-memory errors with 30% still
  free in the worst case, which PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
  avoid. With the temporaries the model does not count, torchtitan's Llama 3.1 8B runs reserve 1.06-1.09x the
  planner's projection compiled and 1.13-1.18x eager (PLANNER_VALIDATION.md section 4; on 96 GB H100s they reserve
  up to 84.9 GiB, 95% of the nominal 96 GB: benchmarks/llama3_h100_202412_torchtitan.md). MEMORY_HEADROOM = 0.85 =
  1/1.18 of the capacity admits a plan whose run reserves what the eager runs did over their projection (the pytorch
  stack is eager); `--memory-headroom 0.92` (1/1.09) is the compiled runs' figure, for fused or compiled stacks.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from common.zero_memory import ModelStates, StateBytes
from common.zero_memory import model_state_bytes as zero_state_bytes

from .degrees import FULL, NONE, OP, RECOMPUTE, SELECTIVE, Degrees  # noqa: F401  (RECOMPUTE: the search's names)
from .shapes import Shape

OPTIMIZER_BYTES = 12.0  # fp32 master weights + Adam momentum + variance (ZeRO's K)
WEIGHT_BYTES = 2.0  # bf16 working weights
CONTEXT_BYTES = 1.0e9  # CUDA context + cuBLAS / NCCL workspaces
BUCKET_BYTES = 2 * 40e6 * 4  # two fp32 gradient buckets of 40M elements (Megatron's ddp bucket size)
MEMORY_HEADROOM = 0.85  # the share of the allocator's capacity a plan's projection may fill: 1/1.18 (docstring)
CAPACITY_PER_GB = 79.11 / 80 * 2**30  # bytes CUDA reports per GB of the hardware table (an H100 80GB: 79.11 GiB)


def usable_bytes(memory_gb: float, headroom: float = MEMORY_HEADROOM) -> float:
    """The memory a plan may fill on a GPU of `memory_gb` (the hardware table's GB): the allocator's capacity as
    CUDA reports it, less the fragmentation share (module docstring)."""
    return headroom * memory_gb * CAPACITY_PER_GB


class Memory(NamedTuple):
    """Memory per GPU by what holds it, and the total: bytes, arrays over configurations (memory_breakdown,
    torch_memory.memory_breakdown), or one plan's GB (search.records.Plan.memory_gb)."""
    params: np.ndarray
    grads: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    buffers: np.ndarray
    total: np.ndarray


def model_state_bytes(psi, n_shard, stage, grad_bytes: float = 2.0) -> ModelStates:
    """(weights, gradients, optimizer) bytes per GPU for Ψ parameters sharded N ways at a ZeRO stage."""
    return zero_state_bytes(psi, n_shard, stage, StateBytes(WEIGHT_BYTES, grad_bytes, OPTIMIZER_BYTES))


def stage_params(shape: Shape, t, p, split=None):
    """Parameters of the largest pipeline stage on one GPU: its blocks and the embedding or LM head, /t.

    `split` (stages.StageSplit) gives the layers of the first, busiest middle and last stage; without
    it every stage has L/p.
    """
    t, p = np.asarray(t, float), np.asarray(p, float)
    if split is None:
        first_layers = last_layers = mid_layers = shape.layers / p
    else:
        first_layers, mid_layers, last_layers = split.first, split.middle, split.last
    first = first_layers * shape.layer_params + shape.embedding_params
    last = last_layers * shape.layer_params + shape.head_params
    mid = mid_layers * shape.layer_params
    single = shape.layers * shape.layer_params + shape.embedding_params + shape.head_params
    return np.where(p == 1, single, np.maximum(np.maximum(first, last), mid)) / t


def activation_coefficient(shape: Shape, t, recompute, *, sequence_parallel: bool, flash: bool, fp8: bool,
                           dropout: bool = False):
    """Bytes per (s·b·h) of one layer's saved activations per GPU (the bracket of Korthikanti Table 2)."""
    t, r = np.asarray(t, float), np.asarray(recompute)
    f_over_h = shape.ffn / shape.hidden
    x = 1.0 if fp8 else 2.0  # a saved linear-layer input: TransformerEngine keeps the FP8 copy
    masks = 2.0 if dropout else 0.0  # two 1-byte dropout masks (attention output, MLP output)
    # Korthikanti §4.1, per s·b·h. Not split by TP without SP: the two LayerNorm inputs (2 B each), the QKV
    # and MLP-up inputs (the LayerNorm outputs), the dropout masks. Split by t: Q and K (for QK^T) and V,
    # the output projection's input, the GeLU input (2f/h) and the MLP-down input (f/h elements).
    replicated = 2 + 2 + x + x + masks
    split = 2 + 2 + 2 + x + 2 * f_over_h + x * f_over_h
    linear = replicated + split  # 34 for ffn = 4h in bf16 with dropout; 15 + 3f/h in FP8
    # Scores: softmax output (2 B) + dropout mask (1 B) + dropout output (2 B) per a·s² element.
    scores = 0.0 if flash else (5.0 if dropout else 2.0) * shape.heads * shape.seq / shape.hidden
    sp = sequence_parallel & (t > 1)
    kept = np.where(sp, linear / t, replicated + split / t)
    full = np.where(sp, 2.0 / t, 2.0)  # the layer input only
    # Per-op AC (OP) drops the two LayerNorm outputs (the QKV and MLP-up inputs, x B each) and the GeLU
    # output (the MLP-down input, x·f/h): recomputed from the kept GEMM outputs in the backward.
    op = np.where(sp, (linear - 2 * x - x * f_over_h) / t, replicated - 2 * x + (split - x * f_over_h) / t)
    return np.select([r == NONE, r == SELECTIVE, r == FULL], [kept + scores / t, kept, full], op)


def activation_bytes(shape: Shape, deg: Degrees, *, sequence_parallel: bool = True, flash: bool = True,
                     fp8: bool = False, dropout: bool = False, split=None):
    """Activations on the busiest GPU: a stage's layers times its micro-batches in flight, or the LM head's.

    1F1B keeps p - i micro-batches in flight on stage i (at most m), so the first stage holds p of
    its layers' activations, the second p - 1 of its own (with unequal stages it can be the busier
    one), the last one plus the fp32 logits. Interleaving v chunks multiplies the first stages'
    share by 1 + (p-1)/(p·v) (Korthikanti §4.2.3). `split` as in stage_params.
    """
    t, p, c, b, v, m = deg.t, deg.p, deg.c, deg.b, deg.v, deg.m
    flags = dict(sequence_parallel=sequence_parallel, flash=flash, fp8=fp8, dropout=dropout)
    sbh = shape.seq / c * b * shape.hidden  # tokens of one micro-batch on one CP rank × hidden
    per_layer = sbh * activation_coefficient(shape, t, deg.recompute, **flags)
    if split is None:
        first_layers = last_layers = mid_layers = shape.layers / p
    else:
        first_layers, mid_layers, last_layers = split.first, split.middle, split.last
    interleave = np.where(v > 1, 1 + (p - 1) / (p * v), 1.0)
    first = first_layers * per_layer * np.where(v > 1, p, np.minimum(p, m)) * interleave
    second = np.where(p > 2, mid_layers * per_layer * np.where(v > 1, p - 1, np.minimum(p - 1, m)) * interleave, 0.0)
    # Full recompute re-materialises one whole layer during its backward.
    working = np.where(deg.recompute == FULL, sbh * activation_coefficient(shape, t, NONE, **flags), 0.0)
    logits = 4.0 * shape.seq / c * b * (shape.hidden + shape.vocab) / t
    last = last_layers * per_layer + logits
    single = shape.layers * per_layer + logits
    return np.where(p == 1, single, np.maximum(np.maximum(first, last), second)) + working


def buffer_bytes(shape: Shape, deg: Degrees, *, fp8: bool, local_params):
    """Context, gradient buckets, pipeline send/receive buffers and the FP8 weight cache."""
    buckets = np.where(deg.zero >= 3, 0.0, BUCKET_BYTES)
    p2p = np.where(deg.p > 1, 4 * 2.0 * shape.seq / deg.c * deg.b * shape.hidden, 0.0)  # fwd/bwd × send/recv, bf16
    fp8_cache = np.asarray(local_params, float) if fp8 else 0.0
    return CONTEXT_BYTES + buckets + p2p + fp8_cache


def memory_breakdown(shape: Shape, deg: Degrees, *, grad_bytes: float = 2.0, sequence_parallel: bool = True,
                     flash: bool = True, fp8: bool = False, dropout: bool = False, split=None) -> Memory:
    """Bytes per GPU by category (arrays), and the total; `split` (stages.StageSplit) as in stage_params."""
    psi = stage_params(shape, deg.t, deg.p, split)
    n = deg.d * deg.c
    weights, grads, optim = model_state_bytes(psi, n, deg.zero, grad_bytes)
    z3 = deg.zero >= 3
    unit = max(shape.layer_params, shape.vocab * shape.hidden) / deg.t  # largest gathered unit
    weights = weights + np.where(z3, 2.0 * unit, 0.0)  # DeepSpeed: 4·largest_layer = bf16 weights + grads
    grads = grads + np.where(z3, 2.0 * unit, 0.0)
    acts = activation_bytes(shape, deg, sequence_parallel=sequence_parallel, flash=flash, fp8=fp8, dropout=dropout,
                            split=split)
    local_weights = psi / np.where(z3, n, 1.0)
    buffers = buffer_bytes(shape, deg, fp8=fp8, local_params=local_weights)
    total = weights + grads + optim + acts + buffers
    return Memory(weights, grads, optim, acts, buffers, total)
