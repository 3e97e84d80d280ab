"""The input checks of the three context-parallel attentions (ring, all-gather, Ulysses), inside the functions: one
clear error (ValueError, one line: what is wrong, what is allowed) on every rank, never garbage and never a crash
inside the collective library.

    layout = check_cp_inputs("ring_attention", q, k, v, group, layout, kernel)   # before any collective

What a CP attention trusts otherwise, and what went wrong without these checks: a fused CPU kernel given 6 query
heads over 4 K/V heads reads out of bounds (values like 7e31); a sequence that does not split into 2N chunks loses
its last tokens; q and k of different lengths run as if they were one sequence; ranks that disagree on a shape
crash inside gloo (or hang in NCCL) mid-ring.

Local checks (this rank's tensors): q, k, v are 4-D (batch, heads, tokens, head_dim), k and v the same shape, batch
and head size as q's, the same tokens as q (CP is self-attention over one sequence), the query heads a multiple of
the K/V heads, one floating dtype and device; the layout (common/cp_layout.py) splits, and the local tokens are its
s/N; Ulysses adds heads divisible by N (ulysses_attention.py).

Across ranks: every rank's shapes, dtype, layout, kernel and design, in one all-reduce of a few integers (MAX of
the values and of their negatives: the lowest and the highest every rank holds), *before* any data moves. A rank
whose local check failed joins the same all-reduce with a flag, so its peers raise too instead of waiting in a
collective it will never enter. The all-reduce is a collective of its own (counted by cp-attention's byte counter
as all_reduce:1, no payload bytes in the formulas); a caller that builds every rank's shapes from one config
(parallel-3d) may skip it with check_ranks=False, and its local checks still run.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .attention_block import KERNELS
from .cp_bytes import CP_KINDS
from .cp_layout import CPLayout

DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def local_problem(what: str, q, k, v, cp: int, layout: CPLayout | None, kernel: str, kind: str) -> str | None:
    """What is wrong with this rank's inputs, in one sentence (None: nothing)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            return f"{what}: {name} must be a 4-D tensor (batch, heads, tokens, head_dim), got {shape}"
    if k.shape != v.shape:
        return f"{what}: k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}"
    (b, h, s, d), (bk, hkv, sk, dk) = q.shape, k.shape
    if (b, d) != (bk, dk):
        return f"{what}: q and k/v must agree in batch and head size, got {tuple(q.shape)} and {tuple(k.shape)}"
    if s != sk:
        return (f"{what}: q holds {s} tokens and k/v {sk}; CP attention is self-attention over one sequence split "
                "the same way, so q, k and v hold the same tokens")
    if heads_problem(h, hkv, 1, kind):
        return f"{what}: {heads_problem(h, hkv, 1, kind)}"
    if q.dtype != k.dtype or q.dtype != v.dtype or q.dtype not in DTYPES:
        return (f"{what}: q, k, v must share one floating dtype ({', '.join(str(t).split('.')[1] for t in DTYPES)}), "
                f"got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        return f"{what}: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}"
    if kernel not in KERNELS:
        return f"{what}: kernel must be one of {', '.join(KERNELS)}, got {kernel!r}"
    if kind not in CP_KINDS:
        return f"{what}: the CP design must be one of {', '.join(CP_KINDS)}, got {kind!r}"
    if s < 1:
        return f"{what}: each rank must hold at least one token, got {s}"
    try:
        lay = layout if layout is not None else CPLayout.causal(s * cp, cp)
        lay.check()
    except ValueError as e:
        return f"{what}: {e}"
    if lay.cp != cp:
        return f"{what}: the layout is for CP = {lay.cp} but the group has {cp} ranks"
    if s != lay.local_len:
        return f"{what}: each rank holds s/N = {lay.local_len} tokens of the layout's {lay.seq_len}, got {s}"
    if heads_problem(h, hkv, cp, kind):
        return f"{what}: {heads_problem(h, hkv, cp, kind)}"
    return None


def heads_problem(n_heads: int, n_kv_heads: int, cp: int, kind: str) -> str | None:
    """The heads' rule: query heads group over the K/V heads; Ulysses also splits both over the N ranks."""
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        return f"n_heads ({n_heads}) must be a positive multiple of n_kv_heads ({n_kv_heads})"
    if kind == "ulysses" and (n_heads % cp or n_kv_heads % cp):
        return (f"Ulysses gives each of the {cp} ranks 1/{cp} of the heads, so n_heads ({n_heads}) and n_kv_heads "
                f"({n_kv_heads}) must both divide by {cp} (grouped K/V heads are not replicated); use the ring or "
                "all-gather")
    return None


def _signature(q, k, layout: CPLayout | None, kernel: str, kind: str, cp: int) -> list[int]:
    b, h, s, d = q.shape
    lay = layout if layout is not None else CPLayout(s * cp, cp, (s * cp,))
    return [b, h, k.shape[1], s, d, DTYPES.index(q.dtype), lay.signature(), KERNELS.index(kernel), CP_KINDS.index(kind)]


FIELDS = ("batch", "n_heads", "n_kv_heads", "local tokens", "head_dim", "dtype", "layout", "kernel", "design")


def check_cp_inputs(what: str, q, k, v, group: dist.ProcessGroup | None, layout: CPLayout | None, kernel: str,
                    kind: str, check_ranks: bool = True) -> CPLayout:
    """The layout (default: one causal sequence of N x the local tokens) once every check passed on every rank;
    ValueError, one line, on every rank otherwise (module docstring)."""
    group = group if group is not None else dist.group.WORLD
    cp, rank = dist.get_world_size(group), dist.get_rank(group)
    problem = local_problem(what, q, k, v, cp, layout, kernel, kind)
    if check_ranks and cp > 1:
        device = q.device if isinstance(q, torch.Tensor) else torch.device("cpu")
        mine = [0] * len(FIELDS) if problem else _signature(q, k, layout, kernel, kind, cp)
        flag = cp - rank if problem else 0  # the lowest failing rank wins the MAX
        both = torch.tensor([flag, *mine, *(-x for x in mine)], dtype=torch.int64, device=device)
        dist.all_reduce(both, op=dist.ReduceOp.MAX, group=group)
        worst, hi, lo = int(both[0]), both[1:1 + len(FIELDS)].tolist(), (-both[1 + len(FIELDS):]).tolist()
        if problem is None and worst:
            problem = (f"{what}: rank {cp - worst} of the CP group refused its inputs (its error says why), so every "
                       "rank stops before any data moves")
        elif problem is None and hi != lo:
            differ = [f"{name} {a} to {b}" for name, a, b in zip(FIELDS, lo, hi) if a != b]
            problem = (f"{what}: the {cp} ranks of the CP group disagree on {', '.join(differ)}; every rank must pass "
                       "the same shapes, dtype, layout and kernel")
    if problem:
        raise ValueError(problem)
    return layout if layout is not None else CPLayout.causal(q.shape[2] * cp, cp)


def check_cp_shape(seq_len: int, cp: int, n_heads: int, n_kv_heads: int, documents: tuple[int, ...] = (),
                   kind: str = "ring") -> CPLayout:
    """A lab's check of one configuration before any rank starts (no tensors): the layout splits (cp_layout.py), the
    heads group, and Ulysses' heads divide by the degree. ValueError, one line, otherwise; the layout if it passes."""
    if heads_problem(n_heads, n_kv_heads, 1, kind):
        raise ValueError(heads_problem(n_heads, n_kv_heads, 1, kind))
    layout = CPLayout.of(seq_len, cp, documents)
    if heads_problem(n_heads, n_kv_heads, cp, kind):
        raise ValueError(heads_problem(n_heads, n_kv_heads, cp, kind))
    return layout
