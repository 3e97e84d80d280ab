"""Predicted beside measured, as markdown: the section each lab's report embeds and the guide's table.

    section("fp8-train", results_dir)   # a lab report's "Predicted vs measured" section (reports call it)
    guide_table()                       # PLANNER_VALIDATION.md section 4: every lab's GPU rows, summarised
    targets(compared)                   # the accuracy targets of issue 24, per row kind (tests)

Everything is computed from the CSVs now (explain.compare over own_runs' rows), so a GPU run that lands in a
results folder appears here with no hand work. Error = predicted / measured throughput - 1: + means the
model is faster than what was measured.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import NamedTuple

from common import markdown

from . import explain_rows as explain, own_runs, unexplained
from .explain_rows import Compared

TARGET = {"bf16": 0.05, "fp8": 0.08}  # |error| per row: BF16 within 5%, FP8 within 8% (issue 24)
EVERY_ROW, MEDIAN_ROW = 0.30, 0.08  # issue 38: every row within 30%, their median within 8%
RATIO_TARGET = 0.05  # the FP8/BF16 speed ratio within 5%
MODEL = ("[`planner/evidence/explain_rows.py`](../planner/evidence/explain_rows.py) prices every GPU row from its own "
         "columns "
         "(model shape, precision, FP8 backend and recipe, torch.compile, degrees, micro-batch) with the cost model "
         "`make plan` uses; no row here was used to fit it. Error = predicted / measured throughput - 1 (+: the "
         "model is faster than measured).")


def fmt_value(value: float, unit: str) -> str:
    if value != value:  # NaN
        return "–"
    return f"{value:,.0f}" if unit == "tokens/s" else f"{value:,.2f}"


def bound_of(c: Compared) -> float | None:
    """The issue's |error| bound for a training step or block (by its precision), None for other rows."""
    if c.run.kind not in ("step", "block") or c.error is None:
        return None
    return TARGET.get(c.run.stack.precision)


def misses(c: Compared) -> bool:
    """A counted row (not superseded) whose error is beyond its target."""
    bound = bound_of(c)
    return bound is not None and not unexplained.outside(c.run) and abs(c.error) > bound


def note(c: Compared) -> str:
    """Why a row is not explained, in one line: outside the model by rule, or a miss and what is known of it."""
    if c.predicted.note:
        return c.predicted.note
    why = unexplained.outside(c.run)
    if why:
        return why
    if misses(c):
        return "miss: " + (unexplained.miss_reason(c.run) or "no reason recorded")
    return ""


LONG_NOTE = 60  # a note longer than this goes under the table once, numbered, and the cell names it


def with_legend(notes: list[str]) -> tuple[list[str], list[str]]:
    """Cells for `notes` and the legend under the table: a long note is written once, "(n) text", and each row
    that carries it shows its label (the text before the first colon) and "(n)"."""
    numbered: dict[str, int] = {}
    cells = []
    for text in notes:
        if len(text) <= LONG_NOTE:
            cells.append(text)
            continue
        n = numbered.setdefault(text, len(numbered) + 1)
        cells.append(f"{text.split(':')[0]} ({n})")
    return cells, [f"({n}) {text}" for text, n in numbered.items()]


def rows_table(rows: list[Compared]) -> str:
    body = []
    cells, legend = with_legend([note(c) for c in rows])
    for c, cell in zip(rows, cells):
        r = c.run
        err = "–" if c.error is None else f"{c.error:+.1%}"
        body.append([r.name, r.file, r.unit, fmt_value(r.measured, r.unit), fmt_value(c.predicted.value, r.unit), err,
                     cell])
    table = markdown.table(["run", "file", "unit", "measured", "predicted", "error", "note"], body, align="lllrrrl")
    return "\n\n".join([table, "\n".join(legend)]) if legend else table


class Ratio(NamedTuple):
    group: str
    run: str
    measured: float
    predicted: float
    why: str = ""  # what is known of the FP8 row's miss (unexplained.miss_reason), shown if the ratio misses

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    @property
    def note(self) -> str:
        if abs(self.error) <= RATIO_TARGET:
            return ""
        return "miss: " + (self.why or "no reason recorded")


def fp8_ratios(rows: list[Compared], claimed_only: bool = True) -> list[Ratio]:
    """Each FP8 training row's speed over the BF16 rows of the same model and kind of file (their median); of the
    rows the model claims (not outside it by rule), unless claimed_only=False (the crossovers: every measured row)."""
    out = []
    groups: dict[tuple, list[Compared]] = {}
    for c in rows:
        if c.run.kind == "step" and c.run.lab == "fp8-train" and not (claimed_only and unexplained.outside(c.run)):
            kind = Path(c.run.file).name  # steps.csv or bench_step.csv: sibling folders' BF16 runs count
            key = (c.run.gpu, c.run.shape, c.run.layout.microbatch, c.run.layout.micro_batches, kind)
            groups.setdefault(key, []).append(c)
    for key, group in groups.items():
        bf16 = [c for c in group if c.run.stack.precision == "bf16"]
        if not bf16:
            continue
        meas = statistics.median(c.run.measured for c in bf16)
        pred = statistics.median(c.predicted.value for c in bf16)
        for c in group:
            if c.run.stack.precision == "fp8":
                out.append(Ratio(f"d{key[1].hidden} L{key[1].layers}", c.run.name, c.run.measured / meas,
                                 c.predicted.value / pred, unexplained.miss_reason(c.run)))
    return out


def ratio_table(ratios: list[Ratio]) -> str:
    cells, legend = with_legend([r.note for r in ratios])
    table = markdown.table(["model", "FP8 run", "measured FP8/BF16", "predicted", "error", "note"],
                           [[r.group, r.run, f"{r.measured:.3f}", f"{r.predicted:.3f}", f"{r.error:+.1%}", cell]
                            for r, cell in zip(ratios, cells)], align="llrrrl")
    return "\n\n".join([table, "\n".join(legend)]) if legend else table


class Check(NamedTuple):
    what: str
    n: int  # rows counted
    within: int
    median_abs: float | None
    worst: float | None
    outside: int = 0  # rows superseded by a later commit (unexplained.outside), not in n
    median_signed: float | None = None  # a bias is not scatter


def _check(what: str, errors: list[float], bound: float, outside: int = 0) -> Check:
    if not errors:
        return Check(what, 0, 0, None, None, outside)
    return Check(what, len(errors), sum(abs(e) <= bound for e in errors), statistics.median(abs(e) for e in errors),
                 max(errors, key=abs), outside, statistics.median(errors))


def targets(rows: list[Compared]) -> list[Check]:
    """Rows within the issue's bounds: training steps and blocks by precision, and the FP8/BF16 ratios; rows outside
    the model by rule are counted apart (their notes say why)."""
    out = []
    for precision, bound in TARGET.items():
        mine = [c for c in rows if bound_of(c) is not None and c.run.stack.precision == precision]
        claimed = [c.error for c in mine if not unexplained.outside(c.run)]
        out.append(_check(f"{precision.upper()} rows within {bound:.0%}", claimed, bound, len(mine) - len(claimed)))
    out.append(_check(f"FP8/BF16 ratios within {RATIO_TARGET:.0%}", [r.error for r in fp8_ratios(rows)],
                      RATIO_TARGET))
    every = [c for c in rows if bound_of(c) is not None]
    counted = [c.error for c in every if not unexplained.outside(c.run)]
    out.append(_check(f"every row within {EVERY_ROW:.0%} (median {MEDIAN_ROW:.0%})", counted, EVERY_ROW,
                      len(every) - len(counted)))
    return out


def every_row_meets(check: Check) -> bool:
    """Issue 38's target on the row set: every counted row within EVERY_ROW, their median within MEDIAN_ROW."""
    return check.n > 0 and check.within == check.n and check.median_abs <= MEDIAN_ROW


def targets_table(checks: list[Check]) -> str:
    return markdown.table(["target", "rows counted", "within", "median abs. error", "median signed error", "worst",
                           "superseded (not counted)"],
                          [[c.what, c.n, c.within, "–" if c.median_abs is None else f"{c.median_abs:.1%}",
                            "–" if c.median_signed is None else f"{c.median_signed:+.1%}",
                            "–" if c.worst is None else f"{c.worst:+.1%}", c.outside] for c in checks if c.n],
                          align="lrrrrrr")


def _calibration_line(cal: explain.Calibration, gpus: set[str]) -> str:
    notes = [cal.notes[g] for g in sorted(gpus) if g in cal.notes]
    if not notes:
        return "Compute constants: calibration.py's (fitted on published runs); no GEMM benchmark of this GPU."
    return ("Training steps and blocks are priced with the GPU's own sustained matmul rate (gemm_rates.py, from "
            "fp8-train's GEMM benchmark: " + "; ".join(notes) + "); single GEMMs at the burst rate.")


def section(lab: str, results: str | Path | None = None, heading: str = "##") -> str:
    """The "Predicted vs measured" section of a lab's report, from the GPU rows under `results`."""
    runs = own_runs.runs(lab, Path(results) if results else None)
    head = f"{heading} Predicted vs measured (the planner's cost model)"
    if not runs:
        return f"{head}\n\nNo GPU rows in this lab's results yet: the comparison appears when a GPU run lands."
    cal = explain.measured_calibration()
    rows = explain.compare(runs, cal)
    collectives = [c for c in rows if c.run.kind == "collective"]
    others = [c for c in rows if c.run.kind != "collective"]
    parts = [head, "", MODEL + " " + _calibration_line(cal, {r.gpu for r in runs}), ""]
    if others:
        parts += [rows_table(others), ""]
        checks = [c for c in targets(others) if c.n]
        if checks:
            parts += [targets_table(checks), ""]
        ratios = fp8_ratios(others)
        if ratios:
            parts += ["FP8 speed over BF16 (the same model and benchmark, the BF16 runs' median):", "",
                      ratio_table(ratios), ""]
    if collectives:
        parts += collective_lines(collectives)
    return "\n".join(parts).rstrip() + "\n"


def collective_lines(rows: list[Compared]) -> list[str]:
    """One line per collective at one rank (no transfer); a table for real transfers (2+ ranks)."""
    lines = []
    single = [c for c in rows if c.run.layout.world == 1]
    if single:
        by = {}
        for c in single:
            by.setdefault(c.run.detail["collective"], []).append(c.run.measured)
        lines += ["At one rank no byte crosses a link: the model prices these calls at 0 µs (common/"
                  "collective_cost.py). Their measured time is the per-call floor (launch and synchronisation), "
                  "median per collective: " + ", ".join(f"{k} {statistics.median(v):.1f} µs"
                                                        for k, v in sorted(by.items())) + ".", ""]
    multi = [c for c in rows if c.run.layout.world > 1]
    if multi:
        lines += [rows_table(multi), ""]
    return lines


def crossovers(rows: list[Compared]) -> list[str]:
    """Per FP8 backend with benchmark rows at several hidden sizes: the smallest hidden size where FP8 is faster
    than BF16, measured and predicted."""
    out = []
    by_backend: dict[str, list[tuple[int, Ratio]]] = {}
    for c, r in _ratio_rows(rows):
        by_backend.setdefault(c.run.stack.backend, []).append((c.run.shape.hidden, r))
    for backend, points in sorted(by_backend.items()):
        sizes = sorted({h for h, _ in points})
        if len(sizes) < 2:
            continue

        def first(attr: str) -> str:
            wins = sorted(h for h, r in points if getattr(r, attr) > 1.0)
            return f"hidden {wins[0]}" if wins else "none of them"
        out.append(f"{backend}: FP8 first faster than BF16 at {first('measured')} measured, {first('predicted')} "
                   f"predicted (hidden {', '.join(map(str, sizes))})")
    return out


def _ratio_rows(rows: list[Compared]) -> list[tuple[Compared, Ratio]]:
    ratios = {r.run: r for r in fp8_ratios(rows, claimed_only=False)}
    return [(c, ratios[c.run.name]) for c in rows if c.run.name in ratios and c.run.file.endswith("bench_step.csv")]


def reading(rows: list[Compared]) -> str:
    """Generated sentences under the guide's table: the crossovers and the rows the notes single out."""
    parts = []
    cross = crossovers(rows)
    if cross:
        parts.append("Where FP8 starts to pay, by backend: " + "; ".join(cross) + ".")
    noted: dict[str, int] = {}
    for c in rows:
        if note(c):
            key = note(c).split(":")[0]
            noted[key] = noted.get(key, 0) + 1
    if noted:
        parts.append("Rows with a note: " + "; ".join(f"{n} {k}" for k, n in noted.items()) + " (the table says why).")
    return " ".join(parts)


def guide_table(cal: explain.Calibration | None = None) -> str:
    """Section 5's "measured here": every lab's GPU rows in one table, and the targets."""
    runs = [r for r in own_runs.all_runs() if r.kind != "collective"]
    if not runs:
        return "No GPU row is committed in this repository yet."
    cal = cal if cal is not None else explain.measured_calibration()
    rows = explain.compare(runs, cal)
    text = [rows_table(rows), "", targets_table([c for c in targets(rows) if c.n])]
    ratios = fp8_ratios(rows)
    if ratios:
        text += ["", ratio_table(ratios)]
    said = reading(rows)
    if said:
        text += ["", explain_wrap(said)]
    return "\n".join(text)


def explain_wrap(text: str) -> str:
    import textwrap
    return textwrap.fill(text, width=110, break_long_words=False, break_on_hyphens=False)
