"""The collectives one optimizer step should issue on one rank, derived from the design (not measured).

The tests and the runner hold the dispatcher's count (comms.py) against this, per mesh dimension and
kind. With m micro-batches per step, for each stage this rank holds (L_s blocks; first/last flags):

TP (t > 1), per micro-batch, DTensor with sequence parallelism (parallelize.py):
    each block      forward 2 all-gathers (the sequence, before attention and before the MLP)
                    + 2 reduce-scatters (after wo and w2); backward the mirror image, 2 + 2
    embeddings      forward 2 reduce-scatters (token and position tables, vocab-parallel, output Shard(1));
                    backward 2 all-gathers
    LM head         forward 2 all-gathers (its input's sequence; the logits' vocabulary columns);
                    backward 1 reduce-scatter (the input gradient; the logits' gradient is only sliced)
    full recompute  + 2 all-gathers + 1 reduce-scatter per block in backward: the block's forward runs
                    again, but non-reentrant checkpointing stops as soon as the last tensor backward needs
                    is rebuilt, so the final reduce-scatter (w2's output, saved by nobody) is not repeated
    op              nothing more: the per-op selective-checkpoint policy keeps every collective's output
  and once per step one all-reduce per LayerNorm weight (2 per block, + the final norm): their
  gradients are Partial over TP (parallelize.py).
PP (p > 1): every stage sends its output forward unless it is last and its input gradient backward
  unless it is first, once per micro-batch, and receives the mirror images: m sends each way.
DP (d > 1), FSDP2 units: each block, and the stage's root where it has parameters (the first stage's
  embeddings, the last stage's norm and head).
  Without PP (engine.py: plain gradient accumulation, FSDP2's defaults) every micro-batch gathers each
  unit before its forward, a zero-3 block once more before its backward, and reduce-scatters every
  unit after it: per step m(root + (1 or 2) x blocks) all-gathers and m(root + blocks) reduce-scatters,
  and the TP all-reduces of the LayerNorm gradients happen at each of those reductions (m per weight).
  With PP, pipelining drives FSDP2 (engine.py): one reduce-scatter per unit per step; the all-gathers
  follow from the stage's sequence of actions (fsdp_gathers): a unit is gathered whenever an action
  needs it resharded: a forward or backward, or the interleaved runtime's explicit UNSHARD (it keeps at
  most 3 stages of a rank gathered at once and reshards the others, _add_unshard_reshard). After a
  forward a zero-3 block reshards itself; after a backward nothing reshards (pipelining turns it off);
  the root never reshards after forward. Under 1F1B (warm-up forwards w, then backward/forward pairs,
  then the last backwards) a zero-3 block is gathered w + 1 + (m - w) = m + 1 times, a zero-2 block and
  the root once.
DP = 1 with bf16: the stages are fully_shard-ed on a 1-rank group (parallelize.fsdp_policy), and FSDP2
  issues no collective there: it copies its shards instead of gathering them and its gradients instead of
  reduce-scattering them (pytorch/pytorch#160135 and #162021, 2025; torch 2.13 here). Nothing is predicted
  on dp, and comms.py logs 1-rank calls like any other, so a torch that still issued them would show as a
  mismatch. What FSDP2 does keep at dp = 1 is its reduction schedule, which sets how often the TP-Partial
  LayerNorm gradients are all-reduced (_reductions: every micro-batch without PP).
CP (c > 1; context_parallel.py): every activation above holds this rank's s/c tokens (TP's buffers, the
  pipeline's hops, the logits). Per micro-batch each block's ring attention sends c-1 K/V blocks forward and,
  backward, c-1 K/V blocks plus c-1 fp32 dK/dV accumulators, receiving as many (common/ring_attention.py);
  full recompute runs the forward ring once more. The all-gather design (--cp-kind allgather) gathers K/V forward
  and backward and reduce-scatters fp32 dK/dV; Ulysses (--cp-kind ulysses) runs two all-to-alls each way
  (cp_calls, cp_payloads). A K/V block is 2·b·(s/c)·(n_kv/t)·d_head elements. FSDP2
  shards over the dp x cp ranks (parallelize.shard_mesh): its collectives are counted under "dp", on a group
  of d·c ranks, as the planner's DP×CP group; everything said of d > 1 above holds for d·c > 1.
"""

from __future__ import annotations

import math
from collections import Counter

from common.model import GPTConfig
from common.cp_bytes import kv_block, ring_bytes
from settings import Layout, Variant
from pipeline_stages import StageSpec


def one_f_one_b(stage_index: int, n_stages: int, m: int) -> str:
    """A stage's actions under Schedule1F1B: min(m, n_stages - stage_index) warm-up forwards, then a backward
    and a forward in turn, then the remaining backwards (torch.distributed.pipelining.Schedule1F1B)."""
    w = min(m, n_stages - stage_index)
    return "F" * w + "BF" * (m - w) + "B" * w


def gpipe(m: int) -> str:
    """A stage's actions under ScheduleGPipe (engine.py, for fewer micro-batches than stages): every forward, then
    every backward."""
    return "F" * m + "B" * m


def schedule_orders(schedule, specs: list[StageSpec], pp_rank: int, m: int) -> dict[int, str]:
    """Each stage's actions on this rank, as a string of F (forward), B (backward), U (unshard), R (reshard).
    A single-stage schedule has no explicit actions: its order is 1F1B's, or GPipe's. The interleaved runtime
    lowers its plan into explicit actions (pipeline_order_with_comms, the schedule's own IR), read here."""
    from torch.distributed.pipelining import ScheduleGPipe

    plan = getattr(schedule, "pipeline_order_with_comms", None)
    if isinstance(schedule, ScheduleGPipe):
        return {s.index: gpipe(m) for s in specs}
    if not plan:
        return {s.index: one_f_one_b(s.index, s.n_stages, m) for s in specs}
    code = {"FORWARD": "F", "FULL_BACKWARD": "B", "UNSHARD": "U", "RESHARD": "R"}
    orders = {s.index: "" for s in specs}
    for a in plan[pp_rank]:
        kind = getattr(a.computation_type, "name", str(a.computation_type))
        if a.stage_index in orders and kind in code:
            orders[a.stage_index] += code[kind]
    return orders


def fsdp_gathers(order: str, reshards_after_forward: bool) -> int:
    """All-gathers of one FSDP unit over its stage's actions (see the module docstring)."""
    gathered, n = False, 0
    for a in order:
        if a in "UFB" and not gathered:
            n, gathered = n + 1, True
        if (a == "F" and reshards_after_forward) or a == "R":
            gathered = False
    return n


def _reductions(layout: Layout, fsdp: bool) -> int:
    """How often per step the gradients are reduced, and with them the TP-Partial LayerNorm gradients all-reduced:
    FSDP2 without PP, every micro-batch; with PP (pipelining's no-sync), or without FSDP (engine.py), once."""
    return layout.num_microbatches if fsdp and layout.pp == 1 else 1


def predicted_counts(layout: Layout, variant: Variant, specs: list[StageSpec], fsdp: bool | None = None,
                     orders: dict[int, str] | None = None) -> Counter:
    """{(dimension, kind): count} for one optimizer step on a rank holding `specs`. fsdp: whether the stages are
    fully_shard-ed (default dp > 1; engine.Engine.fsdp says, as bf16 shards at dp = 1 too, where FSDP2 issues no
    collective). orders: each stage's actions (schedule_orders; default 1F1B's)."""
    m, out = layout.num_microbatches, Counter()
    full, zero3, piped = variant.recompute == "full", variant.zero == 3, layout.pp > 1
    sharded = layout.shard_group > 1
    reductions = _reductions(layout, sharded if fsdp is None else fsdp)
    for s in specs:
        blocks = len(s.layers)
        root = s.is_first or s.is_last
        if layout.tp > 1:
            ag = blocks * (4 + 2 * full) + 2 * s.is_first + 2 * s.is_last
            rs = blocks * (4 + 1 * full) + 2 * s.is_first + 1 * s.is_last
            out["tp", "all_gather"] += m * ag
            out["tp", "reduce_scatter"] += m * rs
            out["tp", "all_reduce"] += reductions * (2 * blocks + s.is_last)
        if piped:
            transfers = m * ((not s.is_last) + (not s.is_first))
            out["pp", "send"] += transfers
            out["pp", "recv"] += transfers
        if layout.cp > 1:
            out += cp_calls(layout.cp_kind, layout.cp, m * blocks, full)
        if sharded and piped:
            order = (orders or {}).get(s.index) or one_f_one_b(s.index, s.n_stages, m)
            out["dp", "all_gather"] += root * fsdp_gathers(order, False) + blocks * fsdp_gathers(order, zero3)
            out["dp", "reduce_scatter"] += root + blocks
        elif sharded:
            out["dp", "all_gather"] += m * (root + blocks * (2 if zero3 else 1))
            out["dp", "reduce_scatter"] += m * (root + blocks)
    return +out  # drop zeros


Shapes = list[tuple[int, ...]]


def tp_local_shapes(g: GPTConfig, t: int) -> tuple[Shapes, Shapes, Shapes]:
    """Each parameter's shape on one TP rank (parallelize.py's plan): (block, first-stage root, last-stage root)."""
    d, hd = g.d_model, g.head_dim
    q, kv, f = g.n_heads * hd // t, g.kv_heads * hd // t, g.ffn // t
    block = [(d,), (q, d), (kv, d), (kv, d), (d, q), (d,), (f, d), (d, f)]  # norm1, wq, wk, wv, wo, norm2, w1, w2
    first = [(g.vocab_size // t, d), (g.seq_len // t, d)]  # row-parallel embedding tables
    last = [(d,), (g.vocab_size // t, d)]  # final norm (replicated), column-parallel LM head
    return block, first, last


def fsdp_numel(shapes: list[tuple[int, ...]], dp: int) -> int:
    """Elements of a unit as FSDP2 gathers it: dim 0 of every parameter padded to a multiple of dp."""
    return sum(math.ceil(s[0] / dp) * dp * math.prod(s[1:]) for s in shapes)


def cp_calls(kind: str, c: int, blocks: int, full: bool) -> Counter:
    """{("cp", kind): count} of `blocks` block-passes (blocks x micro-batches) of design `kind` over c ranks: the
    ring's c-1 hops forward, twice that backward (K/V and dK/dV), the forward again under full recompute; the
    all-gather's gather forward (again under recompute) and backward, and one reduce-scatter; Ulysses' two
    all-to-alls each way (common/cp_attention.py)."""
    if kind == "ring":
        hops = blocks * (c - 1) * (3 + full)  # forward, K/V again + dK/dV backward, [forward again]
        return Counter({("cp", "send"): hops, ("cp", "recv"): hops})
    if kind == "allgather":
        return Counter({("cp", "all_gather"): blocks * (2 + full), ("cp", "reduce_scatter"): blocks})
    return Counter({("cp", "all_to_all"): blocks * 2 * (2 + full)})


def cp_payloads(kind: str, g: GPTConfig, t: int, c: int, b: int, blocks: int, full: bool, act_bytes: int) -> Counter:
    """{("cp", kind): payload bytes} of cp_calls' collectives (comms.py's convention: the full buffer), from the bytes
    each design sends (common/cp_bytes.py) where that is what travels: the ring's sends; the all-gather's gathered
    K/V and its fp32 reduce-scatter input; Ulysses' all-to-all buffers (q/k/v and the output, each way)."""
    kv_heads, heads = g.kv_heads // t, g.n_heads // t
    if kind == "ring":
        kv = ring_bytes(b, g.seq_len, kv_heads, g.head_dim, c, act_bytes)  # per block, per micro-batch
        sent = blocks * (kv.total + full * kv.forward)
        return Counter({("cp", "send"): sent, ("cp", "recv"): sent})
    block = kv_block(b, g.seq_len, kv_heads, g.head_dim, c)
    if kind == "allgather":
        return Counter({("cp", "all_gather"): blocks * (2 + full) * c * block * act_bytes,
                        ("cp", "reduce_scatter"): blocks * c * block * 4})
    per_head = b * (g.seq_len // c) * g.head_dim * act_bytes  # one head of this rank's tokens
    return Counter({("cp", "all_to_all"): blocks * (2 + full) * (2 * heads + 2 * kv_heads) * per_head})


def predicted_payloads(g: GPTConfig, layout: Layout, variant: Variant, specs: list[StageSpec], act_bytes: int,
                       param_bytes: int, grad_bytes: int, fsdp: bool | None = None,
                       orders: dict[int, str] | None = None) -> Counter:
    """{(dimension, kind): payload bytes} for one step on this rank: predicted_counts' collectives, each with
    its full buffer (comms.py's convention). act_bytes: activations (bf16 = 2); param_bytes: the gathered
    parameters' dtype; grad_bytes: FSDP2's reduce dtype (fp32 = 4)."""
    m, t, dp, b, c = layout.num_microbatches, layout.tp, layout.shard_group, layout.microbatch, layout.cp
    full, zero3, piped = variant.recompute == "full", variant.zero == 3, layout.pp > 1
    fsdp = dp > 1 if fsdp is None else fsdp
    reductions = _reductions(layout, fsdp)
    tokens = g.seq_len // c  # this rank's tokens of a sequence
    act = b * tokens * g.d_model * act_bytes  # (b, T/c, d): every TP collective inside a block
    block, first, last = tp_local_shapes(g, t)
    out = Counter()
    for s in specs:
        n = len(s.layers)
        if t > 1:
            out["tp", "all_gather"] += m * act * (n * (4 + 2 * full) + s.is_last)
            out["tp", "reduce_scatter"] += m * act * (n * (4 + full) + s.is_first + s.is_last)
            if s.is_first:  # the position table's output is (1, T/c, d): one sequence, whatever the micro-batch
                pos = tokens * g.d_model * act_bytes
                out["tp", "reduce_scatter"] += m * pos
                out["tp", "all_gather"] += m * (act + pos)
            if s.is_last:  # the logits' vocabulary columns
                out["tp", "all_gather"] += m * b * tokens * g.vocab_size * act_bytes
            # LayerNorm weight gradients: as computed (the gathered parameters' dtype) when each micro-batch is
            # reduced at once; in the reduce dtype when pipelining has accumulated them unsharded (FSDP2 keeps
            # that accumulation in its reduce dtype)
            norm_bytes = grad_bytes if piped and fsdp else param_bytes
            out["tp", "all_reduce"] += reductions * (2 * n + s.is_last) * g.d_model * norm_bytes
        if c > 1:
            out += cp_payloads(layout.cp_kind, g, t, c, b, m * n, full, act_bytes)
        if piped:
            hop = b * tokens // t * g.d_model * act_bytes
            out["pp", "send"] += m * hop * ((not s.is_last) + (not s.is_first))
            out["pp", "recv"] += m * hop * ((not s.is_last) + (not s.is_first))
        if dp > 1:
            root = (first if s.is_first else []) + (last if s.is_last else [])
            blk, rt = n * fsdp_numel(block, dp), fsdp_numel(root, dp)
            if piped:
                order = (orders or {}).get(s.index) or one_f_one_b(s.index, s.n_stages, m)
                gathers = rt * fsdp_gathers(order, False) + blk * fsdp_gathers(order, zero3)
                reduces = rt + blk
            else:
                gathers = m * (rt + blk * (2 if zero3 else 1))
                reduces = m * (rt + blk)
            out["dp", "all_gather"] += gathers * param_bytes
            out["dp", "reduce_scatter"] += reduces * grad_bytes
    return +out
