"""Ring attention: attention over a sequence split across N context-parallel (CP) ranks, hand-rolled; causal, or
causal within packed documents.

    layout = CPLayout.of(seq_len, cp, documents)           # common/cp_layout.py; no documents: one causal sequence
    pos = layout.positions(rank)                           # the tokens this rank holds (load-balanced)
    q, k, v = (t.index_select(2, pos) for t in (Q, K, V))  # (B, H, s/N, D), (B, Hkv, s/N, D)
    out = ring_attention(q, k, v, group, layout=layout)    # == masked SDPA over the whole sequence, rows `pos`

The algorithm (Ring Attention, Liu et al. 2023, arXiv 2310.01889, section 3; Megatron-Core's context
parallelism; picotron's context_parallel.py). Queries stay where they are; the key/value blocks travel
around the ring of CP ranks, and each rank attends its queries to every block as it passes:

  forward, rank r, steps i = 0 .. N-1 (block i came from rank j = (r - i) mod N):
    post the send of the held K/V block to r+1 and the receive from r-1 (batch_isend_irecv), then compute
    on the held block while they travel, then wait and swap: the transfer hides behind the attention as
    long as a block's compute outlasts its transfer (the paper's block size c >= F/B condition)
  compute: the block's pairs (layout.pairs(r, j): full rectangles and causal squares, never a mask tensor;
    one document gives one kernel call per step, documents one per document met)
  merge: every pair gives a partial (O, LSE) over disjoint keys, folded in by log-sum-exp (attention_block.merge,
    the sigmoid form: the online softmax of FlashAttention written for whole blocks)
  backward: K/V travel the ring again; each block's dQ/dK/dV come from the saved final O and LSE alone
    (attention_block.block_backward). dQ stays; the dK/dV of block j ride an fp32 accumulator one hop behind
    their K/V: created by rank j+1 at step 1, each rank adds its share and passes it on, and rank j-1's hop
    at step N-1 brings it home, where the owner adds its own step-0 share: N-1 hops, not N.

Load balance: the layout's (common/cp_layout.py): chunks r and 2N-1-r of every document, so every rank holds the same
unmasked pairs. With one document every step after the first is exactly half a block: from a rank j < r all local
queries see the first half of j's keys (chunk j; chunk 2N-1-j is later than both of ours); from j > r only our
second chunk sees all of j's keys. A step that meets no pair (documents that do not overlap) computes nothing and
still passes its block on.

Bytes each rank sends, per layer (ring_bytes, common/cp_bytes.py: the planner imports it without torch; the tests
count them at the dispatcher): forward N-1 K/V blocks, backward N-1 K/V blocks again plus N-1 fp32 dK/dV
accumulators. A block is 2 b (s/N) Hkv D elements: with grouped-query attention the ring carries the K/V heads, not
the query heads. The bytes per rank do not shrink with N: ring CP buys memory (s/N tokens per rank) at a constant
traffic, and hides it behind the attention.

Beside it: the all-gather design of Llama 3 (allgather_attention.py: the same bytes in one exposed collective) and
DeepSpeed-Ulysses (ulysses_attention.py: heads scattered by all-to-all); PyTorch's context_parallel runs beside all
three in cp-attention/torch_cp.py. Inputs are checked inside (common/cp_checks.py) before any byte moves.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .attention_block import accum_dtype, block_backward, block_forward, default_scale, merge
from .cp_checks import check_cp_inputs
from .cp_layout import CPLayout

_KV_TAG, _DKV_TAG = 0, 1  # the forward/backward K/V and the backward accumulators never share a gloo slot


class _Ring:
    """Send to the next rank of the CP group and receive from the previous one, asynchronously."""

    def __init__(self, group: dist.ProcessGroup):
        self.group = group
        self.size, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.next, self.prev = (self.rank + 1) % self.size, (self.rank - 1) % self.size

    def start(self, send: torch.Tensor, tag: int) -> tuple[list, torch.Tensor]:
        recv = torch.empty_like(send)
        ops = [dist.P2POp(dist.isend, send, group=self.group, group_peer=self.next, tag=tag),
               dist.P2POp(dist.irecv, recv, group=self.group, group_peer=self.prev, tag=tag)]
        return dist.batch_isend_irecv(ops), recv

    @staticmethod
    def finish(pending: tuple[list, torch.Tensor]) -> torch.Tensor:
        works, recv = pending
        for w in works:
            w.wait()
        return recv


class RingAttentionFunction(torch.autograd.Function):
    """The ring as one autograd op: forward merges the K/V blocks as they arrive, backward sends dK/dV home."""

    @staticmethod
    def forward(ctx, q, k, v, group, layout: CPLayout, scale, kernel):
        ring = _Ring(group)
        acc = accum_dtype(q.dtype)
        out = torch.zeros(q.shape, dtype=acc, device=q.device)  # merged over the blocks seen so far
        lse = torch.full(q.shape[:3], float("-inf"), dtype=acc, device=q.device)
        kv = torch.stack([k, v])  # (2, B, Hkv, s/N, D): one buffer, one send per step
        for i in range(ring.size):
            pending = ring.start(kv, _KV_TAG) if i < ring.size - 1 else None
            for p in layout.pairs(ring.rank, (ring.rank - i) % ring.size):
                o_p, lse_p = block_forward(q[:, :, p.q], kv[0][:, :, p.k], kv[1][:, :, p.k], causal=p.causal,
                                           scale=scale, kernel=kernel)
                merge(out[:, :, p.q], lse[:, :, p.q], o_p, lse_p)  # rows: a view, merged in place
            if pending is not None:
                kv = ring.finish(pending)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group, ctx.layout, ctx.scale, ctx.kernel = group, layout, scale, kernel
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        ring = _Ring(ctx.group)
        acc = accum_dtype(q.dtype)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        own = torch.zeros((2, *k.shape), dtype=acc, device=k.device)  # this rank's share of its dK/dV
        kv, acc_pending = torch.stack([k, v]), None
        for i in range(ring.size):
            kv_pending = ring.start(kv, _KV_TAG) if i < ring.size - 1 else None
            shares = []  # computed while the previous accumulator is still on its way
            for p in ctx.layout.pairs(ring.rank, (ring.rank - i) % ring.size):
                dq_p, dk_p, dv_p = block_backward(dout[:, :, p.q], q[:, :, p.q], kv[0][:, :, p.k], kv[1][:, :, p.k],
                                                  out[:, :, p.q], lse[:, :, p.q], causal=p.causal, scale=ctx.scale,
                                                  kernel=ctx.kernel)
                dq[:, :, p.q] += dq_p
                shares.append((p.k, dk_p, dv_p))
            if i == 0:
                target = own
            else:  # the accumulator of the block held now: fresh at step 1, else the one that came with it
                target = torch.zeros_like(own) if acc_pending is None else ring.finish(acc_pending)
            for keys, dk_p, dv_p in shares:
                target[0][:, :, keys] += dk_p
                target[1][:, :, keys] += dv_p
            if i > 0:  # pass it on: at step N-1 this hop takes it home to its owner
                acc_pending = ring.start(target, _DKV_TAG)
            if kv_pending is not None:
                kv = ring.finish(kv_pending)
        if acc_pending is not None:
            own += ring.finish(acc_pending)  # every other rank's share of our K/V's gradients
        return dq.to(q.dtype), own[0].to(k.dtype), own[1].to(v.dtype), None, None, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: dist.ProcessGroup | None = None, *,
                   layout: CPLayout | None = None, scale: float | None = None, kernel: str = "math",
                   check_ranks: bool = True) -> torch.Tensor:
    """Attention of this rank's queries over the whole sequence held by `group` (module docstring).

    q (B, H, s/N, D), k and v (B, Hkv, s/N, D): this rank's tokens in layout.positions(rank) order (default layout: one
    causal sequence of N x s/N tokens); returns (B, H, s/N, D) in q's dtype. One rank (N = 1) is plain causal (or
    per-document causal) attention with the same kernel. Bad inputs raise ValueError on every rank before any byte
    moves (common/cp_checks.py; check_ranks=False skips the ranks' agreement all-reduce, not the local checks)."""
    group = group if group is not None else dist.group.WORLD
    layout = check_cp_inputs("ring_attention", q, k, v, group, layout, kernel, "ring", check_ranks)
    scale = default_scale(q.shape[-1]) if scale is None else scale
    return RingAttentionFunction.apply(q, k, v, group, layout, scale, kernel)
