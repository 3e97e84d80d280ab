"""Block-scaled formats, emulated: MXFP8, MXFP4 and NVFP4 (an experimental numerics study).

Per-tensor scaling gives a whole tensor one scale; block scaling gives every small block of the
contraction dimension its own, so one outlier only coarsens its own block. Blackwell GPUs do
these GEMMs in hardware (TransformerEngine's MXFP8BlockScaling / NVFP4BlockScaling); here they are
quantize-dequantize round trips followed by an fp32 GEMM, on any machine.

    MXFP8  (OCP Microscaling spec v1.0; Rouhani et al. arXiv 2310.10537): 32-element blocks,
           E4M3 elements, one E8M0 (power-of-two) scale per block, chosen by --mx-scale-rule (below).
           TE uses E4M3 for gradients too.
    MXFP4  32-element blocks of E2M1 (values 0, .5, 1, 1.5, 2, 3, 4, 6) with an E8M0 scale, the same
           rules.
    NVFP4  (TE nvfp4 docs; arXiv 2509.25149): 16-element blocks of E2M1, a block scale stored
           as E4M3 and an fp32 per-tensor scale: s_global = amax / (448 * 6),
           s_block = cast_e4m3((amax_block / 6) / s_global), x ~= e2m1 * s_block * s_global.
           TE's full recipe adds random Hadamard transforms on the weight-gradient operands,
           stochastic rounding of gradients and 16x16 weight blocks; this emulation leaves all
           three out (round-to-nearest-even everywhere, 1-D blocks), and the report says so.

The E8M0 block scale 2^e (an element is stored as x / 2^e), two rules (MX_SCALE_RULES):
    ocp    the OCP MX v1.0 spec's rule (torchao's FLOOR): e = floor(log2 amax_block) - emax_elem, emax_elem the
           element format's largest exponent (8 for E4M3, 2 for E2M1). amax / 2^e lies in
           [2^emax, 2^(emax+1)), above the element maximum (448 = 1.75 * 2^8, 6 = 1.5 * 2^2) when the
           amax's mantissa is larger: such values saturate (clamped to the maximum).
    te     TransformerEngine's MXFP8 quantizer: e = ceil(log2(amax_block / elem_max)), its
           float_to_e8m0(amax * 1/max_norm) rounding the exponent up, so amax / 2^e <= elem_max and
           nothing saturates (cuBLAS and torchao call it RCEIL); the price is up to one binade less
           resolution at the bottom of the block.
The default is te, the rule of the library the lab compares with; the config records the rule.

Each GEMM operand is blocked along *that GEMM's* contraction dimension, so the backward needs
differently blocked copies (TE keeps a row-wise and a column-wise quantization of each tensor):
forward x,W along K; dgrad dy,W along N; wgrad dy,x along M.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from precision.formats import E4M3, widen

E2M1_MAX = 6.0
BLOCK_FORMATS = {"mxfp8": 32, "mxfp4": 32, "nvfp4": 16}  # block size along the contraction dim
MX_SCALE_RULES = ("te", "ocp")  # the E8M0 block-scale rules (module docstring); the first is the default


def round_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest FP4 E2M1 value (ties to even), saturating at +-6.

    E2M1's positive values are 0, 0.5, 1, 1.5 (step 0.5), 2, 3 (step 1), 4, 6 (step 2): rounding to a
    multiple of the step of each binade with torch.round (half to even) gives RNE on the codes.
    """
    a = x.abs().clamp(max=E2M1_MAX)
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    return torch.sign(x) * torch.round(a / step) * step


def e8m0_scale(block_amax: torch.Tensor, elem_max: float, rule: str) -> torch.Tensor:
    """Power-of-two block scale (the decode factor 2^e) of `rule` ('te' or 'ocp', module docstring)."""
    # an all-zero block: any scale encodes it
    safe = torch.where(block_amax > 0, block_amax, torch.ones_like(block_amax))
    if rule == "te":  # exponent rounded up: amax / 2^e <= elem_max
        e = torch.ceil(torch.log2(safe / elem_max))
    elif rule == "ocp":  # floor(log2 amax) - emax_elem; emax of E4M3 = floor(log2 448) = 8, of E2M1 = 2
        e = torch.floor(torch.log2(safe)) - math.floor(math.log2(elem_max))
    else:
        raise ValueError(f"MX scale rule must be one of {', '.join(MX_SCALE_RULES)}, got {rule!r}")
    return torch.exp2(e.clamp(-127, 127))


def _blocks(x: torch.Tensor, dim: int, block: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """Move `dim` last and split it into blocks: (..., n_blocks, block), zero-padded."""
    t = x.float().movedim(dim, -1)
    shape = t.shape
    pad = (-shape[-1]) % block
    if pad:
        t = torch.nn.functional.pad(t, (0, pad))
    return t.reshape(*shape[:-1], -1, block), shape


def _unblock(b: torch.Tensor, shape: tuple[int, ...], dim: int) -> torch.Tensor:
    return b.reshape(*shape[:-1], -1)[..., :shape[-1]].movedim(-1, dim)


def quantize_dequantize(x: torch.Tensor, fmt: str, dim: int = -1, rule: str = MX_SCALE_RULES[0]) -> torch.Tensor:
    """x after a round trip through the block format, blocked along `dim` (fp32 result); `rule`: the
    MXFP8/MXFP4 E8M0 scale rule (NVFP4's block scales are E4M3, not E8M0)."""
    blk, shape = _blocks(x, dim, BLOCK_FORMATS[fmt])
    bamax = blk.abs().amax(dim=-1, keepdim=True)  # (..., n_blocks, 1)
    if fmt == "mxfp8":
        s = e8m0_scale(bamax, E4M3.max, rule)
        t, m = widen((blk / s).clamp(-E4M3.max, E4M3.max).to(E4M3.dtype))
        q = t * (s * m)
    elif fmt == "mxfp4":
        s = e8m0_scale(bamax, E2M1_MAX, rule)
        q = round_e2m1(blk / s) * s
    else:  # nvfp4: per-tensor fp32 scale, then E4M3 block scales relative to it
        g = blk.abs().amax() / (E4M3.max * E2M1_MAX)
        g = torch.where(g > 0, g, torch.ones_like(g))
        s = ((bamax / E2M1_MAX) / g).clamp(max=E4M3.max).to(E4M3.dtype).float()
        s = torch.where(s > 0, s, torch.ones_like(s)) * g
        q = round_e2m1(blk / s) * s
    return _unblock(q, shape, dim).to(x.dtype)


class _BlockLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, fmt: str, grad_fmt: str, rule: str):
        # x (M, K), w (N, K): both blocked along K
        ctx.save_for_backward(x, w)
        ctx.fmts = (fmt, grad_fmt, rule)
        return quantize_dequantize(x, fmt, -1, rule) @ quantize_dequantize(w, fmt, -1, rule).t()

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        fmt, gfmt, rule = ctx.fmts
        dx = quantize_dequantize(dy, gfmt, -1, rule) @ quantize_dequantize(w, fmt, 0, rule)  # contraction over N
        dw = quantize_dequantize(dy, gfmt, 0, rule).t() @ quantize_dequantize(x, fmt, 0, rule)  # contraction over M
        return dx.to(x.dtype), dw.to(w.dtype), None, None, None


class BlockScaledLinear(nn.Module):
    """nn.Linear whose three GEMMs see block-scaled operands (emulated; any hardware)."""

    def __init__(self, linear: nn.Linear, fmt: str, round_output: torch.dtype | None = None,
                 rule: str = MX_SCALE_RULES[0]):
        super().__init__()
        if fmt not in BLOCK_FORMATS:
            raise ValueError(f"block format must be one of {sorted(BLOCK_FORMATS)}, got {fmt!r}")
        if rule not in MX_SCALE_RULES:
            raise ValueError(f"MX scale rule must be one of {', '.join(MX_SCALE_RULES)}, got {rule!r}")
        self.rule = rule
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.fmt = fmt
        self.round_output = round_output
        # TE's MXFP8 recipe quantizes gradients to E4M3 too; the FP4 recipes keep gradients in FP4.
        self.grad_fmt = fmt

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, format={self.fmt} (emulated), "
                f"scale rule={self.rule}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        dev = x.device.type
        out_dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype
        with torch.autocast(dev, enabled=False):  # emulation: fp32 GEMMs on the block-quantized values
            y = _BlockLinearFn.apply(x.reshape(-1, self.in_features).float(), self.weight, self.fmt, self.grad_fmt,
                                    self.rule)
        y = y.to(out_dtype).reshape(*lead, self.out_features)
        if self.bias is not None:
            y = y + self.bias
        if self.round_output is not None:
            y = y.to(self.round_output).to(x.dtype)
        return y
