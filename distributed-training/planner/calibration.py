"""The compute model's constants: which are measured facts, which are fitted, and the fitted values.

compute.py prices every kernel with a handful of constants. Most are published measurements:

- the large-GEMM rate per GPU and precision: ml-engineering's MAMF table (common/hardware.py);
- FlashAttention's achieved rate per GPU generation and kernel family (ATTENTION_EFFICIENCY):
  FlashAttention-2 reaches 50-73% of the A100's peak forward and less backward (Dao 2023, arXiv
  2307.08691, abstract and §4.1: ~180 TFLOP/s forward+backward at head size 128, causal, 2K-8K
  tokens), i.e. 0.58; on H100 the same FA2 kernel reaches 329 TFLOP/s forward where cuDNN's and
  FlashAttention-3's reach 631 (pytorch/pytorch#142132, batch 1, 24 heads, 4608 tokens, head 128),
  and FA3's backward is 1.5-1.75x FA2's (Shah et al. 2024, arXiv 2407.08608 §4): 0.30 of peak for
  FA2 and 0.54 for FA3/cuDNN, forward and backward together (1 + 2.5 forward-equivalents);
- the GEMM shape model's two structural constants: TILE (compute.py) and the average wave
  quantization allowance, and the tile prologue/epilogue K0, which make a 1-GFLOP GEMM run at
  ~60% and a 16-GFLOP one at ~90% of the large-GEMM rate on an A100, as Calculon's A100 system
  file tabulates (calculon-ai/calculon systems/a100_80g.json: 0.6 / 0.9 / 0.95 at 1 / 16 / 128 GFLOP).

Three are fitted, once, by fit_compute.py on the published runs marked `fit` in published.py
(SC21 Table 1 on A100; torchtitan's compiled Llama 3 8B and Llama 3 405B on 8,192 GPUs on H100),
and frozen here with the fit's provenance; every other published run is held out and reported
separately (PARALLELISM_GUIDE.md section 5):

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

# Fraction of the dense bf16 peak FlashAttention reaches forward + backward (see the docstring).
ATTENTION_EFFICIENCY = {("ampere", "best"): 0.58, ("ampere", "fa2"): 0.58,
                        ("hopper", "best"): 0.54, ("hopper", "fa2"): 0.30,
                        ("blackwell", "best"): 0.54, ("blackwell", "fa2"): 0.30}
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


# Frozen output of `python -m planner.fit_compute` (see results/compute_fit.csv).
FITTED = ComputeConstants(sustained_ampere=0.749, sustained_hopper=0.674, hbm_efficiency=0.818)


def generation(preset: str) -> str:
    """GPU generation of a preset name, for the attention-kernel table."""
    if preset.startswith("a100"):
        return "ampere"
    if preset.startswith(("b200", "gb200")):
        return "blackwell"
    return "hopper"
