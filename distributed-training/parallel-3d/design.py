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
    selective       nothing more: the selective-checkpoint policy keeps every collective's output
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
  With PP, pipelining drives FSDP2 (engine.py): one reduce-scatter per unit per step, the root gathered
  once (never resharded until the step ends), a block once with zero 2 and m + 1 times with zero 3:
  every forward that follows a forward finds the block resharded and gathers it, every backward that
  follows a forward gathers it too, and because pipelining turns resharding after backward off, a
  forward that follows a backward finds it gathered (and reshards it after). 1F1B and interleaved 1F1B
  alternate forwards and backwards in exactly that way: (warm-up forwards w) + (the first backward) +
  (the m - w steady-state backwards) = m + 1.
"""

from __future__ import annotations

from collections import Counter

from settings import Layout, Variant
from stages import StageSpec


def predicted_counts(layout: Layout, variant: Variant, specs: list[StageSpec]) -> Counter:
    """{(dimension, kind): count} for one optimizer step on a rank holding `specs`."""
    m, out = layout.num_microbatches, Counter()
    full, zero3, piped = variant.recompute == "full", variant.zero == 3, layout.pp > 1
    # How often FSDP2 reduces per step (each reduction also all-reduces the TP-Partial norm gradients).
    reductions = 1 if piped or layout.dp == 1 else m
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
        if layout.dp > 1 and piped:
            out["dp", "all_gather"] += root + blocks * (m + 1 if zero3 else 1)
            out["dp", "reduce_scatter"] += root + blocks
        elif layout.dp > 1:
            out["dp", "all_gather"] += m * (root + blocks * (2 if zero3 else 1))
            out["dp", "reduce_scatter"] += m * (root + blocks)
    return +out  # drop zeros


def pp_payload_bytes(layout: Layout, seq_len: int, d_model: int, elem_bytes: int) -> int:
    """One pipeline transfer: a micro-batch's hidden states between stages, this rank's T/tp rows."""
    return layout.microbatch * seq_len // layout.tp * d_model * elem_bytes


def tp_block_payload_bytes(layout: Layout, seq_len: int, d_model: int, elem_bytes: int) -> int:
    """One TP collective inside a block: the full (b, T, d) activation (all-gather output, reduce-scatter input)."""
    return layout.microbatch * seq_len * d_model * elem_bytes
