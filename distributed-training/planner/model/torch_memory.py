"""Memory per GPU as PyTorch's stack runs a plan: parallel-3d (DTensor TP + sequence parallelism,
torch.distributed.pipelining, FSDP2 with bf16 MixedPrecisionPolicy and fp32 reduction), at the step's peak.

memory.py prices the papers' stack (Megatron: Korthikanti's activations with sequence parallelism, ZeRO's
accounting); this module prices what parallel-3d's at-scale study measures PyTorch holding (its
results/at_scale*.csv, term by term in its report), for the same Degrees and stage split. Where they part:

- Model states (FSDP2; common/zero_memory.py): the sharded fp32 parameter is the master copy, so a parameter
  costs 4 B of parameter + 4 B of fp32 gradient + 8 B of AdamW moments, all over the dp x cp shard group,
  whichever FSDP2 mode runs (ZeRO "2" = reshard_after_forward=False and "3" = True differ in what they keep
  gathered during the step, not in what they store). Between steps there are no gradients; the sharded ones
  are alive at the peak only without a pipeline and with more than one micro-batch (earlier micro-batches
  have reduced theirs).
- DDP and ZeroRedundancyOptimizer (ZeRO-0/1, fsdp-scaling's ddp and zero1: data parallelism alone): the fp32
  parameters (4 B) and their fp32 gradients (4 B, DDP's bucket views: allocated once, alive all step) on every
  rank, AdamW's moments (8 B) on every rank or over the dp ranks; torch.autocast keeps a bf16 copy of every weight
  from its forward to its backward (2 B: the cast's cache is what the backward saves).
- Gathered weights (bf16, TP-local): ZeRO-3 without a pipeline keeps only the root's LM head and position
  table gathered at the loss (the root never reshards after forward; its blocks were resharded); ZeRO-2
  keeps every unit gathered from its forward to its backward. Under a pipeline, ZeRO-2 holds the stage
  gathered, but the interleaved runtime keeps at most UNSHARDED_CHUNKS of a rank's chunks gathered
  (torch.distributed.pipelining's _add_unshard_reshard); ZeRO-3 holds the unit running and the next.
- Activations per block (torch_layer_bytes): DTensor's sequence parallelism all-gathers each LayerNorm
  output and the column-parallel projections keep that full-length input for their weight gradients
  (Korthikanti keeps the s/t shard and gathers it again): 2 x 2·s·b·h bytes per block whatever t is. The
  fused attention keeps its output and an fp32 log-sum-exp (the ring attention of context parallelism its
  output twice: its own saved copy, and wo's contiguous input), LayerNorm its fp32 statistics, K and V are
  kv_heads wide (GQA). Per-op recompute (`op`, parallel-3d's selective-checkpoint policy) keeps the matmul and
  collective outputs and recomputes the rest; full recompute keeps the block input and rebuilds one block in backward.
  parallel-3d's activation study measures these terms byte for byte (its activations.py imports this one).
- Micro-batches in flight (in_flight): gradient accumulation without a pipeline holds one; Schedule1F1B
  holds min(m, p - i) on pipeline rank i; with m < p, which Schedule1F1B refuses, parallel-3d runs ScheduleGPipe
  and every stage holds all m (the last stage their losses too); ScheduleInterleaved1F1B
  runs w_i = min((v-1)·R + 2(p-1-i), m·v) warm-up chunk forwards, R = m / max(1, m // p) micro-batches per
  round, then one forward before each backward while forwards remain (torch/distributed/pipelining/
  schedules.py, _get_1f1b_rank_ops).
- Pipelining accumulates the stage's gradients unsharded, in fp32, from each chunk's first backward to the
  step's end (FSDP2 reduces once, after the last micro-batch). A chunk's gradients appear as the first
  micro-batch's backward frees its activations; while forwards remain, each later chunk's backward starts
  with the rank as full as before.
- The loss: the LM head's logits are all-gathered vocabulary-wide on every TP rank and the cross-entropy
  runs in fp32 (common.model.lm_loss): it keeps its fp32 log-softmax (4 B per logit) until its backward, which
  adds the log-softmax's and the logits' gradients (8 B): 12 B per logit of one micro-batch, and 4 B more for
  every other micro-batch whose loss waits for its backward (GPipe's last stage). The pipeline's last stage also keeps every micro-batch's
  bf16 logits until the step ends (the schedule merges the outputs), and the first and the last stage hold
  the final LayerNorm's and the head's inputs (the head's input all-gathered to full length).
- Pipeline buffers: a PipelineStage allocates a receive buffer per micro-batch for its input (not the first
  stage) and for its output's gradient (not the last), b·(s/c)/t·h bf16 each (sequence-parallel boundaries).
- The CUDA context and library workspaces, CONTEXT_BYTES (memory.py): the one term the fake world of the
  at-scale study cannot measure.

Every function takes arrays of degrees (the search) or numbers and returns bytes.
"""

from __future__ import annotations

import numpy as np

from common.zero_memory import StateBytes
from common.zero_memory import model_state_bytes as zero_state_bytes

from .degrees import FULL, NONE, Degrees
from .memory import CONTEXT_BYTES, Memory
from .shapes import Shape

FSDP2_STATE = StateBytes(weight=4.0, grad=4.0, optimizer=8.0)  # fp32 shard, fp32 gradient, AdamW's two moments
ACT = 2.0  # bf16 activations (MixedPrecisionPolicy's param_dtype)
STAT = 4.0  # LayerNorm statistics: fp32 on CUDA
LSE = 4.0  # the fused attention's log-sum-exp: fp32 whatever the activations' type
LOSS_SAVED, LOSS_BACKWARD = 4.0, 8.0  # per logit: the fp32 log-softmax kept; its and the logits' gradients
UNSHARDED_CHUNKS = 3  # chunks of a rank the interleaved runtime keeps gathered at once


def torch_layer_bytes(shape: Shape, t, c, b, recompute, elem_bytes: float = ACT, stat_bytes: float = STAT):
    """Bytes one block keeps for its backward, per micro-batch on one GPU (module docstring), tensor by tensor.

    recompute: NONE, OP (per-op selective, parallel-3d's policy) or FULL. stat_bytes: LayerNorm's statistics (fp32 on
    CUDA; a CPU LayerNorm in bf16 keeps them in bf16)."""
    t, c, b = (np.asarray(x, float) for x in (t, c, b))
    r = np.asarray(recompute)
    e, s, h, f = elem_bytes, shape.seq / c, shape.hidden, shape.ffn
    sbh = b * s * h
    qkv = e * b * s * (h + 2 * shape.kv_dim) / t  # q, k, v (GQA: k and v kv_heads wide)
    mlp = e * b * s * f / t  # one MLP-wide tensor: w1's output (GELU's input) or GELU's output
    gathered = 2 * e * sbh  # the q/k/v and w1 inputs: LayerNorm outputs, all-gathered to full length with SP
    block_input = e * sbh / t
    # none: both LayerNorm inputs (one is the block input) and their statistics, the projections' inputs, q/k/v,
    # the attention output (wo's input) and its log-sum-exp, GELU's input and output
    norms = 2 * e * sbh / t + 2 * 2 * stat_bytes * b * s / t
    # With context parallelism the ring (common/ring_attention.py) saves its (b, heads, s, d) output, and wo's input is
    # a (b, s, heads·d) copy of it (a transpose made contiguous), where SDPA's output already is that layout (a view).
    attention = e * sbh / t * (1 + (c > 1)) + LSE * b * (shape.heads / t) * s
    kept = norms + gathered + qkv + attention + 2 * mlp
    # per-op recompute (parallel-3d's policy): matmul and collective outputs kept, the block input for the rest. With
    # t > 1 wo's and w2's outputs are full-length partial sums before their reduce-scatters, which are kept too.
    sharded = t > 1
    op = block_input + qkv + 2 * e * sbh + np.where(sharded, 2 * e * sbh / t + gathered, 0.0) + mlp
    return np.select([r == NONE, r == FULL], [kept, block_input], op)


def in_flight(p, v, m, i):
    """(chunk micro-batches held at pipeline rank i's first backward, whether forwards remain after it): module
    docstring. p = 1: one micro-batch at a time (gradient accumulation)."""
    p, v, m, i = (np.asarray(x, float) for x in (p, v, m, i))
    one_f_one_b = np.where(m < p, m, np.minimum(m, p - i))  # m < p: GPipe, every stage holds all m
    rounds = np.maximum(1.0, np.floor(m / p))
    warmup = np.minimum((v - 1) * (m / rounds) + 2 * (p - 1 - i), m * v)
    steady = np.where(v > 1, m * v > warmup, m > one_f_one_b)
    held = np.where(v > 1, warmup + steady, one_f_one_b)
    return np.where(p == 1, 1.0, held), np.where(p == 1, False, steady)


def _chunks_started(p, v, m, i):
    """Chunks whose first backward runs while the rank is still full (forwards remain), at least one."""
    p, v, m = (np.asarray(x, float) for x in (p, v, m))
    rounds = np.maximum(1.0, np.floor(m / p))
    warmup = np.minimum((v - 1) * (m / rounds) + 2 * (p - 1 - np.asarray(i, float)), m * v)
    return np.clip(np.ceil((m * v - warmup) / (m / rounds)), 1.0, v)


def _rank_params(shape: Shape, t, p, split):
    """Parameters of the first, the busiest middle and the last pipeline rank, per TP rank (p = 1: the model)."""
    t, p = np.asarray(t, float), np.asarray(p, float)
    if split is None:
        first = mid = last = shape.layers / p
    else:
        first, mid, last = split.first, split.middle, split.last
    single = shape.layers * shape.layer_params + shape.embedding_params + shape.head_params
    return ((np.where(p == 1, single, first * shape.layer_params + shape.embedding_params) / t),
            mid * shape.layer_params / t,
            np.where(p == 1, single, last * shape.layer_params + shape.head_params) / t), (first, mid, last)


def memory_breakdown(shape: Shape, deg: Degrees, *, split=None, **_flags) -> Memory:
    """Bytes per GPU by category at the step's peak on the busiest pipeline rank (arrays), and the total.

    Categories: params (the fp32 shard and the gathered bf16 weights), grads (sharded fp32 ones alive at the
    peak, and a pipeline's unsharded fp32 ones), optimizer (AdamW's moments), activations (blocks in flight,
    the head's inputs, the loss, a pipeline's kept logits), buffers (pipeline receive buffers, CUDA context).
    The papers' flags of memory.memory_breakdown (sequence parallelism, FlashAttention, dropout, FP8) do not
    apply: this stack runs sequence parallelism and fused attention, without dropout, in bf16."""
    t, p, c, d, b, v, m, zero, r = deg.t, deg.p, deg.c, deg.d, deg.b, deg.v, deg.m, deg.zero, deg.recompute
    n = d * c
    ddp = zero < 2  # DDP (+ ZeroRedundancyOptimizer): fp32 states unsharded but AdamW's (module docstring)
    (psi_first, psi_mid, psi_last), layers = _rank_params(shape, t, p, split)
    s, h, V = shape.seq / c, shape.hidden, shape.vocab
    per_layer = torch_layer_bytes(shape, t, c, b, r)
    working = np.where(r == FULL, torch_layer_bytes(shape, t, c, b, NONE), 0.0)  # one block rebuilt in backward
    head_inputs = ACT * b * s * h * (1 + 1 / t)  # final LayerNorm's input (s/t) and the head's (all-gathered)
    gpipe = (p > 1) & (v == 1) & (m < p)
    loss = (LOSS_SAVED * np.where(gpipe, m, 1.0) + LOSS_BACKWARD) * b * s * V
    hop = ACT * b * s / t * h  # one pipeline receive buffer
    piped = p > 1
    totals, parts = [], []
    for i_rank, psi, lay, first, last in ((0, psi_first, layers[0], True, False),
                                          (1, psi_mid, layers[1], False, False),  # the busiest middle rank holds most
                                          (p - 1, psi_last, layers[2], False, True)):
        held, steady = in_flight(p, v, m, i_rank)
        a_u = np.asarray(lay, float) / v * per_layer  # one chunk's activations for one micro-batch
        g_u = FSDP2_STATE.grad * psi / v  # one chunk's unsharded fp32 gradients
        weights, grads, optim = zero_state_bytes(psi, n, np.where(ddp, zero, 3), FSDP2_STATE)
        grads = np.where(ddp | (~piped & (m > 1)), grads, 0.0)  # sharded gradients exist at the peak only then
        chunks = _chunks_started(p, v, m, i_rank)
        unsharded = np.where(piped, chunks * g_u, 0.0)
        acts = held * a_u - np.where(piped & ~steady, np.minimum(a_u, g_u), 0.0)
        is_last = np.asarray(last) | ~piped
        is_first = np.asarray(first) | ~piped
        acts = acts + np.where(is_last, head_inputs + loss, 0.0)
        acts = acts + np.where(piped & is_last, m * ACT * b * s * V, 0.0) + working
        unit = shape.layer_params / t
        root = (V * h + shape.seq * h) / t  # the head and the position table (module docstring)
        gathered = np.select(  # DDP: autocast's bf16 copy of every weight
            [~piped & (zero >= 3), ~piped, zero >= 3],
            [root, psi, 2 * unit + np.where(is_first | is_last, root, 0.0)],
            psi / v * np.minimum(v, UNSHARDED_CHUNKS))
        buffers = CONTEXT_BYTES + np.where(piped, (2 * v - is_first - is_last) * m * hop, 0.0)
        held_by = (weights + ACT * gathered, grads + unsharded, optim, acts, buffers)
        part = Memory(*held_by, total=sum(held_by))
        valid = (p > 2) | np.asarray(first | last)  # a middle rank exists from p = 3
        totals.append(np.where(valid, part.total, -np.inf))
        parts.append(part)
    busiest = np.argmax(np.stack(np.broadcast_arrays(*totals)), axis=0)
    return Memory._make(np.choose(busiest, [np.broadcast_to(pt[i], busiest.shape) for pt in parts])
                        for i in range(len(Memory._fields)))
