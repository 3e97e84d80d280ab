"""The shape rules of tensor parallelism, and the verify command's configuration. Imports no torch.

Megatron TP gives every rank whole attention heads and an equal share of the MLP's hidden
units, so the head counts and the MLP width must divide by the TP degree t; with sequence
parallelism the activations between blocks are also cut along the sequence, so T must divide
by t too (Megatron-Core asserts the same with `divide()`, megatron/core/utils.py). Megatron
replicates K/V heads when n_kv_heads < t; this lab does not, and says so instead.

This module stays free of torch so that the rules can be checked anywhere in milliseconds;
`make tp-verify` applies them through verify.py's check pass (common.launch), before any rank
starts, so bad input is one line and exit 2 rather than N ranks failing inside torchrun.

    python tp_config.py --tp 2 --n-heads 6      # exits 0 silently, or 2 with one line
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from common.attention_flags import VerifyFlags, ranks_started
from common.config import parse_preset


DTYPES = ("float32", "bfloat16")
MODULES = ("block", "attn", "mlp")
IMPLS = ("ours", "dtensor", "dtensor-naive")  # dtensor-naive: no PrepareModuleInput (3 backward all-reduces)


def check_tp_shape(*, tp: int, n_heads: int, n_kv_heads: int, d_model: int, d_ff: int, seq_len: int,
                   sequence_parallel: bool) -> None:
    """Raise ValueError (one line: what is wrong, what is allowed) if this shape cannot be split t ways."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    if min(n_heads, n_kv_heads, d_model, d_ff, seq_len) < 1:
        raise ValueError("n_heads, n_kv_heads, d_model, d_ff and seq_len must all be positive")
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    if n_heads % tp:
        raise ValueError(f"n_heads ({n_heads}) must be divisible by tp ({tp}): every rank holds whole heads")
    if n_kv_heads % tp:
        raise ValueError(f"n_kv_heads ({n_kv_heads}) must be divisible by tp ({tp}): every rank holds whole "
                         f"K/V heads (replicating them when n_kv_heads < tp is not implemented)")
    if d_ff % tp:
        raise ValueError(f"d_ff ({d_ff}) must be divisible by tp ({tp}): the MLP's hidden units are split evenly")
    if sequence_parallel and seq_len % tp:
        raise ValueError(f"seq_len ({seq_len}) must be divisible by tp ({tp}) with sequence parallelism")


@dataclass(frozen=True)
class VerifyConfig(VerifyFlags):
    tp: int = field(default_factory=ranks_started,
                    metadata={"help": "TP degree; default: the ranks torchrun started (more ranks: replicas)"})
    d_model: int = field(default=256, metadata={"help": "hidden size h"})
    d_ff: int | None = field(default=None, metadata={"help": "MLP hidden units (None: 4*d_model)"})
    dtype: Literal["float32", "bfloat16"] = field(default="float32", metadata={"help": "parameter/compute dtype"})
    sp: bool = field(default=False, metadata={"help": "sequence parallelism (all-gather/reduce-scatter)"})
    fused_qkv: bool = field(default=False, metadata={"help": "one fused QKV weight, sharded per head group"})
    bias: bool = field(default=False, metadata={"help": "linear and LayerNorm biases"})
    module: Literal["block", "attn", "mlp"] = field(default="block", metadata={"help": "what to check"})
    impl: Literal["ours", "dtensor", "dtensor-naive"] = field(default="ours", metadata={"help": "implementation"})

    def __post_init__(self):
        super().__post_init__()
        if self.impl == "dtensor-naive" and self.sp:
            raise ValueError("impl dtensor-naive has no sequence-parallel plan; use impl dtensor with --sp")
        if self.fused_qkv and self.module == "mlp":
            raise ValueError("--fused-qkv applies to attention; use module block or attn")
        check_tp_shape(tp=self.tp, n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, d_model=self.d_model,
                       d_ff=self.ffn, seq_len=self.seq_len, sequence_parallel=self.sp)

    @property
    def ffn(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff


def verify_preset() -> VerifyConfig:
    """The verify command's defaults: 16 query heads over 8 K/V heads (grouped-query attention), t = the ranks."""
    return VerifyConfig(n_heads=16, n_kv_heads=8)


if __name__ == "__main__":
    parse_preset(VerifyConfig, None, verify_preset, keys=(), description=__doc__, prog="tp_config.py")
