"""Ulysses context parallelism: an all-to-all turns "every head, s/N tokens" into "H/N heads, every token", each rank
runs single-device attention on its heads, and a second all-to-all turns the output back; hand-rolled; causal, or
causal within packed documents.

    layout = CPLayout.of(seq_len, cp, documents)               # common/cp_layout.py (the ring's layout)
    out = ulysses_attention(q, k, v, group, layout=layout)     # q (B, H, s/N, D), k, v (B, Hkv, s/N, D)

DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509), TransformerEngine's cp_comm_type "a2a", TorchTitan's
Ulysses CP (2026). Attention is independent per head, so once a rank holds whole sequences for its heads nothing
else moves: no ring, no merge across ranks, any mask on the whole sequence.

  forward, rank r: one all-to-all of q, k, v packed in one buffer (head group j of this rank's tokens goes to rank j;
    rank r receives head group r of every rank's tokens); put the tokens in sequence order (the layout's
    positions); attend per document, causally, one kernel call per document (one for a causal sequence); put the
    output back in the ranks' order and send head group j's rows back to their owners: the second all-to-all.
    Neither hides behind compute: attention needs all of q, k, v, and the output projection all of the output.
  backward: the same two, mirrored: dO to the heads' owners, then dQ, dK, dV (complete on their head's rank, in
    the inputs' dtype) back to the tokens' owners.

Heads. Each rank takes 1/N of the query heads and of the K/V heads, so both must divide by N: with grouped-query
attention the K/V heads bind first (8 K/V heads under TP 8 leave one per rank: Ulysses cannot go beyond N = 1;
cp-anchors section 2). Here they are not replicated to make N fit (what some implementations do, sending copies):
Ulysses refuses in one line and the ring or the all-gather run instead (common/cp_checks.py). Query head group j
keeps its K/V heads (heads are grouped contiguously), so GQA holds within each rank.

Bytes per rank per layer (ulysses_bytes, common/cp_bytes.py): (N-1)/N of b s/N (H + 2 Hkv) D forward for q/k/v plus
(N-1)/N of b s/N H D for the output; the same backward. They fall as N grows, where the ring's do not.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .attention_block import accum_dtype, block_backward, block_forward, default_scale
from .cp_checks import check_cp_inputs
from .cp_layout import CPLayout


def _all_to_all(send: torch.Tensor, group) -> torch.Tensor:
    """(N, ...) rows: row j goes to rank j; row j of the result came from rank j."""
    if dist.get_world_size(group) == 1:
        return send
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return recv


def _scatter_heads(x: torch.Tensor, n: int) -> torch.Tensor:
    """(B, H, s/N, D) -> (N, B, H/N, s/N, D): head group j in row j, to be sent to rank j."""
    return x.unflatten(1, (n, x.shape[1] // n)).movedim(1, 0).contiguous()


def _gather_heads(rows: torch.Tensor) -> torch.Tensor:
    """(N, B, H/N, s/N, D), head group j in row j -> (B, H, s/N, D)."""
    return rows.movedim(0, 1).flatten(1, 2)


def _tokens(rows: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """(N, B, h, s/N, D), rank j's tokens in row j -> (B, h, s, D) in sequence order (order: argsort of positions)."""
    return rows.permute(1, 2, 0, 3, 4).flatten(2, 3).index_select(2, order)


def _rows(x: torch.Tensor, ranked: torch.Tensor, n: int) -> torch.Tensor:
    """(B, h, s, D) in sequence order -> (N, B, h, s/N, D), rank j's tokens in row j (ranked: the ranks' positions)."""
    return x.index_select(2, ranked).unflatten(2, (n, x.shape[2] // n)).movedim(2, 0).contiguous()


class UlyssesAttentionFunction(torch.autograd.Function):
    """All-to-all heads for tokens, attention on whole sequences, all-to-all back; the backward mirrors it."""

    @staticmethod
    def forward(ctx, q, k, v, group, layout: CPLayout, scale, kernel):
        n = dist.get_world_size(group)
        h, hkv = q.shape[1] // n, k.shape[1] // n
        ranked = torch.cat([layout.positions(j, q.device) for j in range(n)])  # the ranks' tokens, rank by rank
        order = torch.argsort(ranked)  # sequence position -> index in `ranked`
        sent = torch.cat([_scatter_heads(q, n), _scatter_heads(k, n), _scatter_heads(v, n)], dim=2)
        whole = _tokens(_all_to_all(sent, group), order)  # (B, h + 2 hkv, s, D): our heads, every token
        qh, kh, vh = whole[:, :h], whole[:, h:h + hkv], whole[:, h + hkv:]
        acc = accum_dtype(q.dtype)
        out = torch.empty(qh.shape, dtype=acc, device=q.device)
        lse = torch.empty(qh.shape[:3], dtype=acc, device=q.device)
        for a, b in _spans(layout):  # one document at a time: the sequence's own causal attention
            out[:, :, a:b], lse[:, :, a:b] = block_forward(qh[:, :, a:b], kh[:, :, a:b], vh[:, :, a:b], causal=True,
                                                           scale=scale, kernel=kernel)
        out = out.to(q.dtype)
        ctx.save_for_backward(qh, kh, vh, out, lse, ranked, order)
        ctx.group, ctx.layout, ctx.scale, ctx.kernel, ctx.h = group, layout, scale, kernel, h
        return _gather_heads(_all_to_all(_rows(out, ranked, n), group))

    @staticmethod
    def backward(ctx, dout):
        qh, kh, vh, out, lse, ranked, order = ctx.saved_tensors
        group, h = ctx.group, ctx.h
        n = dist.get_world_size(group)
        dout_h = _tokens(_all_to_all(_scatter_heads(dout.contiguous(), n), group), order)
        acc = accum_dtype(qh.dtype)
        grads = torch.empty((qh.shape[0], qh.shape[1] + 2 * kh.shape[1], *qh.shape[2:]), dtype=acc, device=qh.device)
        hkv = kh.shape[1]
        for a, b in _spans(ctx.layout):
            dq, dk, dv = block_backward(dout_h[:, :, a:b], qh[:, :, a:b], kh[:, :, a:b], vh[:, :, a:b],
                                        out[:, :, a:b], lse[:, :, a:b], causal=True, scale=ctx.scale,
                                        kernel=ctx.kernel)
            grads[:, :h, a:b], grads[:, h:h + hkv, a:b], grads[:, h + hkv:, a:b] = dq, dk, dv
        back = _all_to_all(_rows(grads.to(qh.dtype), ranked, n), group)  # (N, B, h + 2 hkv, s/N, D)
        return (_gather_heads(back[:, :, :h]), _gather_heads(back[:, :, h:h + hkv]),
                _gather_heads(back[:, :, h + hkv:]), None, None, None, None)


def _spans(layout: CPLayout) -> list[tuple[int, int]]:
    """[start, end) of every document in sequence order."""
    ends = torch.tensor(layout.documents).cumsum(0).tolist()
    return list(zip([0] + ends[:-1], ends))


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: dist.ProcessGroup | None = None, *,
                      layout: CPLayout | None = None, scale: float | None = None, kernel: str = "math",
                      check_ranks: bool = True) -> torch.Tensor:
    """Attention of this rank's queries over the whole sequence held by `group`, by two all-to-alls over heads
    (module docstring). The ring's contract: q (B, H, s/N, D), k and v (B, Hkv, s/N, D) in layout.positions(rank)
    order, H and Hkv divisible by N; returns (B, H, s/N, D) in q's dtype; bad inputs raise ValueError on every rank
    before any byte moves."""
    group = group if group is not None else dist.group.WORLD
    layout = check_cp_inputs("ulysses_attention", q, k, v, group, layout, kernel, "ulysses", check_ranks)
    scale = default_scale(q.shape[-1]) if scale is None else scale
    return UlyssesAttentionFunction.apply(q, k, v, group, layout, scale, kernel)
