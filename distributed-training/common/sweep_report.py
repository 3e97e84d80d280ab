"""The report generator's spine of an attention lab (common.attention_sweep: tp-attention, cp-attention).

Every such report reads the same result sets, results/correctness_<tag>.csv and bench_<tag>.csv (tag: cpu_ws4,
h100_ws1), checked by the lab's schemas, and writes one markdown file with its plots beside it. The lab gives its
schemas and a function from the tables to the report's text; this parses --results/--out, reads and checks every
table before anything is drawn, writes the report and says from how many CSVs:

    REPORT = SweepReport(LAB, CORRECTNESS, BENCH, "run `make tp-attention-run`")
    main = report_main(REPORT, render, __doc__)   # render(tables: SweepTables) -> str; main(argv) -> exit code

Bad input (a missing folder, a damaged CSV, an unknown flag) is one line on stderr, exit 2, nothing written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Sequence

import pandas as pd

from .config import parse_config
from .csvread import Schema, guard_report, report_path, results_folder, sweep_results, tables_by_tag


@dataclass(frozen=True)
class ReportConfig:
    results: str = field(default="results", metadata={"help": "folder holding the CSVs"})
    out: str = field(default="REPORT.md", metadata={"help": "the report to write (plots: plots/ beside it)"})


class SweepReport(NamedTuple):
    """What a lab's report reads: its folder (results/ and REPORT.md in it), its schemas, what a missing result says."""

    lab: Path
    correctness: Schema
    bench: Schema
    run_it: str  # "run `make tp-attention-run`"
    extra: Mapping[str, Schema] = {}  # other <kind>_<tag>.csv it reads (cp-attention: public_api)


class SweepTables(NamedTuple):
    """The checked tables, by tag in name order, and where the report goes."""

    results: Path
    out: Path  # the report; its plots go to plots/ beside it
    corrs: dict[str, pd.DataFrame]
    benches: dict[str, pd.DataFrame]
    extra: dict[str, dict[str, pd.DataFrame]]  # kind -> tag -> table

    def n_csvs(self) -> int:
        return len(self.corrs) + len(self.benches) + sum(len(t) for t in self.extra.values())


def read_sweep(results: str | Path, out: str | Path, report: SweepReport) -> SweepTables:
    """Every table the report reads, checked (BadResults naming the first damaged file), before anything is drawn."""
    folder, out = results_folder(results, report.run_it), report_path(out)
    corrs, benches = sweep_results(folder, report.correctness, report.bench, report.run_it)
    extra = {kind: tables_by_tag(folder, kind, schema) for kind, schema in report.extra.items()}
    return SweepTables(folder, out, corrs, benches, extra)


def write_sweep_report(argv: Sequence[str] | None, doc: str | None, report: SweepReport,
                       render: Callable[[SweepTables], str]) -> int:
    """The lab's report.py main(): --results (default the lab's results/) and --out (its REPORT.md) parsed, every
    table read and checked, render's text written to --out."""
    defaults = ReportConfig(results=str(report.lab / "results"), out=str(report.lab / "REPORT.md"))
    cfg = parse_config(ReportConfig, argv, description=doc, prog="report.py", defaults=defaults)
    tables = read_sweep(cfg.results, cfg.out, report)
    tables.out.write_text(render(tables))
    print(f"wrote {tables.out.name} from {tables.n_csvs()} CSVs")
    return 0


def report_main(report: SweepReport, render: Callable[[SweepTables], str],
                doc: str | None) -> Callable[[Sequence[str] | None], int]:
    """The lab's report.py main(argv): write_sweep_report, a damaged result one line and exit 2 (guard_report)."""
    @guard_report
    def main(argv: Sequence[str] | None = None) -> int:
        return write_sweep_report(argv, doc, report, render)
    return main
