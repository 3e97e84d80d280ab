"""Fit the compute model's three free constants on the `fit` published runs, once; report every run's error.

    PYTHONPATH=distributed-training python -m planner.evidence.fit_compute           # fit, write the CSV, print
    PYTHONPATH=distributed-training python -m planner.evidence.fit_compute --no-fit  # the frozen constants' errors

The constants (calibration.py: sustained_clock, hbm_efficiency, kernel_us) are fitted by minimising
the mean squared log error of per-GPU throughput over the runs published.py marks `fit`, each
constant bounded to its physical range (calibration.FIT_BOUNDS), by coordinate descent with a
golden-section search per constant (deterministic: no random starts, no library optimiser). The
held-out runs are then predicted with the fitted constants and never enter the objective. The CSV
holds one row per published run: the run, its role, published and projected value, signed
throughput error, the constants used and the commit of the planner that produced it. Paste the
printed constants into calibration.FITTED to freeze them (the guide reads the frozen ones).

No GPU is involved: every projected number is a cost-model projection (CPU, seconds).
"""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from common.config import parse_config
from planner.model.calibration import FIT_BOUNDS, FITTED, ComputeConstants

from . import published

PLANNER = Path(__file__).resolve().parents[1]  # the planner's folder: results/ lies there
OUT = PLANNER / "results" / "compute_fit.csv"
GOLDEN = (math.sqrt(5) - 1) / 2


def loss(consts: ComputeConstants) -> float:
    """Mean squared log of (1 + throughput error) over the fit runs; a run that does not fit costs 1."""
    rows = published.compare(consts, role="fit")
    return sum(math.log1p(r["error"]) ** 2 if r["error"] is not None else 1.0 for r in rows) / len(rows)


def golden(f, lo: float, hi: float, iters: int) -> float:
    a, b = lo, hi
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(d)
    return (a + b) / 2


START = ComputeConstants(**{name: (lo + hi) / 2 for name, (lo, hi) in FIT_BOUNDS.items()})  # bounds' midpoints


def fit(start: ComputeConstants = START, sweeps: int = 6, iters: int = 12, log=print) -> ComputeConstants:
    """Coordinate descent from `start` (the bounds' midpoints: the result does not depend on the frozen values)."""
    consts = start
    for sweep in range(sweeps):
        for name, (lo, hi) in FIT_BOUNDS.items():
            best = golden(lambda x: loss(replace(consts, **{name: x})), lo, hi, iters)
            consts = replace(consts, **{name: round(best, 3)})
        log(f"sweep {sweep + 1}: {consts} loss {loss(consts):.5f}")
    return consts


def commit() -> str:
    """The planner's commit, with "+dirty" when its files differ from it (the CSV then names its parent code)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PLANNER, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", "../common", ":!results"], cwd=PLANNER,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def write_csv(consts: ComputeConstants, path: Path = OUT) -> list[dict]:
    rows = published.compare(consts)
    path.parent.mkdir(parents=True, exist_ok=True)
    rev = commit()
    cols = ["source", "run", "role", "gpu", "gpus", "metric", "published", "projected", "throughput_error_pct",
            "sustained_ampere", "sustained_hopper", "hbm_efficiency", "kernel_us", "planner_commit"]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(cols)
        for r in rows:
            out.writerow([r["source"], r["name"], r["role"], r["gpu"], r["gpus"], r["metric"], r["published"],
                          None if r["predicted"] is None else round(r["predicted"], 4),
                          None if r["error"] is None else round(100 * r["error"], 2),
                          consts.sustained_ampere, consts.sustained_hopper, consts.hbm_efficiency, consts.kernel_us,
                          rev])
    tmp.replace(path)  # atomic: a reader never sees half a file
    return rows


@dataclass(frozen=True)
class FitConfig:
    fit: bool = field(default=True, metadata={"help": "fit the constants (else report the frozen ones)"})
    sweeps: int = field(default=6, metadata={"help": "coordinate-descent sweeps"})
    out: str = field(default=str(OUT.relative_to(PLANNER.parents[1])), metadata={"help": "CSV to write"})

    def __post_init__(self):
        if self.sweeps <= 0:
            raise ValueError(f"--sweeps must be positive, got {self.sweeps}")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(FitConfig, argv, description=__doc__.split("\n\n")[0], prog="fit_compute.py")
    consts = fit(START, cfg.sweeps) if cfg.fit else FITTED
    rows = write_csv(consts, PLANNER.parents[1] / cfg.out)
    for key, s in published.summary(rows).items():
        print(f"{key:16s} n={s['n']:2d} median |error| {s['median_abs']:.1%}, range {s['min']:+.1%} .. {s['max']:+.1%}")
    print("FITTED = ComputeConstants(" + ", ".join(f"{f.name}={getattr(consts, f.name)}" for f in fields(consts)) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
