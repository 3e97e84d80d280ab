"""The alpha-beta (Hockney) model of a collective, fitted to one run's sweep.

Hockney's model prices a message of m bytes at alpha + m/B. For a collective on n ranks we price
the bytes each rank must move through its link: the ring cost forms of Thakur, Rabenseifner &
Gropp (IJHPCA 19(1), 2005; ../shared/reference/allreduce-anchors.md section 5.2) are

    all_reduce       2(n-1) a + 2(n-1)/n S / B       reduce-scatter ring, then all-gather ring
    all_gather       (n-1) a  +  (n-1)/n S / B
    reduce_scatter   (n-1) a  +  (n-1)/n S / B       (+ the reduction's compute, folded into B)
    all_to_all       (n-1) a  +  (n-1)/n S / B       pairwise exchange
    broadcast                 +        S / B       pipelined chain, NCCL's broadcast
    send_recv            a    +        S / B

so the bytes on the wire are exactly busbw_factor(n) * S, and the fitted B *is* the asymptotic
busbw (nccl-tests chose its factors so; section 5.3 of the notes). We fit

    time = alpha + wire_bytes / B

by least squares on *relative* residuals (times span four decades; an unweighted fit would only
see the largest sizes), with alpha >= 0. Reported: alpha (us), B as busbw_inf (GB/s), n_1/2 = the
size S at which busbw reaches B/2 (there the alpha and bandwidth terms are equal: S = alpha B /
factor), and the rms relative error of the fit, which exposes protocol switches (kinks no single
straight line follows; section 5.5). With one rank no byte crosses a link (factor 0), so the fit
uses S itself and B is an algbw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from busbw import busbw_factor, ring_latency_steps


@dataclass(frozen=True)
class Fit:
    alpha_us: float  # start-up latency of one call
    bw_GBps: float  # asymptotic busbw (algbw when the wire factor is 0); nan if time does not grow with size
    n_half_bytes: float  # S at which the bandwidth reaches half of bw_GBps
    alpha_step_us: float  # alpha / latency steps of the ring form
    rms_rel_err: float  # sqrt(mean(((fit - t) / t)^2))
    points: int
    min_bytes: int
    max_bytes: int
    kind: str  # "busbw" or "algbw"

    def predict_s(self, wire_bytes: np.ndarray | float) -> np.ndarray | float:
        slope = 0.0 if math.isnan(self.bw_GBps) else 1.0 / (self.bw_GBps * 1e9)
        return self.alpha_us * 1e-6 + np.asarray(wire_bytes, dtype=float) * slope


def wire_factor(collective: str, n: int) -> tuple[float, str]:
    """Bytes on the wire per byte of S, and whether B is then a busbw or (one rank) an algbw."""
    f = busbw_factor(collective, n)
    return (f, "busbw") if n > 1 and f > 0 else (1.0, "algbw")


def fit_alpha_beta(collective: str, n: int, sizes_bytes: Sequence[float], times_s: Sequence[float]) -> Fit:
    """Fit time = alpha + factor*S/B to one collective's sweep (needs at least 2 sizes)."""
    s = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if s.shape != t.shape or s.size < 2 or np.any(t <= 0):
        raise ValueError(f"need >= 2 positive times of equal length, got {s.size} sizes and {t.size} times")
    factor, kind = wire_factor(collective, n)
    x = factor * s
    # Minimise sum(((a + b x - t) / t)^2): ordinary least squares on the rows [1/t, x/t] -> 1.
    A = np.stack([1 / t, x / t], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if a < 0:  # latency cannot be negative: refit through the origin
        a, b = 0.0, float(np.sum(x / t) / np.sum((x / t) ** 2))
    if b <= 0:  # no bandwidth regime in range: time does not grow with size
        a, b = float(np.sum(1 / t) / np.sum(1 / t**2)), 0.0
    pred = a + b * x
    bw = 1 / b / 1e9 if b > 0 else math.nan
    n_half = a / b / factor if b > 0 else math.nan
    steps = max(1, ring_latency_steps(collective, n))
    return Fit(alpha_us=a * 1e6, bw_GBps=bw, n_half_bytes=n_half, alpha_step_us=a * 1e6 / steps,
               rms_rel_err=float(np.sqrt(np.mean(((pred - t) / t) ** 2))), points=int(s.size),
               min_bytes=int(s.min()), max_bytes=int(s.max()), kind=kind)
