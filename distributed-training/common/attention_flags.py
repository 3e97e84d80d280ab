"""The flags of an attention lab (tp-attention, cp-attention; common/attention_sweep.py is their runner), declared once.
Imports no torch: a lab's shape rules and its verify command's config are checked anywhere, in milliseconds.

    SweepFlags    what every sweep takes beside the run flags (common.runner.RunFlags): sequence lengths, head size,
                  batch, dtype, warm-up and timed iterations, the correctness grid, --require-gpu; a lab's BenchConfig
                  adds its degree (DEGREE names the flag: tp, cp) and its shapes
    VerifyFlags   what every verify command takes: heads, sequence, batch, seed, --gpu; a lab's VerifyConfig adds its
                  degree (default: the ranks torchrun started) and its shape, and a function gives its defaults (the
                  verify command's preset: its heads)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from .runner import RunFlags


def ranks_started() -> int:
    """The ranks torchrun started: a verify command's default degree (more ranks run replicas)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def divisor_degrees(world: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to 64: every power-of-two degree that divides the world (a preset's sweep)."""
    return tuple(d for d in (1, 2, 4, 8, 16, 32, 64) if world % d == 0)


@dataclass(frozen=True, kw_only=True)
class SweepFlags(RunFlags):
    """The flags every attention sweep shares; a lab's BenchConfig derives from it, names its degree flag (DEGREE) and
    adds it and its shapes."""

    DEGREE: ClassVar[str]
    seq_lens: tuple[int, ...] = field(metadata={"help": "sequence lengths s swept"})
    head_dim: int = field(metadata={"help": "head size"})
    batch: int = field(metadata={"help": "batch size b"})
    dtype: Literal["float32", "bfloat16"] = field(metadata={"help": "parameter and compute dtype"})
    warmup: int = field(metadata={"help": "untimed iterations per implementation"})
    iters: int = field(metadata={"help": "timed iterations per implementation"})
    correctness: bool = field(default=True, metadata={"help": "write the correctness grid first"})
    require_gpu: bool = field(default=False, metadata={"help": "refuse to run without CUDA (the lab's -gpu target)"})

    def __post_init__(self):
        for name in ("head_dim", "batch", "iters"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")
        if not self.seq_lens or min(self.seq_lens) < 1:
            raise ValueError(f"--seq-lens must be positive, got {self.seq_lens}")
        if not self.degrees or min(self.degrees) < 1:
            raise ValueError(f"--{self.DEGREE} degrees must be positive, got {self.degrees}")

    @property
    def degrees(self) -> tuple[int, ...]:
        return getattr(self, self.DEGREE)


@dataclass(frozen=True, kw_only=True)
class VerifyFlags:
    """The verify command's flags every attention lab shares (its VerifyConfig derives from this)."""

    n_heads: int = field(metadata={"help": "query heads"})
    n_kv_heads: int = field(metadata={"help": "key/value heads (< n_heads: grouped-query attention)"})
    seq_len: int = field(default=64, metadata={"help": "sequence length s (the whole sequence, split over the ranks)"})
    batch: int = field(default=2, metadata={"help": "batch size b"})
    seed: int = field(default=0, metadata={"help": "seed of the weights and inputs (the same on every rank)"})
    gpu: str = field(default="auto", metadata={"help": "hardware preset (common/hardware.py); cpu = CPU + gloo"})

    def __post_init__(self):
        for name in ("seq_len", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
