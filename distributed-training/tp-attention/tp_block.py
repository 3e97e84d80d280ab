"""Tensor-parallel attention, MLP and transformer block, sliced from the common GPT's modules.

    TPAttention  x -> [f | all-gather seq] -> wq, wk, wv column-parallel (whole heads per rank)
                   -> causal SDPA on the local heads -> wo row-parallel -> [g | reduce-scatter seq]
    TPMLP        x -> [f | all-gather seq] -> w1 column-parallel -> GELU -> w2 row-parallel -> [g | ...]
    TPBlock      x + attn(norm1(x)), then + mlp(norm2(x)); the LayerNorms are replicated

One collective each way per region: forward one all-reduce (g), backward one all-reduce (f), so a
block (attention + MLP) costs 2 + 2 (Megatron-LM 2019, section 3: "only two all-reduces in the
forward path and two in the backward path"). With sequence parallelism (Korthikanti et al. 2022,
section 4.2.2) the activations between regions, the LayerNorms and the residual adds work on a
(B, T/t, d) shard of the sequence, and each all-reduce becomes an all-gather at the entry plus a
reduce-scatter at the exit. We keep the gathered input for the column-parallel weight-gradients;
Megatron-Core frees it and all-gathers it again in backward to save activation memory.

Heads: rank r holds query heads [r*H/t, (r+1)*H/t) and K/V heads [r*Hkv/t, (r+1)*Hkv/t). With
grouped-query attention, query head i reads K/V head i // (H/Hkv), so a rank's query heads read
exactly its own K/V heads: whole head groups stay on one rank and attention needs no communication.
A fused QKV weight [Q | K | V] must therefore be sharded per head group (rank r: its Q rows, its K
rows, its V rows), not cut into t contiguous chunks, which would hand rank 0 all of Q and part of K
(`fused_qkv_rows`; the legacy Megatron test takes the fused QKV shards with a stride of t for the
same reason, ../shared/reference/fsdp-tp-anchors.md section 5.3).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from common.model import MLP, Attention, Block
from layers import ColumnParallelLinear, RowParallelLinear, replicate
from mappings import TPGroup, copy_to_tp, gather_seq


def head_rows(n_heads: int, head_dim: int, rank: int, tp: int) -> tuple[int, int]:
    """Rows [start, stop) of a (n_heads*head_dim, d) projection weight that hold this rank's whole heads."""
    per_rank = n_heads // tp * head_dim
    return rank * per_rank, (rank + 1) * per_rank


def fused_qkv_rows(n_heads: int, n_kv_heads: int, head_dim: int, rank: int, tp: int) -> list[tuple[int, int]]:
    """Row ranges of a fused [Q | K | V] weight that hold a rank's head groups: its Q, its K and its V rows."""
    q, kv = head_rows(n_heads, head_dim, rank, tp), head_rows(n_kv_heads, head_dim, rank, tp)
    k_at, v_at = n_heads * head_dim, (n_heads + n_kv_heads) * head_dim  # where K and V start in the fused rows
    return [q, (k_at + kv[0], k_at + kv[1]), (v_at + kv[0], v_at + kv[1])]


def _enter(x: torch.Tensor, tp: TPGroup, sequence_parallel: bool) -> torch.Tensor:
    return gather_seq(x, tp) if sequence_parallel else copy_to_tp(x, tp)


class TPAttention(nn.Module):
    def __init__(self, ref: Attention, tp: TPGroup, *, sequence_parallel: bool = False, fused_qkv: bool = False,
                 prefix: str = ""):
        super().__init__()
        H, Hkv, hd = ref.n_heads, ref.n_kv_heads, ref.head_dim
        for name, n in (("n_heads", H), ("n_kv_heads", Hkv)):
            if n % tp.size:
                raise ValueError(f"{name} ({n}) must be divisible by tp ({tp.size}): every rank holds whole heads")
        self.tp, self.sequence_parallel, self.fused_qkv, self.head_dim = tp, sequence_parallel, fused_qkv, hd
        q_rows, kv_rows = head_rows(H, hd, tp.rank, tp.size), head_rows(Hkv, hd, tp.rank, tp.size)
        self.q_width, self.kv_width = q_rows[1] - q_rows[0], kv_rows[1] - kv_rows[0]
        if fused_qkv:  # one matmul for Q, K and V: this rank's head groups of each, concatenated
            self.wqkv = ColumnParallelLinear([(prefix + "wq", ref.wq, *q_rows), (prefix + "wk", ref.wk, *kv_rows),
                                              (prefix + "wv", ref.wv, *kv_rows)])
        else:
            self.wq = ColumnParallelLinear([(prefix + "wq", ref.wq, *q_rows)])
            self.wk = ColumnParallelLinear([(prefix + "wk", ref.wk, *kv_rows)])
            self.wv = ColumnParallelLinear([(prefix + "wv", ref.wv, *kv_rows)])
        self.wo = RowParallelLinear(prefix + "wo", ref.wo, *q_rows, tp, sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _enter(x, self.tp, self.sequence_parallel)  # (B, T, d) on every rank
        B, T, _ = x.shape
        if self.fused_qkv:
            q, k, v = self.wqkv(x).split([self.q_width, self.kv_width, self.kv_width], dim=-1)
        else:
            q, k, v = self.wq(x), self.wk(x), self.wv(x)
        q = q.reshape(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H/t, T, hd)
        k = k.reshape(B, T, -1, self.head_dim).transpose(1, 2)  # (B, Hkv/t, T, hd)
        v = v.reshape(B, T, -1, self.head_dim).transpose(1, 2)  # (B, Hkv/t, T, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))  # (B, T, H/t*hd) -> (B, T or T/t, d)


class TPMLP(nn.Module):
    def __init__(self, ref: MLP, tp: TPGroup, *, sequence_parallel: bool = False, prefix: str = ""):
        super().__init__()
        d_ff = ref.w1.out_features
        if d_ff % tp.size:
            raise ValueError(f"d_ff ({d_ff}) must be divisible by tp ({tp.size})")
        cols = (tp.rank * d_ff // tp.size, (tp.rank + 1) * d_ff // tp.size)
        self.tp, self.sequence_parallel = tp, sequence_parallel
        self.w1 = ColumnParallelLinear([(prefix + "w1", ref.w1, *cols)])
        self.w2 = RowParallelLinear(prefix + "w2", ref.w2, *cols, tp, sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _enter(x, self.tp, self.sequence_parallel)  # (B, T, d)
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))  # (B, T, d_ff/t) -> (B, T or T/t, d)


class TPBlock(nn.Module):
    """The common GPT's Block, tensor-parallel; with SP its input and output are (B, T/t, d) shards."""

    def __init__(self, ref: Block, tp: TPGroup, *, sequence_parallel: bool = False, fused_qkv: bool = False):
        super().__init__()
        self.norm1 = replicate(ref.norm1, "norm1.", sequence_parallel)
        self.attn = TPAttention(ref.attn, tp, sequence_parallel=sequence_parallel, fused_qkv=fused_qkv,
                                prefix="attn.")
        self.norm2 = replicate(ref.norm2, "norm2.", sequence_parallel)
        self.mlp = TPMLP(ref.mlp, tp, sequence_parallel=sequence_parallel, prefix="mlp.")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def tensor_parallel(ref: nn.Module, tp: TPGroup, *, sequence_parallel: bool = False,
                    fused_qkv: bool = False) -> nn.Module:
    """The TP version of a common Block, Attention or MLP (the master), for this rank."""
    if isinstance(ref, Block):
        return TPBlock(ref, tp, sequence_parallel=sequence_parallel, fused_qkv=fused_qkv)
    if isinstance(ref, Attention):
        return TPAttention(ref, tp, sequence_parallel=sequence_parallel, fused_qkv=fused_qkv)
    if isinstance(ref, MLP):
        return TPMLP(ref, tp, sequence_parallel=sequence_parallel)
    raise TypeError(f"no tensor-parallel version of {type(ref).__name__}")
