"""Issue 29's regimes before and after: the planner at an older commit and as it is now, on today's published runs.

    PYTHONPATH=distributed-training python -m planner.evidence.regimes_before_after     # before = efaebb5
    PYTHONPATH=distributed-training python -m planner.evidence.regimes_before_after --before <commit>

Every run of published.py and published_small.py is priced by the planner at `--before` (exported from git history
and run there: before_after.run_old, old_planner.py's issue29) and by this one, each with the run's pins and stack
flags through the Workload interface of 22e175f (Workload(shape, batch, **flags), make_cluster(..., gpus_per_node=),
search(..., rules=False)).
A stack flag of today's Software that the older Workload lacks is left out (that planner did not model it) and the
tool says which; 22e175f's Workload takes all of them. Writes results/regimes_before_after.csv, one row per run: its
regime (validation.REGIMES), GPU, hidden size, both TP degrees, published value, both predictions and both
throughput errors, both commits. Then prints per regime the median |error| and the worst before and after, over all
runs and over those published.py held before published_small.py existed, and each group of alternatives in the
small-model regime ranked by both (validation.group_ranks: Spearman, the pick within 5% of the measured best).
Projections only; no GPU involved. A commit that is not one, or has no planner, is bad input (exit 2); a planner
older than that interface (2fbc6b4: search() without rules=) fails with one line (exit 1).
"""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from common import at_commit
from common.config import parse_config

from . import published, published_small, validation
from .before_after import run_old
from .fit_compute import commit

PLANNER = Path(__file__).resolve().parents[1]  # the planner's folder: results/ lies there
OUT = PLANNER / "results" / "regimes_before_after.csv"
COLUMNS = ["source", "run", "regime", "gpu", "gpus", "hidden", "group", "metric", "published", "before_tp", "before",
           "before_error", "after_tp", "after", "after_error", "before_commit", "after_commit"]


def as_json(case: published.Case) -> dict:
    s = case.shape
    return {"shape": [s.layers, s.hidden, s.heads, s.kv_heads, s.vocab, s.seq, s.ffn], "batch": case.batch,
            "software": dict(case.software.__dict__), "gpu": case.gpu, "gpus": case.gpus,
            "memory_gb": case.memory_gb, "net": case.inter_node_gbps, "domain": case.gpus_per_node,
            "pins": {k: v for k, v in case.pins.__dict__.items() if v is not None}, "metric": case.metric}


def regime(gpus: int) -> str:
    """validation.REGIMES' name for a run on `gpus` GPUs."""
    return next(name for name, lo, hi in validation.REGIMES if lo <= gpus <= hi)


class Spread(NamedTuple):
    n: int
    median_abs: float
    worst: float  # the signed error of largest magnitude

    def __str__(self) -> str:
        return f"median |error| {self.median_abs:.1%}, worst {self.worst:+.1%} (n {self.n})"


def spread(errors: list[float]) -> Spread | None:
    if not errors:
        return None
    return Spread(len(errors), statistics.median(abs(e) for e in errors), max(errors, key=abs))


@dataclass(frozen=True)
class RegimesConfig:
    before: str = field(default="efaebb5", metadata={"help": "commit of the planner before (efaebb5: before issue 38's "
                                                                  "floor; 22e175f: before issue 29's physics)"})

    def __post_init__(self):
        if not self.before.strip() or self.before.startswith("-"):
            raise ValueError(f"--before must name a commit, got {self.before!r}")
        if not at_commit.is_commit(self.before):
            raise ValueError(f"--before {self.before!r} is not a commit of this repository")
        if not any(at_commit.has_path(self.before, f"distributed-training/planner/{p}") for p in LAYOUTS.values()):
            raise ValueError(f"--before {self.before!r} has no planner (distributed-training/planner/search.py)")


# Where an older planner's search lives, by the study that asks it (old_planner.py): the flat package of 22e175f, or
# the rooms of efaebb5 on.
LAYOUTS = {"issue29": "search.py", "rooms": "search/search.py"}


def study_of(commit: str) -> str:
    """old_planner.py's study for the planner at `commit`."""
    return "rooms" if at_commit.has_path(commit, "distributed-training/planner/search/search.py") else "issue29"


def rank_lines(rows: list[dict], key: str) -> list[str]:
    """Each group of alternatives in the small-model regime, ranked by the `key` predictions (validation's rule)."""
    _, lo, hi = validation.REGIMES[0]
    mine = [{"name": r["run"], "group": r["group"], "published": r["published"], "predicted": r[key]}
            for r in rows if lo <= r["gpus"] <= hi]
    return [f"{g.name} ({g.n} runs): Spearman {g.rank_correlation:.2f}, pick {g.pick!r} "
            f"{g.pick_vs_best:+.1%} vs the measured best ({'within' if g.within else 'not within'} "
            f"{validation.PICK_TOLERANCE:.0%})" for g in validation.group_ranks(mine)]


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(RegimesConfig, argv, description=__doc__.split("\n\n")[0], prog="regimes_before_after.py")
    cases = published.cases()
    old = run_old(cfg.before, study_of(cfg.before), [as_json(c) for c in cases], prog="regimes_before_after.py")
    now = published.compare()
    after_commit = commit()
    rows = []
    for case, before, r in zip(cases, old["results"], now, strict=True):
        value, tp = before if before is not None else (None, None)
        rows.append({"source": case.source, "run": case.name, "regime": regime(case.gpus), "gpu": case.gpu,
                     "gpus": case.gpus, "hidden": case.shape.hidden, "group": case.group or "",
                     "metric": case.metric, "published": case.published, "before_tp": tp, "before": value,
                     "before_error": None if value is None else published.throughput_error(case, value),
                     "after_tp": r["config"].tp if r["config"] else None, "after": r["predicted"],
                     "after_error": r["error"],
                     "before_commit": cfg.before, "after_commit": after_commit})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(OUT)  # atomic
    if old["dropped"]:
        print(f"the planner at {cfg.before} has no flag(s) {', '.join(old['dropped'])}: priced without them")
    for name, _, _ in validation.REGIMES:
        for label, keep in (("all runs", lambda r: True),
                            ("published.py's runs", lambda r: r["source"] not in published_small.SOURCES)):
            mine = [r for r in rows if r["regime"] == name and keep(r)]
            before = spread([r["before_error"] for r in mine if r["before_error"] is not None])
            after = spread([r["after_error"] for r in mine if r["after_error"] is not None])
            print(f"{name}, {label}: before {before or '-'}; after {after or '-'}")
    for key in ("before", "after"):
        for line in rank_lines(rows, key) or ["no group of alternatives in the small-model regime"]:
            print(f"small-model ranking, {key}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
