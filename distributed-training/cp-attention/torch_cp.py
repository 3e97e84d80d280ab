"""PyTorch's context parallelism, for comparison with the hand-rolled ring (common/ring_attention.py).

Two ways in, by where they run (torch 2.13; ../shared/reference/cp-anchors.md sections 0 and 4):

    public      torch.distributed.tensor.experimental.context_parallel(mesh, buffers=..., buffer_seq_dims=...):
                shards the buffers in place with the head-tail load balancer (the same layout as
                ring_attention.balanced_positions) and patches F.scaled_dot_product_attention so that its
                fused kernels run as ring attention. CUDA only: its dispatcher handles the flash, efficient
                and cuDNN SDPA ops, and CPU SDPA lowers to _scaled_dot_product_flash_attention_for_cpu,
                which it does not ("... does not have a sharding strategy registered"); the CPU tests assert
                that refusal (public_refusal_on_cpu), so the day it runs on CPU the report's line changes.
    core        the ring it runs underneath, _templated_ring_attention / _templated_ring_attention_backward
                (private), called here with the CPU fused kernel and its backward: it runs on gloo, and is
                what the CPU benchmark compares with. TorchRing wraps the two in an autograd Function.

Either way the rotation is PyTorch's: "allgather" (its default: one all-gather of K/V, launched before the
local block so that it overlaps it) or "alltoall" (a ring shift per step as an all-to-all); dK/dV always
travel as fp32 all-to-all shifts, N of them. Its fused ops take equal head counts, so grouped-query K/V
are repeated to the query heads before attention, as torchtitan does (torchtitan#1283): the rotation then
carries n_heads, not n_kv_heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.experimental._attention import _cp_options, _RotateMethod

try:  # torch >= 2.12 keeps the implementation here; experimental._attention re-exports only part of it
    from torch.distributed.tensor.experimental._context_parallel._attention import (_templated_ring_attention,
                                                                                   _templated_ring_attention_backward)
except ImportError:  # torch 2.11 (the GPU images' torch)
    from torch.distributed.tensor.experimental._attention import (_templated_ring_attention,
                                                                  _templated_ring_attention_backward)

ROTATE = {"allgather": _RotateMethod.ALL_GATHER, "alltoall": _RotateMethod.ALL_TO_ALL}
_aten = torch.ops.aten


def repeat_kv(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, Hkv, S, D) -> (B, n_heads, S, D): each K/V head repeated for the query heads it serves."""
    return t.repeat_interleave(n_heads // t.shape[1], dim=1)


class _Options:
    """PyTorch's CP options are module globals: set for one call, restored after (the dispatcher reads them)."""

    def __init__(self, rotate: str):
        self.rotate = ROTATE[rotate]

    def __enter__(self):
        self.saved = (_cp_options.rotate_method, _cp_options.enable_load_balance)
        _cp_options.rotate_method, _cp_options.enable_load_balance = self.rotate, True

    def __exit__(self, *exc):
        _cp_options.rotate_method, _cp_options.enable_load_balance = self.saved


class TorchRing(torch.autograd.Function):
    """PyTorch's ring core on the CPU fused kernel: q, k, v (B, H, s/N, D), equal heads, head-tail layout."""

    @staticmethod
    def forward(ctx, q, k, v, group, scale, rotate):
        with _Options(rotate):
            out, lse = _templated_ring_attention(group, 2, _aten._scaled_dot_product_flash_attention_for_cpu, q, k, v,
                                                 is_causal=True, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group, ctx.scale, ctx.rotate = group, scale, rotate
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        with _Options(ctx.rotate):
            dq, dk, dv = _templated_ring_attention_backward(
                ctx.group, 2, _aten._scaled_dot_product_flash_attention_for_cpu_backward.default, dout.contiguous(),
                "grad_out", q, k, v, out, lse, is_causal=True, dropout_p=0.0, scale=ctx.scale)
        return dq, dk, dv, None, None, None


def torch_ring(q, k, v, group, *, scale: float, rotate: str = "allgather") -> torch.Tensor:
    """PyTorch's ring core on gloo/CPU: this rank's queries (head-tail layout) over the group's whole sequence.
    K/V of fewer heads are repeated to the query heads first (PyTorch's kernels have no GQA)."""
    n = q.shape[1]
    return TorchRing.apply(q, repeat_kv(k, n), repeat_kv(v, n), group, scale, rotate)


class PublicCP:
    """The public API on CUDA: enter once with the full-sequence tensors, then run steps on this rank's shards.

        with PublicCP(mesh, q, k, v, dout) as cp:       # q, k, v, dout: (B, H, s, D), whole
            cp.step("allgather")                        # SDPA forward + backward, as ring attention
        cp.q.grad ...                                   # this rank's shard's gradients

    The buffers are sharded in place on entry (head-tail layout) and not restored; K/V repeated to H heads. The
    rotation is a module global that the ring reads at each call: set per step, so that one context serves both
    (two contexts may not nest: each patches SDPA)."""

    def __init__(self, mesh: DeviceMesh, q, k, v, dout, *, rotate: str = "allgather"):
        n = q.shape[1]
        self.mesh, self.rotate = mesh, rotate
        self.q, self.k, self.v = (t.detach().clone() for t in (q, repeat_kv(k, n), repeat_kv(v, n)))
        self.dout = dout.detach().clone()
        self.out: torch.Tensor | None = None

    def __enter__(self) -> "PublicCP":
        from torch.distributed.tensor.experimental import context_parallel

        bufs = [self.q, self.k, self.v, self.dout]
        self._ctx = context_parallel(self.mesh, buffers=bufs, buffer_seq_dims=[2] * 4, no_restore_buffers=set(bufs))
        self._ctx.__enter__()
        for t in (self.q, self.k, self.v):
            t.requires_grad_(True)
        return self

    def forward(self, rotate: str | None = None) -> torch.Tensor:
        from torch.distributed.tensor.experimental._attention import set_rotate_method

        set_rotate_method(rotate or self.rotate)
        for t in (self.q, self.k, self.v):
            t.grad = None
        self.out = F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=True)  # looked up inside
        return self.out

    def backward(self) -> None:
        self.out.backward(self.dout)

    def step(self, rotate: str | None = None) -> None:
        self.forward(rotate)
        self.backward()

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


def public_refusal_on_cpu(mesh: DeviceMesh) -> str:
    """The public API on CPU tensors: the error it raises, in one line (the report quotes it); '' if it ran."""
    q = torch.randn(1, 2, 4 * mesh.size(), 8)
    try:
        with PublicCP(mesh, q, q, q, q) as cp:
            cp.step()
    except Exception as e:  # noqa: BLE001 - whatever PyTorch raises is the finding
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return ""
