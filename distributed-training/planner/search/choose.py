"""Deciding among near-equals: when plans lie within the model's own error, practitioners' rules choose.

The cost model ranks plans by projected throughput, but its error against held-out published runs
is several percent (median 5-10%, PLANNER_VALIDATION.md section 4), and much of that error is not
shared between two plans (it sits in what they do differently: TP collectives against a pipeline
bubble, say). So a plan a few percent faster than another is not known to be faster. Every plan
within NEAR_TIE of the fastest is a near-tie, and among the near-ties the rules practitioners
follow choose, in this order (the first rule that separates two plans decides; plans no rule
separates go by throughput):

1. Memory headroom: a plan within MEMORY_MARGIN of the usable memory may not fit in practice, so one
   with room wins. The memory model counts what is allocated; what a run reserves is more (allocator
   caching and fragmentation, library workspaces): torchtitan's Llama 3 8B runs reserved 1.06-1.18x
   the planner's projection for them (PLANNER_VALIDATION.md section 4), so a plan above 1/1.18 of the
   usable memory is at risk.
2. TP inside the NVLink domain (Megatron SC21 Takeaway #1; torchtitan §3.3: "TP ... typically
   limited to intra-node scaling"): a TP group that spans domains loses to one that does not.
3. TP fills the NVLink domain before PP starts (SC21 Takeaway #1: "tensor model parallelism should
   generally be used up to degree g when using g-GPU servers, and then pipeline model parallelism"),
   as far as the heads allow.
4. No context parallelism below CP_MIN_SEQ tokens per sequence (torchtitan and Llama 3 use CP only
   for long-context training, 32K-128K tokens).
5. Equal pipeline stages: the layer count divisible by the stage count (what Megatron requires and
   most runs use; uneven splits are for when nothing even fits or runs well).
6. The fewest pipeline stages (SC21 Takeaway #2: a total model-parallel size just large enough that
   the model fits; every stage adds a bubble, activations in flight and point-to-point hops).
7. ZeRO-1 rather than ZeRO-2/3 beside PP (Scaling Book: "poor fit with ZeRO-3 (use ZeRO-1)"; the
   planner charges ZeRO-2/3's collectives for every micro-batch, the rule reflects their fragility).
8. The least activation recompute (none, then selective, then full): recompute is compute spent
   twice, taken only for memory.

`decide` returns the plans with the chosen one first, and the near-ties (one per layout of degrees, ZeRO
stage and recompute; micro-batch and interleaving variants are not separate plans) with the reason each
lost.
"""

from __future__ import annotations

from dataclasses import replace

from planner.model.memory import usable_bytes

from .records import NearTie, Plan

NEAR_TIE = 0.10  # plans within 10% of the fastest throughput are near-ties: the held-out median error, rounded up
MEMORY_MARGIN = 0.15  # plans above 1 - 0.15 = 1/1.18 of the usable memory are at risk (the largest reserved/projected)
CP_MIN_SEQ = 32768
RECOMPUTE_RANK = {"none": 0, "selective": 1, "op": 1, "full": 2}


def domain_tp(heads: int, kv_heads: int, domain: int) -> int:
    """The largest TP degree inside one NVLink domain that the heads allow."""
    return max(t for t in range(1, domain + 1) if domain % t == 0 and heads % t == 0 and kv_heads % t == 0)


def _rules(plan: Plan, w, usable_gb: float, domain: int) -> list[tuple[int, str]]:
    """(penalty, why) per rule, in priority order; lower penalties win."""
    sh = w.shape
    full_tp = domain_tp(sh.heads, sh.kv_heads, domain)
    return [
        (int(plan.memory_gb.total > (1 - MEMORY_MARGIN) * usable_gb),
         f"{plan.memory_gb.total:.1f} GB is within {MEMORY_MARGIN:.0%} of the {usable_gb:.1f} GB usable"),
        (int(plan.tp > domain), f"TP {plan.tp} spans NVLink domains of {domain}"),
        (int(plan.pp > 1 and plan.tp < full_tp), f"PP {plan.pp} before TP fills the domain (TP {plan.tp})"),
        (int(plan.cp > 1 and sh.seq < CP_MIN_SEQ), f"CP {plan.cp} at {sh.seq:,} tokens per sequence"),
        (int(sh.layers % plan.pp != 0), f"unequal stages ({plan.layers_per_stage} layers)"),
        (plan.pp, f"{plan.pp} pipeline stages"),
        (int(plan.pp > 1 and plan.zero >= 2), f"ZeRO-{plan.zero} beside PP"),
        (RECOMPUTE_RANK[plan.recompute], f"{plan.recompute} recompute"),
    ]


def _layout(plan: Plan) -> tuple:
    return plan.tp, plan.pp, plan.cp, plan.zero, plan.recompute


def decide(ranked: list[Plan], w, cl, top: int) -> tuple[list[Plan], list[NearTie]]:
    """Pick among the near-ties of `ranked` (fastest first); return (candidates, near_ties with reasons), every
    candidate with its throughput against the fastest (vs_fastest)."""
    if not ranked:
        return [], []
    fastest = ranked[0].tokens_per_s
    ranked = [replace(c, vs_fastest=round(c.tokens_per_s / fastest - 1, 4)) for c in ranked]
    near = [c for c in ranked if c.tokens_per_s >= fastest * (1 - NEAR_TIE)]
    usable, domain = usable_bytes(cl.memory_gb, w.memory_headroom) / 1e9, cl.domain

    def key(c: Plan) -> tuple:
        return tuple(p for p, _ in _rules(c, w, usable, domain)) + (-c.tokens_per_s,)

    chosen = min(near, key=key)
    mine = _rules(chosen, w, usable, domain)
    ties, seen = [], {_layout(chosen)}
    for c in near:  # one runner-up per layout: micro-batch and interleaving variants are the same plan
        if _layout(c) in seen:
            continue
        seen.add(_layout(c))
        why = f"{c.tokens_per_s / chosen.tokens_per_s - 1:+.1%} throughput vs the choice"
        for k, ((theirs, reason), (own, _)) in enumerate(zip(_rules(c, w, usable, domain), mine), 1):
            if theirs != own:
                why = f"rule {k}: {reason}; " + why
                break
        ties.append(NearTie(c.tp, c.pp, c.dp, c.cp, c.zero, c.microbatch, c.interleave, c.recompute,
                            c.tokens_per_s_per_gpu, c.step_s, c.vs_fastest, why))
    others = [c for c in ranked if c is not chosen]
    return [chosen] + others[:top - 1], ties
