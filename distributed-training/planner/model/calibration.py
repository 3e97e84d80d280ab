"""The compute model's constants: which are measured facts, which are fitted, and the fitted values.

compute.py prices every kernel with a handful of constants. Most are published measurements:

- the large-GEMM rate per GPU and precision: ml-engineering's MAMF table (common/hardware.py);
- FlashAttention's achieved rate per GPU generation and kernel family (ATTENTION_EFFICIENCY):
  FlashAttention-2 reaches 50-73% of the A100's peak forward and less backward (Dao 2023, arXiv
  2307.08691, abstract and §4.1: ~180 TFLOP/s forward+backward at head size 128, causal, 2K-8K
  tokens), i.e. 0.58; on H100 the same FA2 kernel reaches 329 TFLOP/s forward where cuDNN's and
  FlashAttention-3's reach 631 (pytorch/pytorch#142132, batch 1, 24 heads, 4608 tokens, head 128),
  and FA3's backward is 1.5-1.75x FA2's (Shah et al. 2024, arXiv 2407.08608 §4): 0.30 of peak for
  FA2 and 0.54 for FA3/cuDNN, forward and backward together (1 + 2.5 forward-equivalents), at 4k tokens and
  head size 128; other shapes scale by the FlashAttention repository's published curves (ATTENTION_CURVES);
- the GEMM shape model's two structural constants: TILE (compute.py) and the average wave
  quantization allowance, and the tile prologue/epilogue K0, which make a 1-GFLOP GEMM run at
  ~60% and a 16-GFLOP one at ~90% of the large-GEMM rate on an A100, as Calculon's A100 system
  file tabulates (calculon-ai/calculon systems/a100_80g.json: 0.6 / 0.9 / 0.95 at 1 / 16 / 128 GFLOP).

Three are fitted, once, by fit_compute.py on the published runs marked `fit` in published.py
(SC21 Table 1 on A100; torchtitan's compiled Llama 3 8B and Llama 3 405B on 8,192 GPUs on H100),
and frozen here with the fit's provenance; every other published run is held out and reported
separately (PLANNER_VALIDATION.md section 4):

- sustained_ampere, sustained_hopper: the fraction of the burst MAMF a GPU of that generation
  sustains through a training step, with that era's libraries (a whole node at its power limit runs
  below the boost clock of a one-GEMM benchmark: ml-engineering's mamf-finder reports the sustained
  MSMF below the MAMF; 2021-22 cuBLAS on A100 is also slower than the 2025 one MAMF was measured
  with). Blackwell has no published run here to fit: it takes Hopper's value (an assumption);
- hbm_efficiency: the fraction of the HBM data-sheet bandwidth memory-bound kernels reach
  (STREAM-like kernels reach 80-92% on A100/H100; Calculon takes 0.9 for transfers >= 100 MB).

One is a published figure, not fitted (the fit cannot tell it apart: large models spend little in
kernel fixed costs): kernel_us = 4 us per kernel, the launch-to-launch time of back-to-back short
kernels on a GPU (NVIDIA's CUDA Graphs blog: 3.8 us per launch of a 2.9 us kernel in a stream).

The fit minimises the mean squared log error of per-GPU throughput over the `fit` runs, with the
constants bounded to physical ranges (FIT_BOUNDS); fit_compute.py writes every run's error with the
constants it reached (results/compute_fit.csv) and prints the values frozen below.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Fraction of the dense bf16 peak FlashAttention reaches forward + backward (see the docstring), at the reference
# shape of the curves below: causal, 4,096 tokens, head size 128.
ATTENTION_EFFICIENCY = {("ampere", "best"): 0.58, ("ampere", "fa2"): 0.58,
                        ("hopper", "best"): 0.54, ("hopper", "fa2"): 0.30,
                        ("blackwell", "best"): 0.54, ("blackwell", "fa2"): 0.30}

# How the FlashAttention kernels' rate moves with the sequence length and the head size: measured TFLOP/s, causal,
# bf16/fp16, at 512, 1k, 2k, 4k, 8k, 16k tokens (batch x sequence = 16k tokens, hidden 2048), per head size. A short
# sequence has fewer key blocks per query block to amortise a tile's load and its causal diagonal over, and a small
# head does less tensor-core work per byte of Q, K, V it loads: both run below the reference shape.
# - ampere (FA2 on A100 80 GB, forward + backward): Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png
#   (README "Performance", 4f285b3, July 2023), panels (c) and (d);
# - hopper fa2 (FA2 on H100 80 GB SXM5, forward + backward): assets/flash2_h100_fwd_bwd_benchmark.png, (c) and (d);
# - hopper best (FlashAttention-3 on H100 SXM5, forward only; the backward is taken to follow the forward's shape):
#   assets/flash3_fp16_fwd.png (FA3 beta README), panels (b), (d), (f).
# Blackwell has no published curve here: it takes Hopper's (an assumption, like its fitted constant).
ATTENTION_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
ATTENTION_CURVES = {
    ("ampere", "fa2"): {64: (88, 119, 140, 156, 165, 171), 128: (99, 133, 155, 173, 182, 189)},
    ("hopper", "fa2"): {64: (141, 192, 232, 257, 273, 284), 128: (163, 221, 265, 294, 308, 328)},
    ("hopper", "best"): {64: (197, 265, 371, 420, 460, 473), 128: (292, 423, 521, 579, 602, 616),
                         256: (286, 427, 537, 612, 628, 642)},
}
ATTENTION_CURVES["ampere", "best"] = ATTENTION_CURVES["ampere", "fa2"]
ATTENTION_CURVES["blackwell", "fa2"] = ATTENTION_CURVES["hopper", "fa2"]
ATTENTION_CURVES["blackwell", "best"] = ATTENTION_CURVES["hopper", "best"]
REFERENCE_SEQ, REFERENCE_HEAD = 4096, 128
FIT_BOUNDS = {"sustained_ampere": (0.5, 1.0), "sustained_hopper": (0.5, 1.0), "hbm_efficiency": (0.6, 0.95)}


@dataclass(frozen=True)
class ComputeConstants:
    sustained_ampere: float
    sustained_hopper: float
    hbm_efficiency: float
    kernel_us: float = 4.0  # fixed time per kernel (published, see the docstring)
    wave_allowance: float = 0.25  # average partial-wave loss, in waves, after cuBLAS picks its tile shape
    k_overhead: float = 64.0  # a tile's prologue + epilogue, in steps of its K loop

    def sustained(self, preset: str) -> float:
        """The sustained fraction of MAMF for a GPU preset (Blackwell takes Hopper's)."""
        return self.sustained_ampere if generation(preset) == "ampere" else self.sustained_hopper


# Frozen output of `python -m planner.evidence.fit_compute` (see results/compute_fit.csv).
FITTED = ComputeConstants(sustained_ampere=0.749, sustained_hopper=0.674, hbm_efficiency=0.818)


def generation(preset: str) -> str:
    """GPU generation of a preset name, for the attention-kernel table."""
    if preset.startswith("a100"):
        return "ampere"
    if preset.startswith(("b200", "gb200")):
        return "blackwell"
    return "hopper"


def attention_shape_factor(curve: tuple[str, str] | None, seq, head_dim: int):
    """The FlashAttention rate at (seq, head_dim) over its rate at the reference shape (4,096 tokens, head 128), from
    ATTENTION_CURVES (`curve` = (generation, kernel); None: 1). Linear in log2(seq) between the measured lengths and
    constant beyond them; linear in the head size between the measured sizes (96 halfway between 64 and 128: no
    curve was published for it) and the nearest measured size beyond them. seq may be an array."""
    seq = np.asarray(seq, float)
    if curve is None:
        return np.ones_like(seq)
    table = ATTENTION_CURVES[curve]
    x = np.log2(np.clip(seq, ATTENTION_SEQ[0], ATTENTION_SEQ[-1]))
    points = np.log2(ATTENTION_SEQ)

    def at(d: int, where) -> np.ndarray:
        heads = sorted(table)
        lo = max([h for h in heads if h <= d], default=heads[0])
        hi = min([h for h in heads if h >= d], default=heads[-1])
        w = 0.0 if hi == lo else (d - lo) / (hi - lo)
        return (1 - w) * np.interp(where, points, table[lo]) + w * np.interp(where, points, table[hi])

    return at(head_dim, x) / at(REFERENCE_HEAD, np.log2(REFERENCE_SEQ))
