"""From the planner's number to PyTorch's, term by term: the differences the at-scale study names.

For one rank of a configuration, each quantity (the state bytes; the bus bytes per step of TP, PP and DP)
starts at the planner's value (planner_bridge.predict), and each Term moves it by a named amount to what
PyTorch's design issues (design.py). The study then holds that against the measurement: the residual is
what no term explains. Bytes are per rank per step; collectives in bus bytes (comms.py).

State (between backward and the optimizer step; fp32 gradients): the planner prices FSDP2's own accounting
  (4 B fp32 sharded parameter, which is the master, + 4 B fp32 gradient + 8 B AdamW moments per parameter over
  the dp x cp shard group, planner/model/torch_memory.py) on its busiest stage; the one difference is this rank's
  stages (edge stages, uneven splits, TP-replicated norms, FSDP2's padding).
TP: the planner counts the blocks' collectives (8 b·s·h (t-1)/t per layer and micro-batch, 4 more with
  full recompute) on its busiest stage's layers. PyTorch also has the embeddings', the LM head's (its logits all-gathered:
  V-wide) and the LayerNorm gradients' all-reduces; non-reentrant checkpointing repeats 3, not 4, of a
  block's collectives (it stops before the last reduce-scatter, whose output nobody saved).
PP: the planner prices 2 transfers per micro-batch per virtual stage; a stage at either end of the
  pipeline sends one way only.
DP: the planner prices FSDP2's schedule (stacks.fsdp2_schedule) on its stage size: without a pipeline every
  micro-batch gathers each unit (a ZeRO-3 unit twice) and reduce-scatters it; under a pipeline one reduce-scatter
  per step and the gathers of its schedule (1F1B ZeRO-2 once, ZeRO-3 m + 1 times, interleaved ZeRO-2 twice per
  round). PyTorch's: FSDP2's per-unit gathers and reductions (design.py), on this rank's units, padded; the root
  unit of a pipeline-less ZeRO-3 run is gathered once per micro-batch, and an interleaved runtime's explicit
  unshards follow its action list.
"""

from __future__ import annotations

from typing import NamedTuple

import planner_bridge as pb
from common.model import GPTConfig
from design import tp_local_shapes, fsdp_numel
from settings import Layout
from pipeline_stages import StageSpec


class Term(NamedTuple):
    quantity: str  # state, tp, pp, dp
    name: str
    bytes: float


def unit_numels(g: GPTConfig, tp: int, dp: int, specs: list[StageSpec]) -> tuple[int, int]:
    """(blocks, roots): elements of this rank's FSDP units as gathered (TP-local, padded), summed."""
    block, first, last = tp_local_shapes(g, tp)
    blocks = sum(len(s.layers) for s in specs) * fsdp_numel(block, dp)
    roots = sum(fsdp_numel((first if s.is_first else []) + (last if s.is_last else []), dp) for s in specs)
    return blocks, roots


def rank_state_numel(g: GPTConfig, layout: Layout, specs: list[StageSpec]) -> int:
    """Parameters this rank stores: its stages' units, TP-local, padded by FSDP2, divided over dp (x cp)."""
    return sum(unit_numels(g, layout.tp, layout.shard_group, specs)) // layout.shard_group


def state_terms(g: GPTConfig, d: pb.Degrees, specs: list[StageSpec], pred: pb.Prediction) -> list[Term]:
    """Planner state (FSDP2's 16 B per parameter of its busiest stage) -> this rank's, term by term."""
    stored = rank_state_numel(g, Layout(d.tp, d.pp, d.dp, d.microbatch, d.num_microbatches, d.cp), specs)
    terms = [Term("state", "this rank's stages (uneven or edge stages, TP-replicated norms, FSDP2 padding)",
                  16 * stored - pred.state_bytes)]
    return [t for t in terms if t.bytes]


def _ring(n: int) -> float:
    return (n - 1) / n if n > 1 else 0.0


def tp_terms(g: GPTConfig, d: pb.Degrees, specs: list[StageSpec], pred: pb.Prediction, reductions: int,
             norm_bytes: int, e: int = 2) -> list[Term]:
    t, m, b = d.tp, d.num_microbatches, d.microbatch
    if t == 1:
        return []
    act = b * g.seq_len * g.d_model * e
    layers = sum(len(s.layers) for s in specs)
    per_layer = pred.bus_bytes["tp"] / pred.stage_layers
    terms = [Term("tp", "this rank's layers (the planner prices its busiest stage's)",
                  per_layer * (layers - pred.stage_layers))]
    if d.recompute == "full":
        terms.append(Term("tp", "full recompute stops before the last reduce-scatter (3 collectives, not 4)",
                          -layers * m * act * _ring(t)))
    if any(s.is_first for s in specs):
        pos = g.seq_len * g.d_model * e
        terms.append(Term("tp", "embeddings: 2 reduce-scatters forward, 2 all-gathers backward",
                          2 * m * (act + pos) * _ring(t)))
    if any(s.is_last for s in specs):
        logits = b * g.seq_len * g.vocab_size * e
        terms.append(Term("tp", "LM head: input and logits all-gathered, input gradient reduce-scattered",
                          m * (2 * act + logits) * _ring(t)))
    norms = sum(2 * len(s.layers) + s.is_last for s in specs)
    terms.append(Term("tp", "LayerNorm gradients all-reduced (Partial over TP)",
                      reductions * norms * g.d_model * norm_bytes * 2 * _ring(t)))
    return [x for x in terms if x.bytes]


def pp_terms(g: GPTConfig, d: pb.Degrees, specs: list[StageSpec], e: int = 2) -> list[Term]:
    if d.pp == 1:
        return []
    hop = d.microbatch * g.seq_len // d.tp * g.d_model * e
    edges = sum(s.is_first + s.is_last for s in specs)
    return [Term("pp", "edge stages send one way only", -d.num_microbatches * hop * edges)] if edges else []


def _planned_dp(d: pb.Degrees, numel: float, grad_bytes: int = pb.GRAD_BYTES) -> float:
    """The planner's FSDP2 schedule (stacks.fsdp2_schedule) on `numel` parameters: bf16 gathers, reduce-scatters at
    grad_bytes, bus bytes over the dp x cp shard group."""
    n = d.dp * d.cp
    ag, rs = 2 * numel * _ring(n), grad_bytes * numel * _ring(n)
    m = d.num_microbatches
    if d.pp == 1:
        return m * ((2 if d.zero == 3 else 1) * ag + rs)
    rounds = max(1, m // d.pp)
    gathers = m + 1 if d.zero == 3 else (2 * rounds if d.interleave > 1 else 1)
    return gathers * ag + rs


def dp_terms(g: GPTConfig, d: pb.Degrees, specs: list[StageSpec], planner_bus: float, design_bus: float,
             gathers: int, reduces: int) -> list[Term]:
    """Planner's FSDP2 schedule -> PyTorch's: this rank's units, then each schedule difference that applies; the
    rest (under a pipeline: which gathers the schedule's order needs) is one term, described by its counts."""
    n = d.dp * d.cp
    if n == 1:
        return []
    m, ring = d.num_microbatches, _ring(n)
    blocks, roots = unit_numels(g, d.tp, n, specs)
    sized = _planned_dp(d, blocks + roots)
    terms = [Term("dp", "this rank's units (stage sizes, TP-replicated norms, FSDP2 padding)", sized - planner_bus)]
    if d.pp == 1 and d.zero == 3:
        terms.append(Term("dp", "the root unit (embeddings, LM head) gathered once per micro-batch, not twice "
                                "(never resharded after forward)", -m * 2 * roots * ring))
    elif d.pp > 1:
        rest = design_bus - sum(t.bytes for t in terms) - planner_bus
        rounds = max(1, m // d.pp)
        planned = m + 1 if d.zero == 3 else (2 * rounds if d.interleave > 1 else 1)
        terms.append(Term("dp", f"the schedule's gathers: {gathers} all-gathers of this rank's {len(specs)} stage(s) "
                                f"per step, where the planner has {planned} per stage", rest))
    return [t for t in terms if t.bytes]
