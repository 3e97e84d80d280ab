"""Context parallelism three ways, priced: the ring, the all-gather and Ulysses (common/cp_attention.py), per layer and
micro-batch, for arrays of configurations; which one a plan runs, and why.

    t = cp_times("auto", shape, t, c, b, attn_fwd_s, full, domain, net)   # the cheapest design per configuration
    t.comm_s, t.exposed_s, t.kind                                          # seconds, seconds, index into CP_KINDS

Bytes are the designs' own formulas (common/cp_bytes.py: ring_bytes, allgather_bytes, ulysses_bytes, the ones their
tests count), each turned into nccl-tests' size S of the collective that carries it (S = bytes sent x n/(n-1)) and
priced by common/collective_cost.py, latency per call included. The CP group is t ranks apart (TP innermost,
Megatron's layout), so its members per NVLink domain are members_per_domain(c, t, domain). What hides:

    ring        N-1 send/recv hops each way, each posted before a block's attention: hidden behind the attention
                core as far as it lasts (forward behind attn_fwd, backward behind 2 attn_fwd: cp-anchors 2.1)
    allgather   one all-gather forward, launched before the local block (1/N of the attention) and hidden behind it
                alone; backward the same gather, then the reduce-scatter of fp32 dK/dV, exposed (nothing is left
                to compute once every block's gradients are summed)
    ulysses     two all-to-alls each way (q/k/v and the output; dO and dQ/dK/dV), all exposed: attention needs all
                of q, k, v, and the output projection all of the output. Only where heads/t and kv_heads/t divide
                by N (its K/V heads are not replicated: common/ulysses_attention.py)

Full recompute runs each design's forward communication again. The choice ("auto"): the design with the least
exposed CP time; among equals (all hidden, or N = 1), the fewest seconds on the wire. Not priced: the all-gather's
whole-sequence K/V held during a layer (2 b s kv_heads/t d e bytes, transient), and any link contention between CP
and TP or DP traffic.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from common.collective_cost import Network, collective_time_s, members_per_domain
from common.cp_bytes import CP_KINDS, allgather_bytes, ring_bytes, ulysses_bytes

AUTO = "auto"
GRAD_BYTES = 4.0  # the ring's dK/dV accumulators and the all-gather's reduce-scatter travel in fp32


class CPTimes(NamedTuple):
    """Per layer and micro-batch, arrays over configurations."""
    comm_s: np.ndarray  # CP communication, forward (twice with full recompute) and backward
    exposed_s: np.ndarray  # the part not hidden behind the attention core
    kind: np.ndarray  # the design priced: an index into CP_KINDS


def ulysses_fits(heads, kv_heads, t, c) -> np.ndarray:
    """Ulysses gives each of the c ranks 1/c of this TP rank's query heads and of its K/V heads."""
    h, kv = np.asarray(heads, float) / t, np.asarray(kv_heads, float) / t
    return (np.mod(h, c) == 0) & (np.mod(kv, c) == 0)


def _size(sent, c):
    """nccl-tests' S of a split collective from the bytes each rank sends: S x (n-1)/n = sent."""
    return sent * c / np.maximum(c - 1, 1)


def design_times(kind: str, shape, t, c, b, attn_fwd, full, domain: int, net: Network, act_bytes: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(communication, exposed) seconds per layer and micro-batch of design `kind` (module docstring)."""
    t, c, b = (np.asarray(x, float) for x in (t, c, b))
    on = c > 1
    kv, h = shape.kv_heads / t, shape.heads / t
    members = members_per_domain(c, t, domain)
    if kind == "ring":
        by = ring_bytes(b, shape.seq, kv, shape.head_dim, c, act_bytes, GRAD_BYTES)
        hops = np.maximum(c - 1, 1)
        pair = np.where(t * c <= domain, 2, 1)  # neighbours in one NVLink domain, or across the network
        fwd = (c - 1) * collective_time_s("send_recv", by.forward / hops, 2, pair, net) * on
        bwd = (c - 1) * collective_time_s("send_recv", by.backward / hops, 2, pair, net) * on
        exposed = np.maximum(0, fwd - attn_fwd) * (1 + full) + np.maximum(0, bwd - 2 * attn_fwd)
    elif kind == "allgather":
        by = allgather_bytes(b, shape.seq, kv, shape.head_dim, c, act_bytes, GRAD_BYTES)
        gather = collective_time_s("all_gather", _size(by.forward, c), c, members, net) * on
        scatter = collective_time_s("reduce_scatter", _size(by.backward - by.forward, c), c, members, net) * on
        local = attn_fwd / c  # the rank's own block, computed while the gather travels
        fwd, bwd = gather, gather + scatter
        exposed = np.maximum(0, gather - local) * (1 + full) + np.maximum(0, gather - 2 * local) + scatter
    elif kind == "ulysses":
        sent = ulysses_bytes(b, shape.seq, h, kv, shape.head_dim, c, act_bytes).forward
        share = (h + 2 * kv) / (2 * h + 2 * kv)  # q, k, v's part of a pass; the output (or dO) is the rest
        qkv = collective_time_s("all_to_all", _size(sent * share, c), c, members, net) * on
        out = collective_time_s("all_to_all", _size(sent * (1 - share), c), c, members, net) * on
        fwd = bwd = qkv + out
        exposed = fwd * (1 + full) + bwd
    else:
        raise ValueError(f"the CP design must be one of {', '.join(CP_KINDS)}, got {kind!r}")
    return fwd * (1 + full) + bwd, exposed


def cp_times(kind: str, shape, t, c, b, attn_fwd, full, domain: int, net: Network, act_bytes: float = 2.0
             ) -> CPTimes:
    """The CP term of every configuration for design `kind`, or for the cheapest one that runs there ("auto")."""
    t, c = np.broadcast_arrays(np.asarray(t, float), np.asarray(c, float))
    fits = {"ring": np.ones(t.shape, bool), "allgather": np.ones(t.shape, bool),
            "ulysses": ulysses_fits(shape.heads, shape.kv_heads, t, c) | (c == 1)}
    priced = {k: design_times(k, shape, t, c, b, attn_fwd, full, domain, net, act_bytes) for k in CP_KINDS}
    comm = np.stack([np.broadcast_to(priced[k][0], t.shape) for k in CP_KINDS])
    exposed = np.stack([np.where(fits[k], np.broadcast_to(priced[k][1], t.shape), np.inf) for k in CP_KINDS])
    if kind == AUTO:
        least = exposed <= exposed.min(axis=0) + 1e-12
        pick = np.argmin(np.where(least, comm, np.inf), axis=0)
    else:
        pick = np.full(t.shape, CP_KINDS.index(kind))
    return CPTimes(np.take_along_axis(comm, pick[None], 0)[0], np.take_along_axis(exposed, pick[None], 0)[0], pick)


def why(plan, by_kind: dict[str, dict | None], pinned: bool = False) -> str:
    """One line: the design the plan (search.records.Plan) runs and what each other one would cost (by_kind: the plan
    priced with each design pinned, None where it cannot run), or nothing to choose at CP = 1."""
    if plan.cp <= 1:
        return "no context parallelism: nothing to choose"
    chosen = by_kind[plan.cp_kind]
    cost = f"{(chosen['cp_comm_s'] - chosen['cp_hidden_s']):.3g} s of its {chosen['cp_comm_s']:.3g} s exposed per step"
    others = []
    for k, p in by_kind.items():
        if k == plan.cp_kind:
            continue
        if p is None:
            others.append(f"{k} cannot split this TP rank's heads over CP {plan.cp}")
        else:
            others.append(f"{k} {p['step_s'] / chosen['step_s'] - 1:+.1%} step ({p['cp_comm_s'] - p['cp_hidden_s']:.3g} "
                          f"s exposed)")
    how = "pinned by --cp-kind, " if pinned else ""
    return f"CP {plan.cp} runs {plan.cp_kind} ({how}{cost}); " + "; ".join(others)
