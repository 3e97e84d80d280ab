"""The small GPT every lab trains, shards or slices.

A pre-norm decoder (GPT-2 layout, nanoGPT-sized): token + learned position embeddings, then
n_layers blocks of

    x = x + attn(norm1(x))      attn: wq, wk, wv -> causal SDPA -> wo
    x = x + mlp(norm2(x))       mlp:  w1 -> GELU -> w2

then a final norm and an untied LM head. Grouped-query attention when n_kv_heads < n_heads.
The projections are separate nn.Linear modules with stable names (layers.{i}.attn.wq, ...,
layers.{i}.mlp.w2, lm_head) because the labs address them by name: fsdp-scaling wraps each
block with fully_shard, tp-attention slices wq/wk/wv by heads, fp8-train's precision map swaps
chosen Linears for FP8 ones. No dropout: every lab compares runs number for number.

FLOPs per token for MFU (PaLM appendix B, as torchtitan's get_dense_model_nparams_and_flops
counts them): 6·N' + 12·L·H·d_head·T, with N' the parameters excluding the embedding tables
(the LM head counts), the 6 = 2 (multiply-add) x 3 (forward + 2x backward), and the attention
term for the QK^T and AV matmuls at sequence length T, causal masking not discounted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 256  # byte-level by default (common.data)
    seq_len: int = 128  # maximum context; sets the position table
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None  # None = n_heads (multi-head); fewer = grouped-query attention
    d_ff: int | None = None  # None = 4 * d_model
    bias: bool = False
    init_std: float = 0.02

    def __post_init__(self):
        for name in ("vocab_size", "seq_len", "d_model", "n_layers", "n_heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.kv_heads <= 0 or self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a positive multiple of n_kv_heads ({self.kv_heads})")
        if self.ffn <= 0:
            raise ValueError(f"d_ff must be positive, got {self.ffn}")

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ffn(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=cfg.bias)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=cfg.bias)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=cfg.bias)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wo(causal_attention(self.wq(x), self.wk(x), self.wv(x), self.head_dim))  # (B, T, d)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Causal SDPA over projected q (B, T, Hq*hd), k and v (B, T, Hkv*hd) -> (B, T, Hq*hd).

    Heads are read off the projection width (-1), not a head count, so a module whose wq/wk/wv were
    sliced to a subset of heads (tensor parallelism) runs unchanged on its local heads.
    """
    B, T, _ = q.shape
    q, k, v = (t.view(B, T, -1, head_dim).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
    return y.transpose(1, 2).reshape(B, T, -1)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.ffn, bias=cfg.bias)
        self.w2 = nn.Linear(cfg.ffn, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 init: N(0, 0.02), residual-stream outputs (wo, w2) scaled by 1/sqrt(2L)."""
        std = self.cfg.init_std
        for name, p in self.named_parameters():
            if p.dim() == 1 and name.endswith("weight"):  # LayerNorm gains
                p.fill_(1.0)
            elif p.dim() == 1:  # biases
                p.zero_()
            elif name.endswith(("attn.wo.weight", "mlp.w2.weight")):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * self.cfg.n_layers))
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (B, T) int64 token ids -> logits (B, T, vocab)."""
        T = idx.shape[1]
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's seq_len {self.cfg.seq_len}")
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)  # (B, T, d)
        for block in self.layers:
            x = block(x)
        return self.lm_head(self.norm(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; logits (B, T, V), targets (B, T). Computed in fp32."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def count_params(cfg: GPTConfig, include_embeddings: bool = True) -> int:
    """Parameter count from the shapes alone (checked against the module in the tests)."""
    d, f, hd = cfg.d_model, cfg.ffn, cfg.head_dim
    lin = lambda i, o: i * o + (o if cfg.bias else 0)  # noqa: E731
    norm = d * (2 if cfg.bias else 1)
    attn = lin(d, cfg.n_heads * hd) + 2 * lin(d, cfg.kv_heads * hd) + lin(cfg.n_heads * hd, d)
    block = 2 * norm + attn + lin(d, f) + lin(f, d)
    n = cfg.n_layers * block + norm + d * cfg.vocab_size  # blocks, final norm, LM head
    if include_embeddings:
        n += (cfg.vocab_size + cfg.seq_len) * d
    return n


def flops_per_token(cfg: GPTConfig, seq_len: int | None = None) -> float:
    """Training FLOPs per token: 6·N' + 12·L·H·d_head·T (PaLM; torchtitan's MFU numerator)."""
    T = cfg.seq_len if seq_len is None else seq_len
    return 6.0 * count_params(cfg, include_embeddings=False) + 12.0 * cfg.n_layers * cfg.n_heads * cfg.head_dim * T


def mfu(tokens_per_s_per_device: float, cfg: GPTConfig, peak_tflops: float | None,
        seq_len: int | None = None) -> float | None:
    """Model FLOPs utilisation in [0, 1]; None when the peak is unknown (never a guess)."""
    if peak_tflops is None or peak_tflops <= 0:
        return None
    return tokens_per_s_per_device * flops_per_token(cfg, seq_len) / (peak_tflops * 1e12)
