"""One block of attention that also returns its log-sum-exp, its backward given any LSE, and the merge of partial
results over disjoint keys: what every step of context-parallel attention needs (common/ring_attention.py,
allgather_attention.py, ulysses_attention.py).

    out, lse = block_forward(q, k, v, causal=True, scale=s, kernel="math")   # fp32 out, lse (B, H, Sq)
    merge(out, lse, *block_forward(q, k2, v2, causal=False, scale=s))       # now over both key blocks, in place
    dq, dk, dv = block_backward(dout, q, k, v, out, lse, causal=False, scale=s)

Shapes: q (B, H, Sq, D); k, v (B, Hkv, Sk, D) with H a multiple of Hkv (grouped-query attention: each
K/V head serves H/Hkv query heads). `causal` masks key j > query i within the block (Sq == Sk).

The LSE of a query row i is log sum_j exp(s_ij), s_ij = scale * q_i . k_j over this block's keys. It is
what lets partial results over disjoint key sets be merged exactly (merge, below) and what the
backward needs: given the *final* LSE of a row over all its keys, P_ij = exp(s_ij - LSE_i) is that row's
true softmax probability, so each block's gradients can be computed on their own and added, with no
rescaling (FlashAttention's backward, Dao et al. 2022, arXiv 2205.14135, Alg. 2; picotron's ring backward):

    dV_j = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),   dQ = scale dS K,   dK = scale dS^T Q

Kernels:
    math    the formulas above in fp32 with the scores materialised (Sq x Sk per head): exact, any device,
            GQA without copying K/V (query heads are grouped under their K/V head); the teaching kernel
    fused   PyTorch's own fused kernels, the ones SDPA dispatches to and PyTorch's context parallelism calls:
            aten._scaled_dot_product_flash_attention_for_cpu (+ _backward) on CPU, and
            aten._scaled_dot_product_flash_attention (+ _backward) on CUDA (bf16/fp16 only; fp32 on CUDA
            falls back to math). They take equal head counts, so K/V are repeated to H heads locally (the
            ring still carries Hkv heads) and dK/dV summed back over each group.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

KERNELS = ("math", "fused")
_aten = torch.ops.aten


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def accum_dtype(dtype: torch.dtype) -> torch.dtype:
    """Where partial results are merged and gradients summed: fp32, or fp64 for fp64 inputs (exactness checks)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def merge(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor, block_lse: torch.Tensor) -> None:
    """Fold a partial result over other keys into (out, lse), in place; out (B, H, S, D), lse (B, H, S), both fp32
    (fp64). Rows no block has reached yet hold lse = -inf (and out = 0): they take the block as it is.

    The log-sum-exp rule, LSE = log(e^LSE_a + e^LSE_b), O = e^(LSE_a - LSE) O_a + e^(LSE_b - LSE) O_b, written in
    its sigmoid form (PyTorch's _SDPAMerger, picotron; zhuzilin/ring-flash-attention PR #34):

        O = O_a - sigmoid(LSE_b - LSE_a) (O_a - O_b),     LSE = LSE_a - logsigmoid(LSE_a - LSE_b)

    The weights come from the difference of the two LSEs, which fp32 holds exactly when they are close, and never
    from the rounded new LSE: with logits near 1e3 an LSE carries an absolute error of 6e-5 (fp32's spacing at 1e3),
    which the exp form passes into every weight and the backward's cancellations then amplify; the sigmoid form
    gives PyTorch's results to the bit (tests/test_merge.py)."""
    fresh = torch.isneginf(lse)
    weight = torch.sigmoid(block_lse - lse)  # 1 where fresh (block_lse is finite: every block has unmasked keys)
    out.sub_(weight.unsqueeze(-1) * (out - block_out))
    lse.copy_(torch.where(fresh, block_lse, lse - F.logsigmoid(lse - block_lse)))


def _grouped(q: torch.Tensor, n_kv: int) -> torch.Tensor:
    """(B, H, S, D) -> (B, Hkv, G, S, D): query heads grouped under the K/V head they share."""
    B, H, S, D = q.shape
    return q.reshape(B, n_kv, H // n_kv, S, D)


def _causal_mask(s_q: int, s_k: int, device) -> torch.Tensor:
    return torch.ones(s_q, s_k, dtype=torch.bool, device=device).triu(1)  # True where key j > query i: masked


def _math_forward(q, k, v, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    B, H, Sq, D = q.shape
    acc = accum_dtype(q.dtype)
    qg = _grouped(q.to(acc), k.shape[1])  # (B, Hkv, G, Sq, D)
    s = torch.matmul(qg, k.to(acc).unsqueeze(2).transpose(-1, -2)) * scale  # (B, Hkv, G, Sq, Sk)
    if causal:
        s = s.masked_fill(_causal_mask(Sq, k.shape[2], q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (B, Hkv, G, Sq)
    out = torch.matmul(torch.exp(s - lse.unsqueeze(-1)), v.to(acc).unsqueeze(2))  # (B, Hkv, G, Sq, D)
    return out.reshape(B, H, Sq, D), lse.reshape(B, H, Sq)


def _math_backward(dout, q, k, v, out, lse, causal: bool, scale: float):
    B, H, Sq, D = q.shape
    n_kv, acc = k.shape[1], accum_dtype(q.dtype)
    qg, dog, og = (_grouped(t.to(acc), n_kv) for t in (q, dout, out))  # (B, Hkv, G, Sq, D)
    kf, vf = k.to(acc).unsqueeze(2), v.to(acc).unsqueeze(2)  # (B, Hkv, 1, Sk, D)
    s = torch.matmul(qg, kf.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(_causal_mask(Sq, k.shape[2], q.device), float("-inf"))
    p = torch.exp(s - _grouped(lse.to(acc).unsqueeze(-1), n_kv))  # the row's true probabilities
    dv = torch.matmul(p.transpose(-1, -2), dog).sum(2)  # (B, Hkv, Sk, D): summed over the group
    dp = torch.matmul(dog, vf.transpose(-1, -2))
    ds = p * (dp - (dog * og).sum(-1, keepdim=True))
    dq = torch.matmul(ds, kf) * scale
    dk = torch.matmul(ds.transpose(-1, -2), qg).sum(2) * scale
    return dq.reshape(B, H, Sq, D), dk, dv


def _repeat_kv(t: torch.Tensor, groups: int) -> torch.Tensor:
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def _sum_groups(t: torch.Tensor, groups: int) -> torch.Tensor:
    B, H, S, D = t.shape
    return t if groups == 1 else t.reshape(B, H // groups, groups, S, D).sum(2)


def _cuda_fused(t: torch.Tensor) -> bool:
    return t.is_cuda and t.dtype in (torch.bfloat16, torch.float16)


def _fused_forward(q, k, v, causal: bool, scale: float):
    g = q.shape[1] // k.shape[1]
    k, v = _repeat_kv(k, g), _repeat_kv(v, g)
    if q.is_cuda:
        out, lse, *_ = _aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    else:
        out, lse = _aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    return out.to(accum_dtype(q.dtype)), lse.to(accum_dtype(q.dtype))


_FLASH_CONSTANTS: dict = {}


def _flash_constants(device, dtype) -> tuple:
    """The CUDA flash forward's varlen and RNG outputs (cum_seq_q, cum_seq_k, rng_state, unused) for a plain
    (B, H, S, D) call without dropout: the same for every shape, and what its backward expects back (SDPA's own
    autograd passes the forward's). Taken once from a tiny forward, since the ring recomputes no forward."""
    key = (device, dtype)
    if key not in _FLASH_CONSTANTS:
        x = torch.zeros(1, 1, 8, 64, device=device, dtype=dtype)
        _, _, cum_q, cum_k, _, _, seed, offset, _ = _aten._scaled_dot_product_flash_attention(x, x, x, 0.0, False)
        _FLASH_CONSTANTS[key] = (cum_q, cum_k, seed, offset)
    return _FLASH_CONSTANTS[key]


def _fused_backward(dout, q, k, v, out, lse, causal: bool, scale: float):
    g = q.shape[1] // k.shape[1]
    kr, vr = _repeat_kv(k, g), _repeat_kv(v, g)
    dout, out, lse = dout.to(q.dtype).contiguous(), out.to(q.dtype).contiguous(), lse.to(accum_dtype(q.dtype)).contiguous()
    if q.is_cuda:
        cum_q, cum_k, seed, offset = _flash_constants(q.device, q.dtype)
        dq, dk, dv = _aten._scaled_dot_product_flash_attention_backward(
            dout, q, kr, vr, out, lse, cum_q, cum_k, q.shape[2], kr.shape[2], 0.0, causal, seed, offset, scale=scale)
    else:
        dq, dk, dv = _aten._scaled_dot_product_flash_attention_for_cpu_backward(dout, q, kr, vr, out, lse, 0.0, causal,
                                                                                scale=scale)
    acc = accum_dtype(q.dtype)
    return dq.to(acc), _sum_groups(dk.to(acc), g), _sum_groups(dv.to(acc), g)


def _use_math(kernel: str, q: torch.Tensor) -> bool:
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    return kernel == "math" or (q.is_cuda and not _cuda_fused(q))


def block_forward(q, k, v, *, causal: bool, scale: float, kernel: str = "math") -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, H, Sq, D), lse (B, H, Sq)), both in accum_dtype (fp32; fp64 for fp64), of q attending to this block's k, v."""
    if _use_math(kernel, q):
        return _math_forward(q, k, v, causal, scale)
    return _fused_forward(q, k, v, causal, scale)


def block_backward(dout, q, k, v, out, lse, *, causal: bool, scale: float, kernel: str = "math"):
    """(dq (B, H, Sq, D), dk, dv (B, Hkv, Sk, D)) in accum_dtype: this block's share of the gradients, given the rows'
    final output `out` and log-sum-exp `lse` over all their keys (not this block's own)."""
    if _use_math(kernel, q):
        return _math_backward(dout, q, k, v, out, lse, causal, scale)
    return _fused_backward(dout, q, k, v, out, lse, causal, scale)
