"""Published figures the report sets beside this lab's numbers, each with its source.

The report prints them in tables, never typed into its prose (../shared/reference/fsdp-tp-anchors.md
collects them). Anchors are other people's measurements on other machines: a row compares a model or a
projection with them, it does not make them ours.
"""

from __future__ import annotations

from typing import NamedTuple


class ZeroFigure1(NamedTuple):
    """Per-device model states, GB, of the ZeRO paper's worked example (7.5B parameters, N_d = 64, K = 12)."""
    baseline: float
    zero1: float
    zero2: float
    zero3: float


ZERO_FIGURE_1 = ZeroFigure1(120.0, 31.4, 16.6, 1.9)
ZERO_SOURCE = "Rajbhandari et al., ZeRO (SC20, arXiv 1910.02054), Figure 1"


class Throughput(NamedTuple):
    """Tokens/s per GPU of one published training run at a GPU count."""
    model: str  # the projection's model name (project.PROJECTED)
    gpus: int
    tokens_per_s_per_gpu: float
    setting: str
    source: str


TORCHTITAN = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
# Llama 3.1 8B, FSDP (1-D), bf16, local batch 2 x 8192 tokens, H100s: the weak-scaling anchor of the projection.
WEAK_SCALING_8B = (Throughput("8b", 8, 5762.0, "Llama 3.1 8B, FSDP, H100", TORCHTITAN),
                   Throughput("8b", 128, 5605.0, "Llama 3.1 8B, FSDP, H100", TORCHTITAN))
