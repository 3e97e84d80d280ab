"""Issue 15's before/after: the planner as it was (an older commit) and as it is, on the same published runs.

    PYTHONPATH=distributed-training python -m planner.evidence.before_after     # before = 2fbc6b4, writes the CSV
    PYTHONPATH=distributed-training python -m planner.evidence.before_after --before <commit>

The older planner is exported from git history into a temporary folder and run there (common/at_commit.py) on
every run of published.py, asked through its own interface (old_planner.py's issue15): the same pins and batch, its
own flags for what it knew (fp32 gradients, sequence parallelism, FlashAttention, dropout), nothing for
what it did not (eager kernels, FA2, overlap switches, per-op recompute: it chose recompute itself, as its
own published.py let it for torchtitan's runs; the `h100-gt` GPU: its `h100` row with 96 GB). Runs it
could not plan (uneven stages, a DP degree that does not divide the batch) are recorded as such. Also
SC21 Table 1 left free under the paper's constraints, before and after. Writes results/before_after.csv:
one row per run (and per SC21 choice), with both commits. Projections only; no GPU involved.
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from common import at_commit
from common.config import parse_config

from . import accuracy, published
from .fit_compute import commit

PLANNER = Path(__file__).resolve().parents[1]  # the planner's folder: results/ lies there
OUT = PLANNER / "results" / "before_after.csv"
ADAPTER = Path(__file__).with_name("old_planner.py")  # runs in the older tree, as its old_planner module


def old_case(case: published.Case, free_sc21: bool = False) -> dict:
    sw = case.software
    pins = {k: v for k, v in case.pins.__dict__.items() if v is not None}
    if pins.get("recompute") == "op":
        del pins["recompute"]
    if free_sc21:
        pins = {"zero": 0, "recompute": "full"}
    gpu, mem = (("h100", 96.0) if case.gpu == "h100-gt" else (case.gpu, case.memory_gb))
    s = case.shape
    return {"shape": [s.layers, s.hidden, s.heads, s.kv_heads, s.vocab, s.seq, s.ffn], "batch": case.batch,
            "grad_bytes": sw.grad_bytes, "sp": sw.sequence_parallel, "flash": sw.flash_attention,
            "dropout": sw.dropout, "gpu": gpu, "gpus": case.gpus, "memory_gb": mem, "net": case.inter_node_gbps,
            "pins": pins, "metric": "step_s" if case.metric == "step_s" else case.metric}


def run_old(commit: str, study: str, cases: list[dict], prog: str = "before_after.py"):
    """The planner at `commit` on `cases`, asked as old_planner.py's `study` does; one line and exit 1 if it fails.
    Its folder is on PYTHONPATH beside distributed-training/, as the planner's scripts were run before it became
    a package."""
    try:
        out = at_commit.run_module(commit, "old_planner", args=[study], stdin=json.dumps(cases),
                                   add={"distributed-training/old_planner.py": ADAPTER},
                                   path=("distributed-training", "distributed-training/planner"))
    except at_commit.Failed as e:
        raise SystemExit(f"{prog}: the planner at {commit} failed: {e.line}") from None
    return json.loads(out)


def error(case: published.Case, value: float | None) -> float | None:
    if value is None:
        return None
    return case.published / value - 1 if case.metric == "step_s" else value / case.published - 1


@dataclass(frozen=True)
class BeforeAfterConfig:
    before: str = field(default="2fbc6b4", metadata={"help": "commit of the planner before issue 15"})

    def __post_init__(self):
        if not self.before.strip():
            raise ValueError("--before must name a commit")
        if not at_commit.is_commit(self.before):
            raise ValueError(f"--before {self.before!r} is not a commit of this repository")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(BeforeAfterConfig, argv, description=__doc__.split("\n\n")[0], prog="before_after.py")
    cases = published.cases()
    sc21 = [c for c in cases if c.source == published.SC21]
    old = run_old(cfg.before, "issue15", [old_case(c) for c in cases] + [old_case(c, free_sc21=True) for c in sc21])
    now = {r["name"]: r for r in published.compare()}
    after_commit = commit()
    rows = []
    for case, before in zip(cases, old):
        b = before and before[case.metric]
        r = now[case.name]
        rows.append(["throughput", case.source, case.name, case.role, case.gpu, case.gpus, case.metric,
                     case.published, b, error(case, b), r["predicted"], r["error"], cfg.before, after_commit])
    free_now = {c.name: res.best for c, res in accuracy._sc21_free()}
    for case, before in zip(sc21, old[len(cases):]):
        paper = f"{case.pins.tp}x{case.pins.pp}"
        b = before and f"{before['tp']}x{before['pp']}"
        a = free_now[case.name]
        rows.append(["sc21 choice", case.source, case.name, case.role, case.gpu, case.gpus, "tp x pp", paper, b,
                     None, f"{a.tp}x{a.pp}", None, cfg.before, after_commit])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "source", "run", "role", "gpu", "gpus", "metric", "published", "before", "before_error",
                    "after", "after_error", "before_commit", "after_commit"])
        w.writerows(rows)
    tmp.replace(OUT)
    for r in rows:
        print(" | ".join("" if x is None else f"{x:+.1%}" if isinstance(x, float) and abs(x) < 2 and i in (9, 11)
                         else str(x) for i, x in enumerate(r)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
