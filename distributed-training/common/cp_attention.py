"""The three hand-rolled designs of context-parallel attention behind one call, by name: what the cp-attention lab
verifies and times, and what parallel-3d's --cp-kind and the planner's --cp-kind choose among.

    out = cp_attention("ulysses", q, k, v, group, layout=layout, kernel="fused")

    ring        K/V blocks passed around the ring, each hop hidden behind a block's attention (ring_attention.py)
    allgather   one all-gather of K/V, the local block overlapping it; dK/dV reduce-scattered (allgather_attention.py)
    ulysses     two all-to-alls over heads per pass, attention on whole sequences in between (ulysses_attention.py)

All three take the same arguments and tensors (q (B, H, s/N, D), k and v (B, Hkv, s/N, D), this rank's tokens in
the layout's order: common/cp_layout.py), return the same output, check their inputs the same way
(common/cp_checks.py) and send what their formula in common/cp_bytes.py says.
"""

from __future__ import annotations

from typing import Callable

import torch

from .allgather_attention import allgather_attention
from .cp_bytes import CP_KINDS
from .ring_attention import ring_attention
from .ulysses_attention import ulysses_attention

ATTENTION: dict[str, Callable[..., torch.Tensor]] = {"ring": ring_attention, "allgather": allgather_attention,
                                                     "ulysses": ulysses_attention}
assert tuple(ATTENTION) == CP_KINDS


def cp_attention(kind: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group=None, **kw) -> torch.Tensor:
    """Design `kind`'s attention of this rank's queries over the group's whole sequence (keywords: layout, scale,
    kernel, check_ranks)."""
    if kind not in ATTENTION:
        raise ValueError(f"the CP design must be one of {', '.join(CP_KINDS)}, got {kind!r}")
    return ATTENTION[kind](q, k, v, group, **kw)
