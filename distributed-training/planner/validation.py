"""The planner's validation, by regime and by ranking: generated markdown sections for the validation document.

    regimes()         published runs by scale (one node and small models; 64-1024 GPUs; more), each regime's median
                      |error| and worst against the targets (median <= 5% in every regime, none beyond +-20%)
    own_rows()        this repository's GPU rows against their targets (BF16 within 5%, FP8 within 8%, at most 2 rows
                      set apart by rule)
    ranking()         parallel-3d's ranking set on CPU: rank correlation and the pick (planner/ranking.py)

Each function returns markdown computed now from the planner and the committed CSVs, so the claims move with the
model. Every planner number is a projection; measured numbers are the CSVs' own.

    PYTHONPATH=distributed-training python -m planner.validation     # print the three sections
"""

from __future__ import annotations

import statistics
import sys
from typing import NamedTuple

from common import markdown

from . import explain_rows, own_runs, published, ranking as ranking_set, vs_measured

MEDIAN_TARGET, WORST_TARGET = 0.05, 0.20
# The regimes, by the GPUs a published run used: a node (or a few, with a small model), a cluster, a fleet.
REGIMES = (("one node and small models (< 64 GPUs)", 1, 63), ("64-1024 GPUs", 64, 1024),
           ("more than 1024 GPUs", 1025, 10**9))


class Regime(NamedTuple):
    name: str
    n: int
    median_abs: float
    worst: float
    beyond: list[str]  # runs beyond WORST_TARGET

    @property
    def meets(self) -> bool:
        return self.median_abs <= MEDIAN_TARGET and not self.beyond


def regime_rows(rows: list[dict]) -> list[Regime]:
    out = []
    for name, lo, hi in REGIMES:
        mine = [r for r in rows if lo <= r["gpus"] <= hi and r["error"] is not None]
        if not mine:
            continue
        errs = [r["error"] for r in mine]
        out.append(Regime(name, len(mine), statistics.median(abs(e) for e in errs), max(errs, key=abs),
                          [f"{r['name']} ({r['error']:+.0%})" for r in mine if abs(r["error"]) > WORST_TARGET]))
    return out


def regimes(rows: list[dict] | None = None) -> str:
    """Published runs by regime: the first lines say which regimes meet the targets."""
    found = regime_rows(rows if rows is not None else published.compare())
    met = [g.name for g in found if g.meets]
    lines = [f"Published runs, per-GPU throughput error by regime (targets: median |error| <= {MEDIAN_TARGET:.0%} in "
             f"every regime, none beyond +-{WORST_TARGET:.0%}): {len(met)} of {len(found)} regimes meet both."]
    for g in found:
        if g.beyond:
            lines.append(f"Beyond +-{WORST_TARGET:.0%} in {g.name}: " + "; ".join(g.beyond) + ".")
    table = markdown.table(["regime", "runs", "median abs. error", "worst", f"beyond +-{WORST_TARGET:.0%}", "meets"],
                           [[g.name, g.n, f"{g.median_abs:.1%}", f"{g.worst:+.1%}", len(g.beyond),
                             "yes" if g.meets else "no"] for g in found], align="lrrrrl")
    return "\n\n".join([" ".join(lines), table])


def own_rows(cal: explain_rows.Calibration | None = None) -> str:
    """This repository's GPU rows against the targets, with how many are set apart by rule."""
    runs = [r for r in own_runs.all_runs() if r.kind in ("step", "block")]
    if not runs:
        return "No GPU training row is committed yet."
    rows = explain_rows.compare(runs, cal if cal is not None else explain_rows.measured_calibration())
    checks = [c for c in vs_measured.targets(rows) if c.n]
    apart = sum(c.outside for c in checks)
    said = "; ".join(f"{c.what}: {c.within} of {c.n} (median {c.median_abs:.1%}, worst {c.worst:+.1%})"
                     for c in checks)
    return (f"This repository's GPU rows (training steps and blocks): {said}; {apart} rows set apart by rule "
            "(target: at most 2).\n\n" + vs_measured.targets_table(checks))


def ranking() -> str:
    """parallel-3d's ranking set (planner/ranking.py)."""
    return ranking_set.section()


SECTIONS = {"validation_regimes": regimes, "validation_own_rows": own_rows, "validation_ranking": ranking}


def main(argv: list[str] | None = None) -> int:
    for fn in SECTIONS.values():
        print(fn(), end="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
