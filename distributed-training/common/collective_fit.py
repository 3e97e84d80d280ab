"""The alpha-beta model fitted to a measured sweep, and the one rule that calibrates the cost model with it.

The fit (allreduce-bench's report; Hockney's alpha-beta with the ring cost forms of collective_cost.py):

    time = alpha + factor(n) S / B

by least squares on *relative* residuals (times span four decades; an unweighted fit would only see
the largest sizes), with alpha >= 0. factor(n) S is what each rank's link carries, so the fitted B *is*
the asymptotic busbw (allreduce-anchors section 5.3). Reported: alpha (us), B (GB/s), n_1/2 = alpha B /
factor (the S at which busbw reaches B/2), alpha per ring step, and the rms relative error, which exposes
protocol switches (kinks no single straight line follows; section 5.5). With one rank no byte crosses
a link (factor 0): the fit uses S itself and B is an algbw.

A fit is an *extrapolation* where the sweep stops short of what it reports: n_1/2 beyond the largest
size measured, or B beyond it (the model's busbw at the largest size below PLATEAU x B: the plateau was
never reached). Reports flag both.

Calibration, the same rule for fsdp-scaling's projection and the planner's --calibrate: fit the
all_reduce rows of allreduce-bench sweeps (time_us, the median of the per-iteration max over ranks).
- Inside a domain: the largest single-node run (n ranks): B is the in-domain busbw, alpha / (2(n-1)) the
  latency per ring step.
- Across domains: the largest multi-node run (n ranks on k nodes, g = n/k per node). NCCL runs one ring
  per NIC, so its B is g NICs' worth (when the network is the bottleneck): the per-GPU NIC rate is B / g.
  What alpha holds beyond the 2(g-1) in-node steps is the tree's 2 ceil(log2 k) levels. Run it with
  NCCL_ALGO=RING: NCCL's tree and NVLS algorithms reduce inside the node first and report more than the
  NICs carry (allreduce-anchors section 3.3).
- Protocols: the fit is the Simple protocol's line (collective_cost.py). On a network whose library also has LL
  and LL128 (NCCL), small and medium sizes ride those, below the line: the fit then takes only the sizes at which
  the network being calibrated prices Simple as the fastest (allreduce-anchors section 5.5: fit the large-message
  regime; 64 MiB and up on 8 H100s, about 256 MiB and up across 4 nodes), where a sweep has two of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .collective_cost import Network, busbw_factor, ceil_log2, protocol_of, ring_latency_steps

PLATEAU = 0.80  # B counts as measured where the fitted busbw at the largest size reaches this fraction of it
SWEEP_COLUMNS = ("collective", "world_size", "nnodes", "size_bytes", "time_us")


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

    @property
    def extrapolated(self) -> str:
        """What the fit reports beyond the sweep: '' (nothing), 'B', or 'n_1/2 and B'."""
        if math.isnan(self.bw_GBps):
            return ""
        if self.n_half_bytes > self.max_bytes:
            return "n_1/2 and B"
        # busbw(S) / B = S / (S + n_1/2): below PLATEAU at the largest size means the plateau lies beyond it
        if self.max_bytes / (self.max_bytes + self.n_half_bytes) < PLATEAU:
            return "B"
        return ""


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


def _fit_run(rows: pd.DataFrame, n: int, net: Network, n_local: int) -> Fit:
    g = rows.sort_values("size_bytes")
    if net.protocols != ("Simple",):  # the Simple protocol's regime (module docstring)
        simple = g[[protocol_of("all_reduce", s, n, n_local, net) == "Simple" for s in g["size_bytes"]]]
        g = simple if len(simple) >= 2 else g
    fit = fit_alpha_beta("all_reduce", n, g["size_bytes"], g["time_us"] * 1e-6)
    if math.isnan(fit.bw_GBps):
        raise ValueError(f"the {n}-rank all_reduce sweep has no bandwidth regime (time does not grow with size)")
    return fit


def _described(fit: Fit, what: str) -> str:
    flag = f"; EXTRAPOLATED {fit.extrapolated} beyond the largest size" if fit.extrapolated else ""
    return f"{what}: busbw {fit.bw_GBps:.3g} GB/s, alpha {fit.alpha_us:.3g} us{flag}"


def calibrate(net: Network, rows: pd.DataFrame) -> tuple[Network, list[str]]:
    """The Network with what the all_reduce rows of allreduce-bench sweeps measured (module docstring),
    and one note per replaced figure. ValueError (exit 2 upstream) when the rows cannot calibrate."""
    missing = [c for c in SWEEP_COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"not an allreduce-bench sweep (no column {', '.join(missing)})")
    ar = rows[(rows["collective"] == "all_reduce") & (rows["world_size"] > 1)]
    single, multi = ar[ar["nnodes"] == 1], ar[ar["nnodes"] > 1]
    if single.empty and multi.empty:
        raise ValueError("no all_reduce rows with world_size >= 2")
    changes, notes = {}, []
    if not single.empty and net.domain > 1:
        n = int(single["world_size"].max())
        fit = _fit_run(single[single["world_size"] == n], n, net, n)
        changes.update(intra_GBps=fit.bw_GBps, alpha_step_us=fit.alpha_us / (2 * (n - 1)))
        notes.append(_described(fit, f"in-domain rate and latency from a {n}-rank all_reduce sweep"))
    if not multi.empty:
        n, k = max(zip(multi["world_size"].astype(int), multi["nnodes"].astype(int)))
        g = n // k
        fit = _fit_run(multi[(multi["world_size"] == n) & (multi["nnodes"] == k)], n, net, g)
        in_node = 2 * (g - 1) * changes.get("alpha_step_us", net.alpha_step_us)
        changes.update(nic_GBps=fit.bw_GBps / g,
                       alpha_level_us=max(0.0, fit.alpha_us - in_node) / (2 * max(1.0, float(ceil_log2(k)))))
        if net.domain == 1:
            changes["intra_GBps"] = changes["nic_GBps"]
        notes.append(_described(fit, f"network rate and latency from a {n}-rank, {k}-node all_reduce sweep"))
    return net.calibrated(source="allreduce-bench sweeps", **changes), notes
