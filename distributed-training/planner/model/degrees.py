"""One parallel configuration, or thousands at once: the record the memory and cost terms take.

Each field is a number or a numpy array with one element per configuration (the search prices every
configuration in one vectorised pass). The letters are the papers' (Megatron SC21, Korthikanti 2022):
t tensor-, p pipeline-, c context-, d data-parallel degree; b micro-batch in sequences, v virtual
pipeline chunks per GPU (1 = plain 1F1B), m micro-batches per step. t·p·c·d = GPUs.

The codes are named: ZeRO stages are their numbers (0 = plain DP .. 3 = also the weights sharded);
activation recompute is NONE, SELECTIVE (the attention core, Korthikanti §5), FULL (every layer's
forward, keeping only its input) or OP (torchtitan's per-op selective AC: the memory-bound kernels and
every second GEMM are recomputed, the other GEMM outputs and attention are kept).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

NONE, SELECTIVE, FULL, OP = 0, 1, 2, 3  # activation recompute codes
RECOMPUTE = ("none", "selective", "full", "op")  # their names, indexed by code


@dataclass(frozen=True)
class Degrees:
    t: np.ndarray  # tensor parallel
    p: np.ndarray  # pipeline stages
    c: np.ndarray  # context parallel
    d: np.ndarray  # data parallel
    b: np.ndarray  # micro-batch, sequences
    v: np.ndarray  # virtual pipeline chunks per GPU
    m: np.ndarray  # micro-batches per step
    zero: np.ndarray  # ZeRO stage 0-3
    recompute: np.ndarray  # NONE, SELECTIVE, FULL or OP

    def __post_init__(self):  # numbers or lists in, arrays out: degrees as floats, codes as integers
        for f in fields(self):
            value = getattr(self, f.name)
            object.__setattr__(self, f.name, np.asarray(value, int if f.name in ("zero", "recompute") else float))

    @classmethod
    def of(cls, *, t=1, p=1, c=1, d=1, b=1, v=1, m=1, zero=0, recompute=NONE) -> "Degrees":
        """By keyword, with the defaults of no parallelism (tests and single configurations)."""
        return cls(t, p, c, d, b, v, m, zero, recompute)
