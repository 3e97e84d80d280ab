"""FP8 number formats and per-tensor quantization: the arithmetic every FP8 backend shares.

Two 8-bit formats (Micikevicius et al., "FP8 Formats for Deep Learning", arXiv 2209.05433; the
OCP 8-bit spec; limits in ../shared/reference/fp8-anchors.md section 4.1):

    E4M3 (torch.float8_e4m3fn)  max 448 = 1.75*2^8    min normal 2^-6   min subnormal 2^-9   no Inf
    E5M2 (torch.float8_e5m2)    max 57344 = 1.75*2^15 min normal 2^-14  min subnormal 2^-16  has Inf

E4M3 has more precision (3 mantissa bits: relative rounding error <= 2^-4) and is used for the
forward operands (activations, weights); E5M2 has more range and is used for gradients. That
pairing is TransformerEngine's Format.HYBRID.

Per-tensor scaling maps a tensor's range onto the format's: q = cast(clamp(x * scale, -max, max)),
x ~= q / scale. The clamp comes *before* the cast because eager casts to float8_e4m3fn turned
overflow into NaN up to torch 2.11 (torch >= 2.12 saturates; E5M2 still overflows to Inf), so
clamping is the portable way to get TransformerEngine's saturating behaviour. Rounding is the
cast's round-to-nearest-even; values below half the smallest subnormal flush to zero.

Two fractions say how well a scale fits a tensor (TransformerEngine's LogFp8TensorStats
`underflows%` / `overflows%`, here as fractions of all elements):
    underflow  = non-zero values that became zero after quantization
    saturation = values whose scaled magnitude exceeded the format's max and were clipped to it
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Fp8Format:
    name: str
    dtype: torch.dtype
    max: float  # largest finite value
    min_normal: float
    min_subnormal: float
    mantissa_bits: int


def _fmt(name: str, dtype: torch.dtype, mantissa_bits: int) -> Fp8Format:
    fi = torch.finfo(dtype)
    # smallest subnormal = smallest normal * 2^-mantissa_bits
    return Fp8Format(name, dtype, float(fi.max), float(fi.tiny), float(fi.tiny) * 2.0 ** -mantissa_bits,
                     mantissa_bits)


E4M3 = _fmt("e4m3", torch.float8_e4m3fn, 3)
E5M2 = _fmt("e5m2", torch.float8_e5m2, 2)
FORMATS = {f.name: f for f in (E4M3, E5M2)}


def amax(x: torch.Tensor) -> torch.Tensor:
    """max |x| as a 0-dim fp32 tensor (NaN if x holds a NaN, which the scaling rules then see)."""
    lo, hi = torch.aminmax(x.detach())  # one pass, no |x| temporary (the fastest of the options on CPU)
    return torch.maximum(hi, -lo).float()


def quantize(x: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """x * scale, clamped to the format's range, cast (round-to-nearest-even) to fmt.dtype."""
    return (x.detach().float() * scale).clamp_(-fmt.max, fmt.max).to(fmt.dtype)


def widen(q: torch.Tensor) -> tuple[torch.Tensor, float]:
    """FP8 -> fp32 fast: (t, m) with value == t * m exactly, m a power of two.

    torch's element-wise fp8 -> fp32 conversion is scalar code on CPUs (~6 ns/element here, five
    times the fp32 -> fp8 cast). Bit moves do it in three vectorised integer ops: E5M2 is the high
    byte of an fp16; E4M3 (sign, 4 exponent, 3 mantissa bits) shifted into an fp16's bit positions
    is the same value times 2^-8, subnormals included (exponent bias 15 vs 7). The sign-extended
    int8 -> int16 widening puts the sign in bit 15. E4M3's NaN codes come out finite (+-1.875), so
    callers propagate NaN from the tensor's amax instead; every finite code is exact (tested on all 256).
    """
    if q.is_cuda or q.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        return q.float(), 1.0
    h = q.view(torch.int8).to(torch.int16)
    if q.dtype == torch.float8_e5m2:
        return (h << 8).view(torch.float16).float(), 1.0
    return ((h << 7) & -0x4080).view(torch.float16).float(), 256.0  # keep bit 15 (sign) and bits 7-13


def upcast(q: torch.Tensor) -> torch.Tensor:
    """FP8 -> fp32, exactly (NaN codes included)."""
    return q.float()


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (upcast(q) / scale).to(dtype)


def quantize_dequantize(x: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """The value x has after a round trip through fmt at this scale (fp32)."""
    return dequantize(quantize(x, scale, fmt), scale)


def current_scale(a: torch.Tensor, fmt: Fp8Format, margin: int = 0) -> torch.Tensor:
    """Current (just-in-time) scaling: fmt.max / amax(x) / 2^margin; 1 where amax is 0 or not finite.

    TransformerEngine's Float8CurrentScaling and torchao's tensorwise recipe scale each tensor by
    its own amax (TE's compute_scale_from_amax returns 1.0 for a zero/Inf/NaN amax).
    """
    s = (fmt.max / a) / (2.0 ** margin)
    ok = (a > 0) & torch.isfinite(a) & torch.isfinite(s)
    return torch.where(ok, s, torch.ones_like(s))


def fp8_fractions(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """(underflow, saturation) fractions of x quantized to q at `scale`, as a 2-element fp32 tensor.

    underflow: zeros in q that were not zero in x; as x == 0 implies q == 0, that is
    count(q == 0) - count(x == 0), and q is one byte per element (cheap to scan).
    saturation: |x| > fmt.max / scale, i.e. clipped by the clamp in `quantize`.
    """
    xd = x.detach()
    n = max(1, xd.numel())
    zero_q = ((q.view(torch.uint8) & 0x7F) == 0).sum()  # +0 and -0: exponent and mantissa bits all zero
    underflow = zero_q - (xd == 0).sum()
    saturation = (xd.abs() > fmt.max / scale).sum()
    return torch.stack([underflow, saturation]).float() / n
