"""Ring attention: causal attention over a sequence split across N context-parallel (CP) ranks, hand-rolled.

    pos = balanced_positions(seq_len, cp, rank)           # the tokens this rank holds (load-balanced)
    q, k, v = (t.index_select(2, pos) for t in (Q, K, V))  # (B, H, s/N, D), (B, Hkv, s/N, D)
    out = ring_attention(q, k, v, group)                  # == causal SDPA over the whole sequence, rows `pos`

The algorithm (Ring Attention, Liu et al. 2023, arXiv 2310.01889, section 3; Megatron-Core's context
parallelism; picotron's context_parallel.py). Queries stay where they are; the key/value blocks travel
around the ring of CP ranks, and each rank attends its queries to every block as it passes:

  forward, rank r, steps i = 0 .. N-1 (block i came from rank j = (r - i) mod N):
    post the send of the held K/V block to r+1 and the receive from r-1 (batch_isend_irecv), then compute
    on the held block while they travel, then wait and swap: the transfer hides behind the attention as
    long as a block's compute outlasts its transfer (the paper's block size c >= F/B condition)
  merge: every step gives a partial (O_i, LSE_i) over disjoint keys; the running result is rescaled by
    log-sum-exp (the online softmax of FlashAttention written for whole blocks), exactly:
        LSE = log(e^LSE_a + e^LSE_b),   O = e^(LSE_a - LSE) O_a + e^(LSE_b - LSE) O_b
  backward: K/V travel the ring again; each block's dQ/dK/dV come from the saved final O and LSE alone
    (attention_block.block_backward). dQ stays; the dK/dV of block j ride an fp32 accumulator one hop behind
    their K/V: created by rank j+1 at step 1, each rank adds its share and passes it on, and rank j-1's hop
    at step N-1 brings it home, where the owner adds its own step-0 share: N-1 hops, not N.

Load balance (Llama 3, Dubey et al. 2024, arXiv 2407.21783, section 3.3.2; Megatron's "zigzag"; PyTorch's
_HeadTailLoadBalancer). Cut the sequence into 2N chunks; rank r holds chunks r and 2N-1-r, so every
rank has the same number of unmasked query-key pairs (a contiguous split leaves rank N-1 with N times
rank 0's work). Then step 0 is causal on the local pair (chunk r precedes chunk 2N-1-r), and every later
step is exactly half a block: from a rank j < r all local queries see the first half of j's keys (chunk
j; chunk 2N-1-j is later than both of ours); from j > r only our second chunk sees all of j's keys.

Bytes each rank sends, per layer (ring_bytes, in common/ring_bytes.py so that the planner imports it without
torch; the tests count them at the dispatcher): forward N-1 K/V blocks, backward N-1 K/V blocks again plus
N-1 fp32 dK/dV accumulators. A block is 2 b (s/N) Hkv D elements: with grouped-query attention the ring
carries the K/V heads, not the query heads. The bytes per rank do not shrink with N: ring CP buys memory
(s/N tokens per rank) at a constant traffic.

Llama 3 chose the other design, an all-gather of K/V before attention (any mask works; with GQA the K/V
are small next to the O(s^2) attention); PyTorch's context_parallel does both ("allgather", "alltoall"):
cp-attention/torch_cp.py runs it beside this one.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .attention_block import accum_dtype, block_backward, block_forward, default_scale
from .ring_bytes import RingBytes, ring_bytes  # noqa: F401  (the byte formula, torch-free: ring_bytes.py)

_KV_TAG, _DKV_TAG = 0, 1  # the forward/backward K/V and the backward accumulators never share a gloo slot


def check_cp_shape(seq_len: int, cp: int, n_heads: int, n_kv_heads: int) -> None:
    """ValueError (one line: what is wrong, what is allowed) unless this shape splits over `cp` ranks."""
    if cp < 1:
        raise ValueError(f"the CP degree must be >= 1, got {cp}")
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"n_heads ({n_heads}) must be a positive multiple of n_kv_heads ({n_kv_heads})")
    if seq_len % (2 * cp):
        raise ValueError(f"the sequence ({seq_len}) must divide into 2 x CP = {2 * cp} equal chunks for the "
                         f"load-balanced split; use a multiple of {2 * cp}")


def balanced_positions(seq_len: int, cp: int, rank: int, device=None) -> torch.Tensor:
    """The token positions rank `rank` of `cp` holds, in order: chunk rank, then chunk 2cp-1-rank (long)."""
    if cp == 1:
        return torch.arange(seq_len, device=device)
    c = seq_len // (2 * cp)
    head = torch.arange(rank * c, (rank + 1) * c, device=device)
    tail = torch.arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c, device=device)
    return torch.cat([head, tail])


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


def merge(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor, block_lse: torch.Tensor) -> None:
    """Fold a partial result over other keys into (out, lse), in place; out (B, H, S, D), lse (B, H, S)."""
    new = torch.logaddexp(lse, block_lse)
    out.mul_(torch.exp(lse - new).unsqueeze(-1)).add_(block_out * torch.exp(block_lse - new).unsqueeze(-1))
    lse.copy_(new)


def _step_slices(i: int, rank: int, size: int, s_local: int) -> tuple[slice, slice, bool]:
    """(query rows, key rows, causal) of step i on `rank` under the load-balanced split (module docstring)."""
    half = s_local // 2
    if i == 0:
        return slice(0, s_local), slice(0, s_local), True
    if (rank - i) % size < rank:  # from an earlier rank: every query, the first chunk of its keys
        return slice(0, s_local), slice(0, half), False
    return slice(half, s_local), slice(0, s_local), False  # from a later rank: our second chunk, all its keys


class RingAttentionFunction(torch.autograd.Function):
    """The ring as one autograd op: forward merges the K/V blocks as they arrive, backward sends dK/dV home."""

    @staticmethod
    def forward(ctx, q, k, v, group, scale, kernel):
        ring = _Ring(group)
        acc = accum_dtype(q.dtype)
        out = torch.zeros(q.shape, dtype=acc, device=q.device)  # merged over the blocks seen so far
        lse = torch.full(q.shape[:3], float("-inf"), dtype=acc, device=q.device)
        kv = torch.stack([k, v])  # (2, B, Hkv, s/N, D): one buffer, one send per step
        for i in range(ring.size):
            pending = ring.start(kv, _KV_TAG) if i < ring.size - 1 else None
            rows, keys, causal = _step_slices(i, ring.rank, ring.size, q.shape[2])
            o_i, lse_i = block_forward(q[:, :, rows], kv[0][:, :, keys], kv[1][:, :, keys], causal=causal,
                                       scale=scale, kernel=kernel)
            merge(out[:, :, rows], lse[:, :, rows], o_i, lse_i)  # rows: a view, merged in place
            if pending is not None:
                kv = ring.finish(pending)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group, ctx.scale, ctx.kernel = group, scale, kernel
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        ring = _Ring(ctx.group)
        acc = accum_dtype(q.dtype)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        own = torch.zeros((2, *k.shape), dtype=acc, device=k.device)  # this rank's share of its dK/dV
        kv, acc, acc_pending = torch.stack([k, v]), None, None
        for i in range(ring.size):
            kv_pending = ring.start(kv, _KV_TAG) if i < ring.size - 1 else None
            rows, keys, causal = _step_slices(i, ring.rank, ring.size, q.shape[2])
            dq_i, dk_i, dv_i = block_backward(dout[:, :, rows], q[:, :, rows], kv[0][:, :, keys], kv[1][:, :, keys],
                                              out[:, :, rows], lse[:, :, rows], causal=causal, scale=ctx.scale,
                                              kernel=ctx.kernel)
            dq[:, :, rows] += dq_i
            if i == 0:
                target = own
            else:  # the accumulator of the block held now: fresh at step 1, else the one that came with it
                target = torch.zeros_like(own) if acc_pending is None else ring.finish(acc_pending)
            target[0][:, :, keys] += dk_i
            target[1][:, :, keys] += dv_i
            if i > 0:  # pass it on: at step N-1 this hop takes it home to its owner
                acc_pending = ring.start(target, _DKV_TAG)
            if kv_pending is not None:
                kv = ring.finish(kv_pending)
        if acc_pending is not None:
            own += ring.finish(acc_pending)  # every other rank's share of our K/V's gradients
        return dq.to(q.dtype), own[0].to(k.dtype), own[1].to(v.dtype), None, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: dist.ProcessGroup | None = None, *,
                   scale: float | None = None, kernel: str = "math") -> torch.Tensor:
    """Causal attention of this rank's queries over the whole sequence held by `group` (module docstring).

    q (B, H, s/N, D), k and v (B, Hkv, s/N, D): this rank's tokens in balanced_positions order; returns
    (B, H, s/N, D) in q's dtype. One rank (N = 1) is plain causal attention with the same kernel."""
    group = group if group is not None else dist.group.WORLD
    scale = default_scale(q.shape[-1]) if scale is None else scale
    if q.shape[2] % 2 and dist.get_world_size(group) > 1:
        raise ValueError(f"the local sequence ({q.shape[2]}) must be two equal chunks (balanced_positions)")
    return RingAttentionFunction.apply(q, k, v, group, scale, kernel)
