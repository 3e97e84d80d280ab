"""All-gather context parallelism: every rank gathers the whole sequence's K/V and attends its own queries to it,
hand-rolled; causal, or causal within packed documents.

    layout = CPLayout.of(seq_len, cp, documents)                 # common/cp_layout.py (the ring's layout)
    out = allgather_attention(q, k, v, group, layout=layout)     # q (B, H, s/N, D), k, v (B, Hkv, s/N, D)

The Llama 3 recipe (Dubey et al. 2024, arXiv 2407.21783, section 3.3.2: "we all-gather the K and V tensors, then
compute attention output for the local Q tensor chunk"), PyTorch's default rotation ("allgather") and TorchTitan's
Flex path, and what Megatron calls cp_comm_type "all_gather". Why Llama 3 chose it over the ring: any mask works on
the gathered sequence (document masks), and with grouped-query attention K/V are small next to the O(s^2) attention,
so one gather is cheap; the ring's hiding of each hop behind a block matters less.

  forward, rank r: launch the all-gather of this rank's K/V block (one buffer: K and V stacked); attend the local
    pairs (layout.pairs(r, r): its own tokens, causal) while it travels; wait; attend every other rank's block in the
    ring's order (j = r-1, r-2, ...: the same merges as the ring, so the same rounding), merged by log-sum-exp
    (attention_block.merge). Only the gather's time beyond the local block is exposed: one collective, not N-1
    overlapped hops.
  backward: gather K/V again (Megatron keeps only the local K/V chunk and re-gathers: the whole sequence's K/V is
    never saved), compute every pair's dQ/dK/dV from the saved final O and LSE, then one reduce-scatter of the fp32
    dK/dV of the whole sequence hands each rank the sum of its own block's gradients.

Bytes per rank per layer (allgather_bytes, common/cp_bytes.py): forward N-1 K/V blocks (its block to each peer);
backward N-1 blocks again and N-1 fp32 blocks of the reduce-scatter: exactly the ring's bytes (ring_bytes), by another
route. Memory: the gathered K/V, 2 b s Hkv D elements, live while a layer's attention runs (the ring holds two blocks).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .attention_block import accum_dtype, block_backward, block_forward, default_scale, merge
from .cp_checks import check_cp_inputs
from .cp_layout import CPLayout

# torch >= 2.13 names them *_single (the *_tensor names warn); the GPU images' torch 2.11 has only the older names
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _gather_start(kv: torch.Tensor, group) -> tuple[object, torch.Tensor]:
    """Launch the all-gather of this rank's (2, B, Hkv, s/N, D) block into (N, 2, B, Hkv, s/N, D)."""
    n = dist.get_world_size(group)
    out = torch.empty((n * kv.shape[0], *kv.shape[1:]), dtype=kv.dtype, device=kv.device)  # ranks along dim 0
    return _all_gather(out, kv, group=group, async_op=True), out.unflatten(0, (n, kv.shape[0]))


class AllGatherAttentionFunction(torch.autograd.Function):
    """Gather K/V, attend the local queries to all of it; backward re-gathers and reduce-scatters dK/dV."""

    @staticmethod
    def forward(ctx, q, k, v, group, layout: CPLayout, scale, kernel):
        n, r = dist.get_world_size(group), dist.get_rank(group)
        acc = accum_dtype(q.dtype)
        out = torch.zeros(q.shape, dtype=acc, device=q.device)
        lse = torch.full(q.shape[:3], float("-inf"), dtype=acc, device=q.device)
        kv = torch.stack([k, v])  # (2, B, Hkv, s/N, D)
        work, gathered = _gather_start(kv, group) if n > 1 else (None, kv.unsqueeze(0))
        for i in range(n):  # i = 0: the local block (our own copy: the gather may still be writing its output)
            if i == 1:
                work.wait()
            j = (r - i) % n
            held = kv if i == 0 else gathered[j]
            for p in layout.pairs(r, j):
                o_p, lse_p = block_forward(q[:, :, p.q], held[0][:, :, p.k], held[1][:, :, p.k], causal=p.causal,
                                           scale=scale, kernel=kernel)
                merge(out[:, :, p.q], lse[:, :, p.q], o_p, lse_p)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)  # the local K/V only: backward gathers again
        ctx.group, ctx.layout, ctx.scale, ctx.kernel = group, layout, scale, kernel
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        group = ctx.group
        n, r = dist.get_world_size(group), dist.get_rank(group)
        acc = accum_dtype(q.dtype)
        kv = torch.stack([k, v])
        work, gathered = _gather_start(kv, group) if n > 1 else (None, kv.unsqueeze(0))
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dkv = torch.zeros((n, 2, *k.shape), dtype=acc, device=k.device)  # every block's share from our queries
        for i in range(n):
            if i == 1:
                work.wait()
            j = (r - i) % n
            held = kv if i == 0 else gathered[j]
            for p in ctx.layout.pairs(r, j):
                dq_p, dk_p, dv_p = block_backward(dout[:, :, p.q], q[:, :, p.q], held[0][:, :, p.k], held[1][:, :, p.k],
                                                  out[:, :, p.q], lse[:, :, p.q], causal=p.causal, scale=ctx.scale,
                                                  kernel=ctx.kernel)
                dq[:, :, p.q] += dq_p
                dkv[j, 0][:, :, p.k] += dk_p
                dkv[j, 1][:, :, p.k] += dv_p
        if n > 1:  # each rank receives the sum over ranks of its own block's gradients
            own = torch.empty_like(dkv[0])
            _reduce_scatter(own, dkv.flatten(0, 1), op=dist.ReduceOp.SUM, group=group)
        else:
            own = dkv[0]
        return dq.to(q.dtype), own[0].to(k.dtype), own[1].to(v.dtype), None, None, None, None


def allgather_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: dist.ProcessGroup | None = None,
                        *, layout: CPLayout | None = None, scale: float | None = None, kernel: str = "math",
                        check_ranks: bool = True) -> torch.Tensor:
    """Attention of this rank's queries over the whole sequence held by `group`, by one all-gather of K/V (module
    docstring). The ring's contract: q (B, H, s/N, D), k and v (B, Hkv, s/N, D) in layout.positions(rank) order;
    returns (B, H, s/N, D) in q's dtype; bad inputs raise ValueError on every rank before any byte moves."""
    group = group if group is not None else dist.group.WORLD
    layout = check_cp_inputs("allgather_attention", q, k, v, group, layout, kernel, "allgather", check_ranks)
    scale = default_scale(q.shape[-1]) if scale is None else scale
    return AllGatherAttentionFunction.apply(q, k, v, group, layout, scale, kernel)
