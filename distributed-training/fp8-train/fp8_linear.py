"""The lab's own FP8 linear layer: per-tensor scaled E4M3/E5M2 GEMMs with delayed scaling.

This is the part of the lab that shows what TransformerEngine's te.Linear does, in ~100 lines:

    forward   y  = x W^T        x, W quantized to E4M3 with their per-tensor scales
    backward  dx = dy W         dy quantized to E5M2 (gradients need range more than precision)
              dW = dy^T x       reusing the FP8 copies of x and W saved by the forward

Three GEMMs, each with FP8 operands and a higher-precision output. Two engines share all the
scaling and casting code and differ only in the multiply:
    native    torch._scaled_mm(a8, b8, scale_a, scale_b) (through its public form
              torch.nn.functional.scaled_mm where it exists): the FP8 tensor-core GEMM on SM 8.9+
              GPUs, a oneDNN kernel on the CPU. Its scales are the *dequantization* factors
              1/scale. On CUDA, cuBLASLt wants `a` row-major and `b` column-major, and every
              dimension a multiple of 16 (fp8-anchors.md section 3).
    emulated  the same FP8 operands upcast and multiplied in fp32, then scaled: the values an FP8
              GEMM with fp32 accumulation sees, on any hardware (torchao's `emulate=True` does the
              same). It keeps fp32 copies of the FP8 operands for backward: FP8 numerics, fp32
              activation memory. A NaN anywhere in an operand makes the whole output NaN (real
              hardware: only the rows/columns it touches), which is what NaN detection needs.

Scales follow TransformerEngine's delayed scaling (scaling.py): the forward reads the scale kept
from earlier steps and stages this step's amax in row 0 of the history; `update_scales` turns the
staged amaxes into next step's scales after backward (amax all-reduced over ranks first, as TE's
reduce_amax does). `scaling="current"` instead scales each tensor by its own amax
(TE Float8CurrentScaling, torchao tensorwise). Bias, if any, is added in high precision.

The module shares its weight and bias Parameters with the nn.Linear it replaces, so parameter
names, initial values and optimizer state are the same as in every other precision mode; its
scaling state lives in buffers and so travels with model.state_dict() (checkpoints, rollback).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import scaling
from formats import E4M3, E5M2, amax, current_scale, fp8_fractions, quantize, widen

ROLES = ("input", "weight", "grad_output")


@dataclass(frozen=True)
class Fp8Options:
    engine: str  # "native" | "emulated"
    current: bool  # current scaling instead of delayed
    margin: int
    record: bool  # stage amaxes in the history (training steps only)
    stats: bool  # also count underflow/saturation (costs a few passes; every N steps)
    out_dtype: torch.dtype


def scaled_mm(a8: torch.Tensor, b8: torch.Tensor, inv_a: torch.Tensor, inv_b: torch.Tensor, out_dtype: torch.dtype,
              fast_accum: bool = False) -> torch.Tensor:
    """Tensorwise-scaled FP8 GEMM: (a8 * inv_a) @ (b8 * inv_b), a8 (M,K), b8 (K,N) -> (M,N) in out_dtype.

    torch.nn.functional.scaled_mm is the public form of torch._scaled_mm (torch >= 2.10); both take
    the *dequantization* scales. Prefer it: on the CPU wheel the private op falls back to a
    reference kernel that measured ~1000x slower here (bench.py records both), while the public
    one reaches oneDNN. On CUDA both are the same cuBLASLt FP8 GEMM.
    """
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        tw = F.ScalingType.TensorWise
        return F.scaled_mm(a8, b8, inv_a.reshape(1), tw, inv_b.reshape(1), tw, output_dtype=out_dtype,
                           use_fast_accum=fast_accum and a8.is_cuda)
    kw = {"use_fast_accum": fast_accum} if a8.is_cuda else {}
    return torch._scaled_mm(a8, b8, scale_a=inv_a, scale_b=inv_b, out_dtype=out_dtype, **kw)


def _gemm(a8: torch.Tensor, b8: torch.Tensor, inv_a: torch.Tensor, inv_b: torch.Tensor, engine: str,
          out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
    """(a8 / scale_a) @ (b8 / scale_b) with fp32 accumulation; a8 (M,K), b8 (K,N) -> (M,N)."""
    if engine == "native":
        return scaled_mm(a8, b8, inv_a, inv_b, out_dtype, fast_accum)
    with torch.autocast(a8.device.type, enabled=False):  # the widened FP8 values, multiplied in fp32
        return (a8 @ b8).mul_(inv_a * inv_b).to(out_dtype)


def _col_major(t: torch.Tensor, opts: Fp8Options) -> torch.Tensor:
    """The same matrix laid out column-major, which cuBLASLt wants for `b` (emulated: no copy)."""
    return t.t().contiguous().t() if opts.engine == "native" else t


def _row_major(t: torch.Tensor, opts: Fp8Options) -> torch.Tensor:
    return t.contiguous() if opts.engine == "native" else t


def _nan_guard(a: torch.Tensor) -> torch.Tensor:
    """1, or NaN when the tensor held a NaN (its amax is NaN): see formats.widen."""
    return torch.where(torch.isnan(a), torch.full_like(a, float("nan")), torch.ones_like(a))


class _Fp8LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, hist_f, scale_f, hist_b, scale_b, last, frac, opts: Fp8Options):
        # x (M, K), w (N, K) -> y (M, N)
        a_x, a_w = amax(x), amax(w)
        if opts.current:
            s_x, s_w = current_scale(a_x, E4M3, opts.margin), current_scale(a_w, E4M3, opts.margin)
        else:
            s_x, s_w = scale_f[0].clone(), scale_f[1].clone()
        x8, w8 = quantize(x, s_x, E4M3), quantize(w, s_w, E4M3)
        if opts.record:
            hist_f[0].copy_(torch.stack([a_x, a_w]))
        last[:2].copy_(torch.stack([torch.stack([a_x, s_x]), torch.stack([a_w, s_w])]))
        if opts.stats:
            frac[0].copy_(fp8_fractions(x, x8, s_x, E4M3))
            frac[1].copy_(fp8_fractions(w, w8, s_w, E4M3))
        inv_x, inv_w = s_x.reciprocal(), s_w.reciprocal()  # dequantization factors
        if opts.engine == "emulated":
            # Widen once and keep the fp32 copies for backward: the values are exactly the FP8 ones
            # up to a power of two folded into the dequantization factor (so products and their fp32
            # accumulation are exact too). FP8 numerics, fp32 activation memory.
            (x8, mx), (w8, mw) = widen(x8), widen(w8)
            inv_x, inv_w = inv_x * mx * _nan_guard(a_x), inv_w * mw * _nan_guard(a_w)
        y = _gemm(x8, w8.t(), inv_x, inv_w, opts.engine, opts.out_dtype, fast_accum=True)  # (M,K)@(K,N)
        ctx.save_for_backward(x8, w8, inv_x, inv_w)
        # Scaling state is kept off the autograd tape: it is written in place between steps.
        ctx.state, ctx.opts, ctx.dtypes = (hist_b, scale_b, last, frac), opts, (x.dtype, w.dtype)
        return y

    @staticmethod
    def backward(ctx, dy):
        x8, w8, inv_x, inv_w = ctx.saved_tensors
        hist_b, scale_b, last, frac = ctx.state
        opts = ctx.opts
        a_g = amax(dy)
        s_g = current_scale(a_g, E5M2, opts.margin) if opts.current else scale_b[0].clone()
        g8 = quantize(dy, s_g, E5M2)  # (M, N)
        if opts.record:
            hist_b[0, 0] = a_g
        last[2].copy_(torch.stack([a_g, s_g]))
        if opts.stats:
            frac[2].copy_(fp8_fractions(dy, g8, s_g, E5M2))
        inv_g = s_g.reciprocal()
        if opts.engine == "emulated":
            g8, mg = widen(g8)  # E5M2 widens exactly, Inf and NaN included
            inv_g = inv_g * mg
        # Gradients come out in the dtypes of x and of the (fp32 master) weight, as TE's dgrad/wgrad do.
        x_dtype, w_dtype = ctx.dtypes
        dx = _gemm(g8, _col_major(w8, opts), inv_g, inv_w, opts.engine, x_dtype)  # (M,N)@(N,K) -> (M,K)
        dw = _gemm(_row_major(g8.t(), opts), _col_major(x8, opts), inv_g, inv_x, opts.engine, w_dtype)  # (N,K)
        return dx, dw, None, None, None, None, None, None, None


class Fp8Linear(nn.Module):
    """nn.Linear with FP8 GEMMs (engine "native" or "emulated") and per-tensor delayed scaling."""

    def __init__(self, linear: nn.Linear, engine: str = "native", recipe: scaling.DelayedScaling | None = None,
                 scaling_mode: str = "delayed", round_output: torch.dtype | None = None):
        super().__init__()
        if engine not in ("native", "emulated"):
            raise ValueError(f"engine must be native or emulated, got {engine!r}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias  # the same Parameters: same init, same names
        self.engine, self.recipe = engine, recipe or scaling.DelayedScaling()
        self.current = scaling_mode == "current"
        self.round_output = round_output  # bf16/fp16 emulated on CPU: round y as autocast would
        self.collect_stats = False
        dev = linear.weight.device
        L = self.recipe.history_len
        # TE's layout: forward history columns (input, weight), backward (grad_output); scales start at 1.
        self.register_buffer("amax_history_fwd", torch.zeros(L, 2, device=dev))
        self.register_buffer("scale_fwd", torch.ones(2, device=dev))
        self.register_buffer("amax_history_bwd", torch.zeros(L, 1, device=dev))
        self.register_buffer("scale_bwd", torch.ones(1, device=dev))
        # Read by the health monitor: per role (amax, scale used) each step, and (underflow, saturation).
        self.register_buffer("last", torch.zeros(3, 2, device=dev), persistent=False)
        self.register_buffer("fractions", torch.full((3, 2), float("nan"), device=dev), persistent=False)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"engine={self.engine}, scaling={'current' if self.current else 'delayed'}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        out_dtype = x.dtype
        if torch.is_autocast_enabled(x.device.type):
            out_dtype = torch.get_autocast_dtype(x.device.type)
        opts = Fp8Options(self.engine, self.current, self.recipe.margin,
                          record=self.training and torch.is_grad_enabled(), stats=self.collect_stats,
                          out_dtype=out_dtype)
        y = _Fp8LinearFn.apply(x.reshape(-1, self.in_features), self.weight, self.amax_history_fwd, self.scale_fwd,
                               self.amax_history_bwd, self.scale_bwd, self.last, self.fractions, opts)
        y = y.reshape(*lead, self.out_features)  # (..., N)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        if self.round_output is not None:
            y = y.to(self.round_output).to(x.dtype)
        return y


def fp8_modules(model: nn.Module) -> list[tuple[str, Fp8Linear]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, Fp8Linear)]


@torch.no_grad()
def update_scales(modules: Iterable[Fp8Linear], group: dist.ProcessGroup | None = None) -> None:
    """Turn every module's staged amaxes into next step's scales (call after each backward).

    Across data-parallel ranks the staged amaxes are first reduced with MAX in one all-reduce, so
    every rank computes the same scales (TE: reduce_amax=True, done at autocast exit / after backward).
    """
    mods = [m for m in modules if not m.current]
    if not mods:
        return
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        staged = torch.cat([torch.cat([m.amax_history_fwd[0], m.amax_history_bwd[0]]) for m in mods])
        dist.all_reduce(staged, op=dist.ReduceOp.MAX, group=group)
        for i, m in enumerate(mods):
            m.amax_history_fwd[0].copy_(staged[3 * i:3 * i + 2])
            m.amax_history_bwd[0].copy_(staged[3 * i + 2:3 * i + 3])
    for m in mods:
        scaling.update(m.amax_history_fwd, m.scale_fwd, E4M3.max, m.recipe)
        scaling.update(m.amax_history_bwd, m.scale_bwd, E5M2.max, m.recipe)


@torch.no_grad()
def scrub_histories(modules: Iterable[Fp8Linear]) -> None:
    for m in modules:
        scaling.scrub_history(m.amax_history_fwd)
        scaling.scrub_history(m.amax_history_bwd)
