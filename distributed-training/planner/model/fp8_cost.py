"""What FP8 linear layers cost besides their GEMMs: the amax, scale and cast kernels each backend runs.

An FP8 linear layer y[M,N] = x[M,K] W[N,K]^T runs three FP8 GEMMs (forward, activation gradient,
weight gradient), and on Hopper cuBLASLt takes the first operand row-major and the second column-
major only (fp8-anchors.md section 3), so each of x, W and the output gradient dy is needed in FP8
twice, once in each layout. Turning a bf16 (or fp32 master) tensor into those copies is memory-bound
work over every element of the operand, priced here at the achievable HBM rate (compute.py), plus a
fixed cost per kernel:

- scaling: delayed scaling (TE DelayedScaling, the lab's native layer) casts with a scale known from
  earlier steps and takes the amax inside the cast kernel; current/tensorwise scaling (TE
  Float8CurrentScaling, torchao tensorwise) must reduce the tensor's amax first, one more read of it
  before the cast can start (TE's GEMM profiling: ~17% of current-scaling time is quantization);
- layouts: a backend that keeps FP8 copies for the backward writes both layouts in one pass over the
  source (TE's cast-transpose kernels; the native layer casts x and W straight into the layouts its
  backward reads), where torchao saves the high-precision tensors and casts them again in the
  backward (one more read per operand, and with tensorwise scaling one more amax);
- fused or eager: TE's cast kernels are fused CUDA kernels whatever the rest of the model does;
  torchao's and the native layer's casts are PyTorch ops, fused by Inductor under torch.compile
  and otherwise run op by op (upcast to fp32, scale, clamp, cast: four kernels through fp32
  temporaries, then a separate transposed copy), the "eager mode is even worse" of the anchors;
- fused modules: TE's LayerNormLinear and LayerNormMLP (backend `te-fused`) write the norm's and
  the activation's output directly in FP8 (the next GEMM's input costs no cast pass of its own, and
  the bf16 copy is never written), and run q, k and v as one GEMM on one cast input; separate
  te.Linear modules (backend `te`) cast the same normed input once for each of q, k and v, as
  torchao and the native layer do in eager mode (under compile, AOTAutograd's common-subexpression
  pass merges the three identical casts into one).

Weights at scale: a step of m micro-batches multiplies the weights' casts by m unless the backend keeps them.
TransformerEngine does: its modules take is_first_microbatch (Megatron-Core passes it), cast the weights to FP8 in
both layouts on the first micro-batch of a step and reuse them for the others and for the recompute (TE's
te.Linear documentation: "cache the weight FP8 copies"), so they cost once per step (compute.fp8_weight_cast_time);
torchao and the native layer cast them at every forward. At one micro-batch per step (this repository's GPU rows)
the two are the same; on a pipeline of 16-32 micro-batches the cached weights are a few percent of the step.

What stays in bf16 is priced by compute.py as in a bf16 run: attention, norms, activations, the LM head
and the optimizer. FSDP's all-gather of FP8 weights (torchao's enable_fsdp_float8_all_gather) halves
the bytes of the weight gathers (costs.py); the other backends gather bf16 weights.

Every number here is a projection; the bytes per element are counted from the kernels listed above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

FP8_BYTES = 1.0
# Eager cast of a bf16 tensor (beyond reading it): write an fp32 copy, scale it (read + write fp32), clamp it
# (read + write), cast it (read fp32, write 1 byte): 4 + 8 + 8 + 4 + 1 bytes per element in four kernels.
EAGER_CAST_BYTES = 4.0 + 8.0 + 8.0 + 4.0 + FP8_BYTES
EAGER_CAST_KERNELS = 4
TRANSPOSE_BYTES = 2 * FP8_BYTES  # .t().contiguous() of an FP8 copy: read and write one byte per element


@dataclass(frozen=True)
class Fp8Backend:
    """What a backend does around its FP8 GEMMs (see the module docstring)."""

    name: str
    fused_always: bool  # its cast kernels are fused CUDA kernels (TE); else fused only under torch.compile
    saves_fp8: bool  # keeps both FP8 layouts from the forward for the backward; else re-casts there
    fused_norm: bool  # the norm and the MLP activation emit the FP8 input of the next GEMM (TE fused modules)
    fused_qkv: bool  # q, k and v in one GEMM on one cast input
    fp8_all_gather: bool  # FSDP can all-gather its weights in FP8
    caches_weights: bool = False  # casts its weights once per step and reuses them for every micro-batch


# One record per priced name of common/fp8_names.py (PRICED: the backends whose GEMMs run in FP8; the
# emulator's fp32 GEMMs are not priced); fp8-train's run-time records (fp8-train/precision/backends.py) use the
# same names.
BACKENDS = {b.name: b for b in (
    Fp8Backend("te", fused_always=True, saves_fp8=True, fused_norm=False, fused_qkv=False,
               fp8_all_gather=False, caches_weights=True),
    Fp8Backend("te-fused", fused_always=True, saves_fp8=True, fused_norm=True, fused_qkv=True,
               fp8_all_gather=False, caches_weights=True),
    Fp8Backend("torchao", fused_always=False, saves_fp8=False, fused_norm=False, fused_qkv=False,
               fp8_all_gather=True),
    Fp8Backend("native", fused_always=False, saves_fp8=True, fused_norm=False, fused_qkv=False,
               fp8_all_gather=False),
)}
CURRENT = ("current", "tensorwise", "rowwise")  # recipes that reduce each tensor's amax before casting it


def backend(name: str) -> Fp8Backend:
    if name not in BACKENDS:
        raise ValueError(f"unknown FP8 backend {name!r}; valid: {', '.join(BACKENDS)}")
    return BACKENDS[name]


class Passes(NamedTuple):
    """HBM bytes per element of one operand and kernels, to produce the FP8 copies its two GEMMs read."""

    bytes: float
    kernels: float


def quantize_passes(be: Fp8Backend, recipe: str, compiled: bool, src_bytes: float) -> Passes:
    """Both FP8 layouts of one operand whose high-precision copy holds src_bytes per element."""
    amax_reads = 1 if recipe in CURRENT else 0
    if be.fused_always or compiled:
        if be.saves_fp8:  # one cast-transpose pass: read once, write both layouts
            return Passes(amax_reads * src_bytes + src_bytes + 2 * FP8_BYTES, amax_reads + 1)
        # forward cast and backward re-cast, each from the saved high-precision tensor (and its amax)
        return Passes(2 * (amax_reads * src_bytes + src_bytes + FP8_BYTES), 2 * (amax_reads + 1))
    # eager: amax (aminmax) + the four-kernel cast, then a transposed copy (or a second cast)
    cast = Passes(src_bytes + src_bytes + EAGER_CAST_BYTES, 1 + EAGER_CAST_KERNELS)
    if be.saves_fp8:
        return Passes(cast.bytes + TRANSPOSE_BYTES, cast.kernels + 1)
    return Passes(2 * cast.bytes, 2 * cast.kernels)


class LinearOperands(NamedTuple):
    """One FP8 linear layer on one GPU: elements of its input x (M x K), weight (N x K) and output gradient
    dy (M x N), and where x comes from: "own", "shared" (the second or third use of one normed input, q/k/v
    as separate modules), "norm" or "act" (the output of the norm or of the MLP activation)."""

    x: float
    w: float
    dy: float
    source: str = "own"


def cast_cost(linears: list[LinearOperands], be: Fp8Backend, recipe: str, compiled: bool, weight_bytes: float,
              act_bytes: float = 2.0) -> Passes:
    """Bytes and kernels of every FP8 cast of one transformer layer for one micro-batch (module docstring)."""
    merged = be.fused_qkv or (compiled and not be.fused_always)  # one cast of the shared q/k/v input
    in_producer = be.fused_norm and recipe not in CURRENT  # the norm / activation kernel writes the FP8 copies
    act = quantize_passes(be, recipe, compiled, act_bytes)
    wgt = quantize_passes(be, recipe, compiled, weight_bytes)
    total_bytes = kernels = 0.0
    for op in linears:
        skip_x = (op.source == "shared" and merged) or (op.source in ("norm", "act") and in_producer)
        for elements, passes in (((0.0 if skip_x else op.x), act), (op.w, wgt), (op.dy, act)):
            present = np.asarray(elements, float) > 0  # arrays over configurations, or numbers
            total_bytes = total_bytes + elements * passes.bytes
            kernels = kernels + np.where(present, passes.kernels, 0.0)
    return Passes(total_bytes, kernels)
