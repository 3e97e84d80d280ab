"""The model side of the planner: shape, parameter counts and FLOPs, independent of any cluster.

The model is the labs' GPT (common.model.GPTConfig): learned positions, pre-LayerNorm blocks with
q/k/v/o projections (grouped-query when kv_heads < heads) and a two-matrix MLP of width ffn, an
untied LM head. A SwiGLU model with ffn F has the parameters and FLOPs of this MLP at ffn 1.5·F,
which is how the planner is pointed at Llama shapes (published.py).

A size that names a published model (`NAMED`: 7B, 8B, 13B, 70B, 175B, 405B, 1T) is that model's shape, layers,
width, heads, key/value heads (GQA), MLP width and vocabulary as its model card or paper gives them; any other size
gets a standard shape (`standard_shape`). `model_shape` resolves `--params` either way, with `--kv-heads`, `--ffn`
and `--vocab` overriding the resolved shape where given.

FLOPs are counted the way the papers we compare with count them, one formula each:
- model FLOPs (MFU numerator): common.model.flops_per_token = 6·N' + 12·L·h·s per token (PaLM
  appendix B; torchtitan; N' = parameters without the embedding tables, the LM head counted);
- hardware FLOPs (HFU numerator): the model FLOPs plus what activation recompute repeats: the whole
  forward of every layer for full recompute, the attention core (QK^T and AV) for selective;
- Megatron SC21 eq. 3: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), i.e. hardware FLOPs with full
  recompute for a standard GPT (ffn 4h, no GQA); tests/test_flops.py checks the two agree.
Attention-core FLOPs ignore causal masking (as Megatron, PaLM and torchtitan do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

from common.model import GPTConfig, count_params, flops_per_token

HEAD_DIM = 128  # the standard shape's head size (GPT-3 175B, Llama 2/3, Megatron 1T all use 128 or near)
ASPECT = 128  # standard hidden/layers ratio: GPT-3 175B 12288/96 = 128, Llama-2 7B 4096/32 = 128


@dataclass(frozen=True)
class Shape:
    """A transformer to plan for; `gpt` is the same model as the labs' GPTConfig."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    seq: int
    ffn: int

    def __post_init__(self):
        for flag, value in (("layers", self.layers), ("hidden", self.hidden), ("heads", self.heads),
                            ("kv-heads", self.kv_heads), ("vocab", self.vocab), ("seq", self.seq), ("ffn", self.ffn)):
            if value <= 0:
                raise ValueError(f"--{flag} must be positive, got {value}")
        if self.hidden % self.heads:
            raise ValueError(f"--hidden {self.hidden} is not divisible by --heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"--heads {self.heads} is not a multiple of --kv-heads {self.kv_heads}")

    @property
    def gpt(self) -> GPTConfig:
        return GPTConfig(vocab_size=self.vocab, seq_len=self.seq, d_model=self.hidden, n_layers=self.layers,
                         n_heads=self.heads, n_kv_heads=self.kv_heads, d_ff=self.ffn)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_matmul_params(self) -> int:
        """Weights of the linear layers of one block: q, k, v, o and the two MLP matrices."""
        h = self.hidden
        return h * (h + 2 * self.kv_dim) + h * h + 2 * h * self.ffn

    @property
    def layer_params(self) -> int:
        return self.layer_matmul_params + 2 * self.hidden  # + two LayerNorm gains (no biases)

    @property
    def embedding_params(self) -> int:
        return (self.vocab + self.seq) * self.hidden  # token + position tables

    @property
    def head_params(self) -> int:
        return self.vocab * self.hidden + self.hidden  # LM head + final norm

    @property
    def params(self) -> int:
        """Total parameters Ψ, the same count as common.model.count_params."""
        return count_params(self.gpt)

    def describe(self) -> str:
        return (f"{self.params / 1e9:.2f}B params: {self.layers} layers, hidden {self.hidden}, {self.heads} heads "
                f"({self.kv_heads} kv), ffn {self.ffn}, vocab {self.vocab}, seq {self.seq}")


def standard_shape(params: float, vocab: int, seq: int) -> Shape:
    """A conventional shape with about `params` parameters: head_dim 128, hidden/layers near 128.

    Hidden is a multiple of 1024 (heads a multiple of 8, so TP 8 divides them) above 3K, of 512 below,
    within 0.7-1.5x of the width that Ψ = 12·L·h² and h/L = 128 give; layers a multiple of 4, 8, 16 or
    32 (from 32, 64 and 128 layers on) so that pipeline degrees up to 32 divide them. Among shapes
    within 6% of the asked count, the aspect ratio closest to 128 wins.
    """
    if params < 1e7:
        raise ValueError(f"--params {params:.3g} is too small for a standard shape; give at least 10M (e.g. 125M)")
    h_guess = (params * ASPECT / 12) ** (1 / 3)  # from Ψ ≈ 12·L·h² with L = h/ASPECT
    unit = 1024 if h_guess >= 3072 else 512 if h_guess >= 1024 else 128
    best: tuple | None = None
    widths = [h for h in range(unit, int(1.5 * h_guess) + unit, unit) if h >= 0.7 * h_guess] or [unit]
    for h in widths:
        per_layer, rest = 12 * h * h + 13 * h, (2 * vocab + seq) * h
        depth = (params - rest) / per_layer
        step = 32 if depth >= 128 else 16 if depth >= 64 else 8 if depth >= 32 else 4
        base = max(1, round((params - rest) / per_layer / step)) * step
        for layers in sorted({max(step, base - step), base, base + step}):
            shape = Shape(layers, h, h // HEAD_DIM, h // HEAD_DIM, vocab, seq, 4 * h)
            # Within 6% of the asked size first, then the aspect ratio closest to ASPECT, then the count.
            err, ratio = abs(shape.params - params) / params, h / layers / ASPECT
            key = (err > 0.06, max(ratio, 1 / ratio), err, h, layers)
            if best is None or key < best[0]:
                best = (key, shape)
    return best[1]


class NamedModel(NamedTuple):
    """A published model's shape as its model card or paper states it (ffn: the card's MLP width)."""
    title: str
    source: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    swiglu: bool  # a gated MLP: the planner's two-matrix MLP of 1.5 x ffn has its parameters and FLOPs
    vocab: int

    def shape(self, seq: int, vocab: int | None = None) -> Shape:
        ffn = self.ffn * 3 // 2 if self.swiglu else self.ffn
        return Shape(self.layers, self.hidden, self.heads, self.kv_heads, vocab or self.vocab, seq, ffn)

    def describe(self) -> str:
        mlp = f"SwiGLU {self.ffn:,}" if self.swiglu else f"MLP {self.ffn:,}"
        return f"{self.title} ({self.source}: {self.kv_heads} KV heads, {mlp}, vocabulary {self.vocab:,})"


_LLAMA31 = "Llama 3.1 model card, config.json of meta-llama/Llama-3.1-{}"
_LLAMA2 = "Llama 2 model card, config.json of meta-llama/Llama-2-{}-hf"
NAMED = {  # --params value -> the published shape it names
    "7B": NamedModel("Llama 2 7B", _LLAMA2.format("7b"), 32, 4096, 32, 32, 11008, True, 32000),
    "8B": NamedModel("Llama 3.1 8B", _LLAMA31.format("8B"), 32, 4096, 32, 8, 14336, True, 128256),
    "13B": NamedModel("Llama 2 13B", _LLAMA2.format("13b"), 40, 5120, 40, 40, 13824, True, 32000),
    "70B": NamedModel("Llama 3.1 70B", _LLAMA31.format("70B"), 80, 8192, 64, 8, 28672, True, 128256),
    "175B": NamedModel("GPT-3 175B", "Brown et al. 2020, Table 2.1", 96, 12288, 96, 96, 4 * 12288, False, 50257),
    "405B": NamedModel("Llama 3.1 405B", _LLAMA31.format("405B") + "; Llama 3 paper, Table 3", 126, 16384, 128, 8,
                       53248, True, 128256),
    "1T": NamedModel("Megatron-LM's 1T GPT", "Narayanan et al. SC21, Table 1", 128, 25600, 160, 160, 4 * 25600,
                     False, 51200),
}
DEFAULT_VOCAB = 51200  # a standard shape's vocabulary unless --vocab says otherwise (GPT-2's, padded: Megatron's)


def named(text: str) -> NamedModel | None:
    """The published model a --params value names ('8B', '8b', '405B'), or None."""
    return NAMED.get(text.strip().upper())


def model_shape(params: str, seq: int, vocab: int | None = None, kv_heads: int | None = None,
                ffn: int | None = None) -> Shape:
    """--params resolved: the named model's shape (NAMED) or a standard one, then --kv-heads, --ffn and --vocab
    where given (a value that does not fit the heads is refused by Shape in one line)."""
    model = named(params)
    shape = model.shape(seq, vocab) if model else standard_shape(parse_count(params), vocab or DEFAULT_VOCAB, seq)
    return replace(shape, kv_heads=kv_heads or shape.kv_heads, ffn=ffn or shape.ffn)


def parse_count(text: str) -> float:
    """'7B', '70e9', '1.5T', '350M' -> a number of parameters."""
    s = text.strip().upper()
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}.get(s[-1:], 1.0)
    try:
        value = float(s[:-1] if s[-1:] in "KMBGT" else s) * scale
    except ValueError:
        raise ValueError(f"cannot read --params {text!r}; use a number with K/M/B/T, e.g. 7B or 1.5T") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--params must be a positive finite count, got {text!r}")
    return value


# ---- FLOPs ------------------------------------------------------------------------------------------

def layer_forward_flops_per_token(shape: Shape) -> float:
    """Forward FLOPs of one block per token: 2 per weight (multiply-add) + attention core 2·2·s·h."""
    return 2.0 * shape.layer_matmul_params + 4.0 * shape.seq * shape.hidden


def model_flops_per_token(shape: Shape) -> float:
    """6·N' + 12·L·h·s (PaLM; common.model.flops_per_token): the MFU numerator."""
    return flops_per_token(shape.gpt, shape.seq)


def recompute_flops_per_token(shape: Shape, recompute: str) -> float:
    """What activation recompute adds per token: one more forward of every block, or of its attention core."""
    if recompute == "full":
        return shape.layers * layer_forward_flops_per_token(shape)
    if recompute == "selective":  # Korthikanti §5: QK^T, softmax, AV are recomputed
        return shape.layers * 4.0 * shape.seq * shape.hidden
    return 0.0


def hardware_flops_per_token(shape: Shape, recompute: str) -> float:
    """The HFU numerator: model FLOPs plus recompute."""
    return model_flops_per_token(shape) + recompute_flops_per_token(shape, recompute)


def sc21_flops_per_iteration(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Megatron SC21 (Narayanan et al., arXiv 2104.04473) eq. 3, full recompute included."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
