"""Compute time of one transformer layer, op by op: what a GPU spends on each kernel of a step.

Every kernel of a layer's forward and backward is priced by what bounds it, as Calculon does
(Isaev et al., SC23: each op is FLOPs over a size-dependent matrix rate and bytes over a
size-dependent memory rate), with a per-kernel fixed cost on top:

- GEMMs by their shapes after TP slicing, (M, N, K) = (tokens, output width, reduction), each
  forward GEMM with two backward ones (activation gradient: (M, K, N); weight gradient: (K, N, M),
  the token dimension as reduction). Time = max(F / (R·η), bytes / B) + one kernel's fixed cost,
  where η is the shape efficiency of gemm_efficiency(): the output is cut into TILE x TILE tiles
  spread over the GPU's SMs, a partial last wave wastes part of the GPU (wave quantization,
  NVIDIA's "Matrix Multiplication Background" guide §3; averaged over tile choices as W/(W + w0)),
  and each tile pays a prologue/epilogue worth K0 steps of its K loop. R, the tensor-core rate
  at η = 1, is set so that the model gives the published MAMF (ml-engineering's mamf-finder table)
  at the shape where it was measured, times the sustained-clock factor of calibration.py. Skinny
  GEMMs (small K: attention scores; small N: high TP) fall to the memory roofline, bytes / B.
- Memory-bound kernels (norms, activation functions, residual adds and dropout, rotary embedding,
  softmax and masking of materialised scores, the vocabulary-sized cross-entropy pass by pass as each
  stack runs it (LOSS_PASSES), the optimizer)
  move their bytes at the achievable HBM rate B. Bytes per element of each kernel are those of
  the kernels training stacks run: fused (Megatron's fused LayerNorm, bias-GeLU, bias-dropout-add
  and scale-mask-softmax, TransformerEngine, torch.compile) or eager PyTorch (torchtitan without
  compile: RMSNorm as six elementwise kernels in fp32, rotary embedding in complex fp32, SwiGLU as
  silu and mul), in the tables FUSED and EAGER below.
- Attention core: with FlashAttention one kernel forward and one backward (the backward does 2.5x
  the forward's matmul work, recomputing the scores: Dao 2023, FlashAttention-2 §3.1), causal
  blocks skipped, at the attention efficiency of the GPU generation (calibration.py: the FA2/FA3
  papers' measured TFLOP/s) times the kernel's measured rate at its sequence length and head size over
  the reference shape's (calibration.attention_shape_factor: short sequences and heads of 64 run slower).
  Without it (Megatron 2021-22), QK^T and AV are batched GEMMs with
  K = head size and the a·s² scores go through HBM: softmax and dropout read and write them, and
  their gradients twice over.
- Recompute: full recompute repeats the forward of every layer; selective recompute (Korthikanti
  §5) repeats QK^T, softmax, dropout and AV; torchtitan's per-op selective AC (`op` mode) repeats
  every memory-bound kernel and every second GEMM (it saves the other GEMM outputs and attention).
- Per-kernel cost: every kernel costs calibration's kernel_us of fixed time (launch, ramp-up and
  tail of a kernel the next one cannot overlap), so a layer of many small kernels is slower than
  its FLOPs and bytes say.

Everything is vectorised over numpy arrays of (t, c, b) so the search prices thousands of
configurations at once; `layer_times` returns the forward, backward and recompute seconds of one
layer for one micro-batch on one GPU, with the pieces (GEMM, attention, memory-bound, kernel
overhead) for the breakdown. `head_times` does the same for the embedding, LM head and loss,
`optimizer_time` for the Adam step (Megatron's fused Adam for the published stacks, torch's fused or foreach
AdamW as the labs run it: OPTIMIZER_KERNELS).

All of this is a projection: no number here was measured on a GPU in this repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from common.hardware import PRESETS

from . import fp8_cost
from .calibration import ComputeConstants, attention_shape_factor
from .shapes import Shape

TILE = 128  # output tile edge of cuBLAS/CUTLASS tensor-core kernels (128x128 and 128x256 are the common ones)
DEFAULT_SMS = 132  # a GPU the hardware table has no SM count for is priced as a Hopper


def sm_count(gpu: str) -> int:
    """SMs of a GPU preset (common/hardware.py's data-sheet figure): one wave of output tiles. A GPU the table does
    not know (a test's toy cluster, an unrecognised card) is priced as a Hopper."""
    preset = PRESETS.get(gpu)
    return (preset.sm_count if preset else None) or DEFAULT_SMS


# Where ml-engineering measured each MAMF (M x N x K of its best shape; compute/accelerator/README.md):
# the model's tensor-core rate is the one that gives the measured MAMF at that shape.
MAMF_SHAPE = {("a100", "bf16"): (1024, 10240, 5120), ("h100", "bf16"): (2048, 2048, 13312),
              ("h100", "fp8"): (1024, 9216, 14336), ("h200", "fp8"): (1280, 4096, 12032),
              ("b200", "bf16"): (1792, 16128, 3072), ("b200", "fp8"): (15360, 4096, 3072),
              ("gb200", "bf16"): (4096, 9728, 2048), ("gb200", "fp8"): (19456, 5120, 1536)}
DEFAULT_MAMF_SHAPE = (4096, 4096, 4096)  # a wave-friendly large shape where nothing was published


@dataclass(frozen=True)
class Kernels:
    """What the training stack runs: the flags that change which kernels a layer launches."""

    flash: bool = True  # fused attention (FlashAttention / cuDNN): the a·s² scores never reach HBM
    fused: bool = True  # fused norm / activation / dropout-add kernels (Megatron, TE, torch.compile)
    sequence_parallel: bool = True  # norms and dropout on s/t tokens per TP rank (Korthikanti §4.2.2)
    dropout: bool = False  # dropout masks and kernels (Megatron's GPT default 0.1; LLMs today: none)
    fp8: bool = False  # linear layers in FP8: FP8 GEMMs, and the amax and cast kernels of fp8_cost.py
    rope: bool = False  # rotary position embedding on q and k (Llama); else learned positions (GPT)
    attention: str = "best"  # FlashAttention family: "best" of the GPU's generation, or "fa2" (PyTorch SDPA)
    fp8_backend: str = "te-fused"  # how FP8 linears run (fp8_cost.BACKENDS): TE's fused modules, as Megatron runs
    fp8_recipe: str = "delayed"  # FP8 scaling: delayed (TE's Hopper default), or current / tensorwise
    qkv_fused: bool = True  # q, k, v as one GEMM (Megatron, TE); False: three Linears (torchtitan, the labs' GPT)
    autocast: bool = False  # torch.autocast over fp32 weights: a bf16 copy of every weight cast in each forward,
    #                         an fp32 residual stream, norms in fp32 (the labs' single-GPU runs, DDP)
    fp8_eager: bool = False  # the FP8 layers ran outside the compiled graph (a graph break at their GEMM): eager casts
    optimizer: str = "megatron"  # the Adam step's implementation (OPTIMIZER_KERNELS): megatron, fused, foreach
    host: str = "eager"  # what launches the kernels (host.HOST_US): eager (PyTorch, Megatron), compiled, graphs
    tp_comm_overlap: bool = False  # Megatron-Core's --tp-comm-overlap (TE userbuffers): every TP collective
    #                                pipelined with its GEMM, forward too (costs.py)
    framework: str = "megatron"  # whose host work an eager step issues (floor.py): megatron (Python around fused
    #                              kernels: Megatron, nanotron) or pytorch (parallel-3d, the labs, torchtitan)


# Memory-bound kernels per layer: (kernels, bytes per element moved) forward and backward, for the
# fused and the eager stack. Elements are of the tensor the kernel works on: "h" a hidden-sized
# activation of the norm/residual tokens, "f" the MLP's inner activation, "qk" the q and k heads
# (rotary). Fused: a norm reads its input and writes its output (2 + 2 B); its backward reads x
# and dy and writes dx (6 B) plus a partial weight-gradient reduction (2 B). A residual add with
# dropout reads two inputs and writes one (+1 B mask). GeLU/SwiGLU reads its input(s) and writes
# its output (fwd 4 B per f-element: SwiGLU reads 2F writes F, F = f/1.5 in our GeLU-equivalent
# MLP, the same bytes); its backward reads x and dy and writes dx. Eager: torchtitan's RMSNorm in
# eager mode upcasts to fp32 and runs pow, mean, add+rsqrt, mul, cast and mul (6 kernels, ~24 B
# per element forward, twice that backward); rotary runs in complex fp32 (cast, mul, cast:
# 3 kernels, ~16 B); SwiGLU as silu then mul (2 kernels); residual adds are single kernels either way.
@dataclass(frozen=True)
class ElementwiseOp:
    name: str
    tensor: str  # "h" (norm/residual tokens x hidden), "f" (tokens x ffn/t), "qk" (tokens x (q + k)/t)
    count: int  # how many of them per layer
    fwd_kernels: int
    fwd_bytes: float  # per element
    bwd_kernels: int
    bwd_bytes: float


FUSED = (ElementwiseOp("norm", "h", 2, 1, 4.0, 1, 8.0),
         ElementwiseOp("residual add", "h", 2, 1, 6.0, 0, 0.0),  # its gradient is a pass-through
         ElementwiseOp("activation", "f", 1, 1, 4.0, 1, 6.0),
         ElementwiseOp("rotary", "qk", 1, 1, 4.0, 1, 4.0))
EAGER = (ElementwiseOp("norm", "h", 2, 6, 24.0, 8, 48.0),
         ElementwiseOp("residual add", "h", 2, 1, 6.0, 0, 0.0),
         ElementwiseOp("activation", "f", 1, 2, 10.0, 3, 16.0),
         ElementwiseOp("rotary", "qk", 1, 3, 16.0, 3, 16.0))
# Eager PyTorch under torch.autocast with fp32 weights (the labs' GPT: ATen's LayerNorm and GELU are one kernel
# each, but the residual stream is fp32, the norm runs in fp32 and autocast casts its output to bf16 for each
# Linear that reads it, twice per norm on average with q, k, v as three modules): norm 1 + 2 casts forward
# (4 + 4 B, then 2 x (4 + 2) B), backward the casts' gradients (2 x 6 B), their sum and the norm's
# backward (~18 B); residual add fp32 + bf16 -> fp32 (10 B), its gradient cast to bf16 for the branch (6 B).
EAGER_AUTOCAST = (ElementwiseOp("norm", "h", 2, 3, 20.0, 5, 30.0),
                  ElementwiseOp("residual add", "h", 2, 1, 10.0, 1, 6.0),
                  ElementwiseOp("activation", "f", 1, 1, 4.0, 1, 6.0))
DROPOUT = ElementwiseOp("dropout", "h", 2, 0, 1.0, 1, 5.0)  # fused into the residual add: +1 B mask; bwd dy*mask
# torch.autocast casts each fp32 weight to bf16 in the forward (read 4, write 2 B) and the bf16 weight gradient
# back to fp32 (read 2, write 4 B, 2 B more than a GEMM writing fp32 directly): one kernel per weight matrix.
AUTOCAST_WEIGHTS = ElementwiseOp("autocast weight casts", "w", 1, 1, 6.0, 1, 4.0)


def gemm_efficiency(m, n, k, sms: int, c: ComputeConstants, batch=1, elem_bytes: float = 2.0, tile: int = TILE):
    """η of a (batch x) M x N x K GEMM: wave quantization x K-loop prologue/epilogue, in (0, 1].

    elem_bytes: operand width. A tile's K step covers twice the elements in 1-byte FP8 (the tensor cores'
    K per instruction doubles), so the same prologue/epilogue time is worth twice the K elements: FP8 needs
    a longer K than bf16 to reach the same efficiency.
    """
    m, n, k, batch = (np.asarray(x, float) for x in (m, n, k, batch))
    tiles = batch * np.ceil(m / tile) * np.ceil(n / tile)
    padding = batch * m * n / (tiles * tile * tile)  # tile quantization: partial edge tiles
    waves = tiles / sms
    k0 = c.k_overhead * 2.0 / elem_bytes
    return padding * waves / (waves + c.wave_allowance) * k / (k + k0)


def tensor_rate(preset: str, precision: str, mamf_tflops: float, c: ComputeConstants) -> float:
    """Sustained tensor-core FLOP/s at η = 1: the measured MAMF over η at its shape, times the clock factor."""
    m, n, k = MAMF_SHAPE.get((preset, precision), DEFAULT_MAMF_SHAPE)
    eta = float(gemm_efficiency(m, n, k, sm_count(preset), c, elem_bytes=1.0 if precision == "fp8" else 2.0))
    return mamf_tflops * 1e12 / eta * c.sustained(preset)


@dataclass(frozen=True)
class Rates:
    """What the compute model needs of a GPU: rates in FLOP/s and B/s, SMs, and the constants."""

    matmul: float  # tensor-core rate at η = 1 for the linear layers' precision
    bf16_matmul: float  # attention and the LM head stay in bf16 under FP8
    attention: float  # FlashAttention's achieved FLOP/s (forward-equivalent counting, see attention_times)
    hbm: float  # achievable HBM bytes/s
    sms: int
    consts: ComputeConstants
    tile: int = TILE  # output tile edge (1: a CPU's GEMM, no tiles to quantize)
    attention_curve: tuple[str, str] | None = None  # (generation, kernel) of calibration.ATTENTION_CURVES; None: flat

    @property
    def kernel_s(self) -> float:
        return self.consts.kernel_us * 1e-6


def gemm_time(m, n, k, rate: float, r: Rates, batch=1, in_bytes: float = 2.0, out_bytes: float = 2.0):
    """One GEMM kernel: compute or memory bound, whichever is slower, plus the per-kernel cost (s)."""
    m, n, k, batch = (np.asarray(x, float) for x in (m, n, k, batch))
    flops = 2.0 * batch * m * n * k
    moved = batch * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    compute = flops / (rate * gemm_efficiency(m, n, k, r.sms, r.consts, batch, elem_bytes=in_bytes, tile=r.tile))
    return np.maximum(compute, moved / r.hbm) + r.kernel_s


def linear_times(m, k, n, rate: float, r: Rates, fp8: bool = False):
    """Forward, activation-gradient and weight-gradient GEMMs of a linear layer y[m,n] = x[m,k] W[k,n]."""
    elem = 1.0 if fp8 else 2.0  # FP8 operands (the casts that make them are fp8_cost.py's)
    fwd = gemm_time(m, n, k, rate, r, in_bytes=elem)
    dgrad = gemm_time(m, k, n, rate, r, in_bytes=elem)
    wgrad = gemm_time(k, n, m, rate, r, in_bytes=elem, out_bytes=4.0)  # fp32 weight-gradient accumulation
    return fwd, dgrad + wgrad


class Linear(NamedTuple):
    """One linear layer of a block on one GPU: y[m, n] = x[m, k] W, and where its input x comes from."""

    name: str
    m: np.ndarray
    k: np.ndarray
    n: np.ndarray
    source: str  # "norm", "act" (the MLP activation), "own" or "shared" (q/k/v's second and third use)


def block_linears(shape: Shape, t, c, b, ker: Kernels) -> list[Linear]:
    """The linear layers of one block after TP slicing: q, k, v (one GEMM when fused), o, MLP up and down."""
    t, c, b = (np.asarray(x, float) for x in (t, c, b))
    tokens, h, d = b * shape.seq / c, shape.hidden, shape.head_dim
    fused_qkv = ker.qkv_fused or (ker.fp8 and fp8_cost.backend(ker.fp8_backend).fused_qkv)
    if fused_qkv:
        qkv = [Linear("qkv", tokens, h, (shape.heads + 2 * shape.kv_heads) * d / t, "norm")]
    else:
        qkv = [Linear("q", tokens, h, shape.heads * d / t, "norm"), Linear("k", tokens, h, shape.kv_heads * d / t,
                                                                           "shared"),
               Linear("v", tokens, h, shape.kv_heads * d / t, "shared")]
    return qkv + [Linear("o", tokens, shape.heads * d / t, h, "own"), Linear("up", tokens, h, shape.ffn / t, "norm"),
                  Linear("down", tokens, shape.ffn / t, h, "act")]


def fp8_cast_times(shape: Shape, t, c, b, ker: Kernels, r: Rates) -> tuple:
    """The FP8 amax/cast kernels of one block for one micro-batch (fp8_cost.py): forward (x, W), backward (dy).
    A backend that caches its FP8 weights across micro-batches casts them once per step (fp8_weight_cast_time),
    not here."""
    be = fp8_cost.backend(ker.fp8_backend)
    fwd = bwd = 0.0
    for lin in block_linears(shape, t, c, b, ker):
        w = 0.0 if be.caches_weights else lin.k * lin.n
        ops_f = fp8_cost.LinearOperands(lin.m * lin.k, w, 0.0, lin.source)
        ops_b = fp8_cost.LinearOperands(0.0, 0.0, lin.m * lin.n, lin.source)
        fwd = fwd + _cast_seconds(ops_f, be, ker, r)
        bwd = bwd + _cast_seconds(ops_b, be, ker, r)
    return fwd, bwd


def _cast_seconds(ops: "fp8_cost.LinearOperands", be: "fp8_cost.Fp8Backend", ker: Kernels, r: Rates):
    weight_bytes = 4.0 if ker.autocast else 2.0  # fp32 master weights are cast straight to FP8
    cost = fp8_cost.cast_cost([ops], be, ker.fp8_recipe, ker.fused and not ker.fp8_eager, weight_bytes)
    return cost.bytes / r.hbm + cost.kernels * r.kernel_s


def fp8_weight_cast_time(shape: Shape, t, ker: Kernels, r: Rates):
    """One block's weight casts once per step, for a backend that caches FP8 weights across micro-batches
    (TransformerEngine with Megatron's is_first_microbatch: the first micro-batch casts and keeps both layouts, the
    others and the recompute reuse them); 0 for the others, which cast per micro-batch (fp8_cast_times)."""
    t = np.asarray(t, float)
    if not ker.fp8 or not fp8_cost.backend(ker.fp8_backend).caches_weights:
        return 0.0 * t
    be = fp8_cost.backend(ker.fp8_backend)
    return sum(_cast_seconds(fp8_cost.LinearOperands(0.0, lin.k * lin.n, 0.0, lin.source), be, ker, r)
               for lin in block_linears(shape, t, 1, 1, ker))


# Megatron's FusedScaleMaskSoftmax.forward_torch_softmax (megatron/core/fusions/fused_softmax.py), when the fused
# kernel is not available: the bf16 scores upcast (read 2, write 4 B), scaled (4 + 4), masked (4 + 4), the softmax
# (4 + 4) and the downcast (4 + 2): 36 B in 5 kernels; backward the autograd of each, 40 B in 5 kernels (the fused
# kernel: 4 and 6 B, one kernel each).
SOFTMAX_FALLBACK = ((36.0, 5), (40.0, 5))


def fused_softmax_available(ker: Kernels, b, heads_per_rank, sq, sk):
    """Megatron's fused scale-mask-softmax runs (FusedScaleMaskSoftmax.is_kernel_available, megatron/core/fusions/
    fused_softmax.py) only for fp16/bf16 scores (always here) with 16 < sk <= 4096, sq and sk multiples of 4, and the
    attention batches b x heads-per-rank a multiple of the kernel's batches per block (scaled_masked_softmax.h's
    get_batch_per_block for a causal mask: 128 threads of warps of min(32, next_pow2(sk)) lanes, 2 batches per warp up
    to sk = 128, 1 above: 4 batches per block for sk > 128, 8 up to 128). A stack without fused kernels never has it."""
    b, heads_per_rank, sq, sk = (np.asarray(x, float) for x in (b, heads_per_rank, sq, sk))
    per_block = np.where(sk > 128, 4.0, 8.0)
    ok = (16 < sk) & (sk <= 4096) & (np.mod(sq, 4) == 0) & (np.mod(sk, 4) == 0) & (np.mod(b * heads_per_rank,
                                                                                          per_block) == 0)
    return ok & bool(ker.fused)


def attention_times(shape: Shape, t, c, b, ker: Kernels, r: Rates) -> dict:
    """Attention core (QK^T, softmax, dropout, AV) of one layer, one micro-batch, one GPU: fwd and bwd s."""
    t, c, b = (np.asarray(x, float) for x in (t, c, b))
    s, d = shape.seq, shape.head_dim
    heads = b * shape.heads / t  # (micro-batch x local heads) independent attention problems
    q_len = s / c  # queries on this CP rank; keys: the whole sequence, visited over the ring
    if ker.flash:
        # Causal: FlashAttention skips the masked half. Backward: 2.5x the forward's matmuls. The kernel's rate at
        # this shape: a ring step (CP) attends a chunk of s/c queries to s/c keys (calibration.attention_shape_factor).
        rate = r.attention * attention_shape_factor(r.attention_curve, q_len, d)
        fwd_flops = 4.0 * heads * q_len * s * d * 0.5
        fwd = fwd_flops / rate + r.kernel_s * c
        bwd = 2.5 * fwd_flops / rate + r.kernel_s * c * 2  # the backward kernel and its dO·O preprocessing
        return {"fwd": fwd, "bwd": bwd, "scores_fwd": 0.0 * fwd, "scores_bwd": 0.0 * fwd}
    # Materialised scores (Megatron 2021-22): QK^T and AV as batched GEMMs, the full s x s (no skipping).
    qk = gemm_time(q_len, s, d, r.bf16_matmul, r, heads)
    av = gemm_time(q_len, d, s, r.bf16_matmul, r, heads)
    qk_bwd = gemm_time(q_len, d, s, r.bf16_matmul, r, heads) + gemm_time(s, d, q_len, r.bf16_matmul, r, heads)
    av_bwd = gemm_time(q_len, s, d, r.bf16_matmul, r, heads) + gemm_time(s, d, q_len, r.bf16_matmul, r, heads)
    scores = heads * q_len * s  # elements of the score matrix
    # Fused scale-mask-softmax reads and writes the scores (2 + 2 B); dropout reads them and writes the
    # output and a 1-byte mask. Backward: dropout reads dy and the mask, writes dx (5 B); softmax
    # reads y and dy, writes dx (6 B). Where Megatron's fused kernel is not available (fused_softmax_available) its
    # fallback runs in fp32, op by op (SOFTMAX_FALLBACK).
    fused = fused_softmax_available(ker, b, shape.heads / t, q_len, s)
    (fb, fk), (bb, bk) = SOFTMAX_FALLBACK
    sm_fwd = np.where(fused, 4.0 * scores / r.hbm + r.kernel_s, fb * scores / r.hbm + fk * r.kernel_s)
    sm_bwd = np.where(fused, 6.0 * scores / r.hbm + r.kernel_s, bb * scores / r.hbm + bk * r.kernel_s)
    do_fwd = np.where(ker.dropout, 5.0 * scores / r.hbm + r.kernel_s, 0.0)
    do_bwd = np.where(ker.dropout, 5.0 * scores / r.hbm + r.kernel_s, 0.0)
    return {"fwd": qk + av + sm_fwd + do_fwd, "bwd": qk_bwd + av_bwd + sm_bwd + do_bwd,
            "scores_fwd": sm_fwd + do_fwd, "scores_bwd": sm_bwd + do_bwd}


def elementwise_times(shape: Shape, t, c, b, ker: Kernels, r: Rates) -> tuple:
    """Memory-bound kernels of one layer (norms, residuals, activation, rotary, dropout, FP8 casts): fwd, bwd s."""
    t, c, b = (np.asarray(x, float) for x in (t, c, b))
    tokens = b * shape.seq / c
    # Without sequence parallelism every TP rank repeats the norms and residual work on all tokens.
    norm_tokens = np.where(ker.sequence_parallel & (t > 1), tokens / t, tokens)
    elements = {"h": norm_tokens * shape.hidden, "f": tokens * shape.ffn / t,
                "qk": tokens * (shape.heads + shape.kv_heads) * shape.head_dim / t,
                "w": shape.layer_matmul_params / t}
    ops = [op for op in elementwise_ops(ker) if op.name != "rotary" or ker.rope]
    if ker.dropout:
        ops.append(DROPOUT)
    if ker.autocast and not ker.fp8:  # FP8 linears cast their fp32 weights themselves (fp8_cost.py)
        ops.append(AUTOCAST_WEIGHTS)
    weight_matrices = 6 if not ker.qkv_fused else 4
    fwd = bwd = 0.0
    for op in ops:
        n = elements[op.tensor] * op.count
        launches = weight_matrices if op.tensor == "w" else op.count
        fwd = fwd + n * op.fwd_bytes / r.hbm + launches * op.fwd_kernels * r.kernel_s
        bwd = bwd + n * op.bwd_bytes / r.hbm + launches * op.bwd_kernels * r.kernel_s
    if ker.fp8:
        cast_fwd, cast_bwd = fp8_cast_times(shape, t, c, b, ker, r)
        fwd, bwd = fwd + cast_fwd, bwd + cast_bwd
    return fwd, bwd


def elementwise_ops(ker: Kernels) -> tuple:
    """The memory-bound kernel table of a stack: fused; eager Llama (torchtitan's composite RMSNorm, SwiGLU and
    rotary); eager GPT under autocast; eager GPT in plain bf16 (ATen's LayerNorm and GELU are one kernel each
    and move what fused ones do)."""
    if ker.fused:
        return FUSED
    if ker.rope:
        return EAGER
    return EAGER_AUTOCAST if ker.autocast else FUSED


def layer_times(shape: Shape, t, c, b, ker: Kernels, r: Rates) -> dict:
    """Seconds of one layer for one micro-batch on one GPU: forward, backward and the recompute of each mode.

    Keys: fwd, bwd (without recompute; fwd holds the cached FP8 weight casts of a step's first micro-batch),
    fp8_weights_per_step (those casts: a step pays them once, costs.py), gemm_fwd and gemm_bwd (the linear layers' GEMMs; TP's backward
    collectives overlap the weight-gradient half of gemm_bwd), attn_fwd (the attention core forward, CP's ring hides
    behind it),
    recompute_full, recompute_selective (Korthikanti's attention core), recompute_op (torchtitan's
    per-op selective AC: every memory-bound kernel and every second GEMM).
    """
    t, c, b = (np.asarray(x, float) for x in (t, c, b))
    gemm_fwd = gemm_bwd = 0.0
    for lin in block_linears(shape, t, c, b, ker):
        fwd_s, bwd_s = linear_times(lin.m, lin.k, lin.n, r.matmul, r, fp8=ker.fp8)
        gemm_fwd, gemm_bwd = gemm_fwd + fwd_s, gemm_bwd + bwd_s
    attn = attention_times(shape, t, c, b, ker, r)
    ew_fwd, ew_bwd = elementwise_times(shape, t, c, b, ker, r)
    weights = fp8_weight_cast_time(shape, t, ker, r)  # cached FP8 weights: cast by the first micro-batch only
    fwd = gemm_fwd + attn["fwd"] + ew_fwd + weights
    bwd = gemm_bwd + attn["bwd"] + ew_bwd
    return {"fwd": fwd, "bwd": bwd, "gemm_fwd": gemm_fwd, "gemm_bwd": gemm_bwd, "attn_fwd": attn["fwd"],
            "elementwise_fwd": ew_fwd, "fp8_weights_per_step": weights,
            "recompute_full": fwd - weights, "recompute_selective": attn["fwd"],
            "recompute_op": ew_fwd + 0.5 * gemm_fwd}


def head_times(shape: Shape, t, c, b, ker: Kernels, r: Rates) -> dict:
    """Embedding (first stage) and LM head + cross-entropy (last stage), fwd + bwd seconds per micro-batch."""
    t, c, b = (np.asarray(x, float) for x in (t, c, b))
    tokens = b * shape.seq / c
    h, vocab = shape.hidden, shape.vocab / t
    # Embedding: a gather of the rows (write 2 B per element) and its gradient scattered into an fp32 table.
    embed = tokens * h * 2.0 / r.hbm + tokens * h * 8.0 / r.hbm + 2 * r.kernel_s
    # LM head in bf16 (kept out of FP8 by TransformerEngine recipes); the loss over the vocabulary as the stack runs
    # it (loss_passes): every pass reads or writes all b·s·V/t logits, in fp32.
    fwd, bwd = linear_times(tokens, h, vocab, r.bf16_matmul, r)
    loss_bytes, loss_kernels = loss_passes(ker)
    loss = tokens * vocab * loss_bytes / r.hbm + loss_kernels * r.kernel_s
    return {"embedding": embed, "head": fwd + bwd + loss, "head_fwd": fwd}


# The cross-entropy over the vocabulary, pass by pass (bytes per logit, kernels), as each stack runs it on the LM
# head's bf16 logits. A small model with a large vocabulary spends a large share of its step here: the logits are
# V/h times the size of a hidden activation (64x at hidden 2048, vocab 131,072).
# - "vocab-parallel": Megatron's VocabParallelCrossEntropy (megatron/core/tensor_parallel/cross_entropy.py) and
#   nanotron's _ShardedCrossEntropy (parallel/tensor_parallel/functional.py), op by op in fp32: forward the upcast
#   (read 2, write 4 B), the row max (4), subtract it in place (4 + 4), exp in place (4 + 4), the row sum (4) and the
#   division that leaves the softmax for the backward (4 + 4): 38 B in 6 kernels; backward the softmax times the
#   loss gradient in place (4 + 4) and the downcast the LM head's GEMMs read (4 + 2): 14 B in 3 kernels, plus the
#   target gather and scatter (2 kernels, a few elements each).
# - "eager": PyTorch's F.cross_entropy on logits upcast to fp32 (torchtitan, the labs): the upcast (2 + 4), the
#   log-softmax (a max pass and a sum pass over its input, then its output: 4 + 4 + 4) and the NLL gather; backward
#   the NLL gradient written densely (4), the log-softmax backward (reads it and the output, writes 4 + 4 + 4) and the
#   downcast (4 + 2): 40 B in 8 kernels.
# - "compiled": the loss inside a torch.compile graph: one reduction over the bf16 logits (2 B, the upcast in
#   registers) forward, one pass reading them and writing the bf16 gradient (2 + 2) backward, with the logsumexp it
#   kept: 6 B in 2 kernels.
LOSS_PASSES = {"vocab-parallel": (52.0, 11), "eager": (40.0, 8), "compiled": (6.0, 2)}


def loss_implementation(ker: Kernels) -> str:
    """Which cross-entropy a stack runs: a stack of fused kernels launched from eager Python (Megatron, nanotron,
    TransformerEngine) runs the vocab-parallel one; eager PyTorch and torch.compile of the blocks only (torchtitan
    compiles each block, not the loss) PyTorch's; a whole compiled model (host "graphs" replays it) the compiled one."""
    if ker.host == "graphs":
        return "compiled"
    if ker.fused and ker.host == "eager":
        return "vocab-parallel"
    return "eager"


def loss_passes(ker: Kernels) -> tuple[float, int]:
    """(bytes per logit, kernels) of the stack's cross-entropy, forward and backward (LOSS_PASSES)."""
    return LOSS_PASSES[loss_implementation(ker)]


# How many bytes per parameter an Adam step moves, by implementation (g: gradient bytes); the step's kernels.
# "megatron": Megatron's fused Adam, the clip's scale folded into its read of the gradients (which the norm
#   reads once more); with bf16_copy=False the fp32 weights need no bf16 copy, and torch.nn.utils.
#   clip_grad_norm_ reads the gradients for the norm and rewrites them scaled (the published runs).
# "fused": torch.optim.AdamW(fused=True) with the clip factor passed as its grad_scale (fp8-train on CUDA,
#   trainer.py): one kernel reads master, m, v and g and writes master, m, v (24 + g), the norm reads g once.
# "foreach": torch.optim.AdamW's default on CUDA tensors (fsdp-scaling, parallel-3d: no clipping), eight
#   foreach passes over fp32 tensors (torch/optim/adam.py _multi_tensor_adam): decoupled weight decay
#   p *= 1 - lr*wd (8), m.lerp_(g) (8 + g), v *= beta2 (8), v.addcmul_(g, g) (8 + g), s = sqrt(v) (8),
#   s /= bias correction (8), s += eps (8), p.addcdiv_(m, s) (16): 72 + 2g.
OPTIMIZER_KERNELS = {"megatron": 4, "fused": 2, "foreach": 8}


def optimizer_bytes(impl: str, grad_bytes: float, bf16_copy: bool = True) -> float:
    """Bytes per local parameter of one Adam step as `impl` runs it (table above)."""
    if impl == "fused":
        return 24.0 + 2 * grad_bytes
    if impl == "foreach":
        return 72.0 + 2 * grad_bytes
    return 26.0 + 2 * grad_bytes if bf16_copy else 24.0 + 4 * grad_bytes


def optimizer_time(params, grad_bytes: float, r: Rates, bf16_copy: bool = True, impl: str = "megatron"):
    """Adam over `params` local parameters, as `impl` runs it (optimizer_bytes), at the HBM rate.

    Megatron's: read fp32 master, m, v and the gradient; write master, m, v and the bf16 weights (26 + g
    bytes); the gradient-norm clip reads the gradients once more (Megatron folds the clip's scale into the
    optimizer's read). bf16_copy=False: fp32 weights and no bf16 copy (torch.autocast, FSDP2's sharded fp32
    parameters), 24 + g bytes, and the clip of torch.nn.utils.clip_grad_norm_ reads the gradients for the
    norm and rewrites them scaled (3g)."""
    params = np.asarray(params, float)
    return params * optimizer_bytes(impl, grad_bytes, bf16_copy) / r.hbm + OPTIMIZER_KERNELS[impl] * r.kernel_s
