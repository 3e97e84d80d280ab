"""The record of a published run: the configuration its authors ran and the software stack they ran it with.

A `Case` pins what a paper or benchmark states (model shape, GPU, GPU count, global batch, the degrees, micro-batch,
recompute) and its `Software`: the Workload flags that are not the model or the batch (gradient width, sequence
parallelism, which attention and kernels, what overlaps, what launches the kernels). The planner fills in only what
the source leaves unstated. published.py and published_small.py hold the rows; this module holds the record and the
stacks several rows share, so both import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.model.shapes import Shape
from planner.search.search import Pins


@dataclass(frozen=True)
class Software:
    """How a published run was executed: the Workload flags that are not the model or the batch."""

    grad_bytes: float = 2.0
    sequence_parallel: bool = True
    flash_attention: bool = True
    dropout: bool = False
    fused_kernels: bool = True
    rope: bool = False
    attention_kernel: str = "best"
    tp_overlap: bool = True
    dp_overlap: bool = True
    tp_layout_copies: bool = False
    fsdp_copies: bool = False
    fp8_backend: str = "te-fused"
    fp8_recipe: str = "delayed"
    qkv_fused: bool = True
    host: str = "eager"  # what launches the kernels (host.py): eager Python (Megatron, DeepSpeed), compiled, graphs
    tp_comm_overlap: bool = False  # Megatron-Core's --tp-comm-overlap (costs.py)


# Megatron-LM 2021-22 and DeepSpeed-Megatron: fp32 gradients, dropout, no FlashAttention, no overlap.
MEGATRON_2021 = Software(grad_bytes=4.0, sequence_parallel=False, flash_attention=False, dropout=True,
                         tp_overlap=False, dp_overlap=False)
# Megatron-LM of 2022 (Korthikanti): the same, but the backward TP collective (all-reduce, or
# reduce-scatter with SP) runs asynchronously under the weight-gradient GEMM
# (LinearWithGradAccumulationAndAsyncCommunication, Megatron-LM 3.0).
MEGATRON_2022 = replace(MEGATRON_2021, tp_overlap=True)
# torchtitan (FSDP2 + TP, Llama): fp32 gradient reduction, SDPA's FlashAttention-2, vanilla TP.
TORCHTITAN = Software(grad_bytes=4.0, rope=True, attention_kernel="fa2", tp_overlap=False, tp_layout_copies=True,
                      fsdp_copies=True, qkv_fused=False, host="compiled")
# Llama 3 (pre-trained in the first half of 2024, before FlashAttention-3): FlashAttention-2 kernels.
LLAMA3_STACK = Software(rope=True, attention_kernel="fa2")


@dataclass(frozen=True)
class Case:
    source: str
    name: str
    shape: Shape
    gpu: str
    gpus: int
    batch: int
    pins: Pins
    metric: str  # "hardware_tflops_per_gpu" | "model_tflops_per_gpu" | "tokens_per_s_per_gpu" | "step_s"
    published: float
    role: str  # "fit" | "held-out"
    software: Software = MEGATRON_2021
    memory_gb: float | None = None
    inter_node_gbps: float | None = None  # network per GPU when it is not the preset's
    gpus_per_node: int | None = None  # NVLink domain when it is not the preset's
    group: str | None = None  # rows a source measured as alternatives for one job: ranked against each other


def gpt(layers: int, hidden: int, heads: int, seq: int = 2048, vocab: int = 51200) -> Shape:
    return Shape(layers, hidden, heads, heads, vocab, seq, 4 * hidden)


def llama(layers: int, hidden: int, heads: int, kv: int, ffn: int, seq: int = 8192) -> Shape:
    return Shape(layers, hidden, heads, kv, 128256, seq, ffn * 3 // 2)  # SwiGLU F == GELU MLP of 1.5·F


