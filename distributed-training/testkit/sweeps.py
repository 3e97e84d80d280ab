"""An attention lab under test (tp-attention and cp-attention stand on common.attention_sweep): the refusals every
sweep shares, its runner's and verify command's checked against the world they will get (DT_PLANNED_WORLD, what
common.launch tells their check pass); a --resume with nothing to resume; a tiny sweep run twice on 2 ranks, an
experiment kept in runs/, then resumed with nothing measured again and published; and the damages to its
correctness_*.csv and bench_*.csv every such report refuses in one line.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pytest

from common.findings import Finding, block
from common.sweep_report import SweepReport, SweepTables, read_sweep

from .bad_input import expect_bad_input, keep_tracked_files, report_arguments_test
from .gpu import no_gpu_mark
from .reports import expect_report_refuses

# (world, argv, what the one line says): refused the same way by every sweep (common.attention_sweep, common.runner).
SHARED_REFUSALS = [
    (4, ["--iters", "0"], "--iters must be positive"),
    (4, ["--warmup", "-1"], "argument --warmup: expected a whole number from 0 to"),
    (4, ["--dtype", "float16"], "invalid choice: 'float16'"),
    (4, ["--gpu", "h900"], "unknown GPU preset 'h900'"),
    (4, ["--promote", "maybe"], "invalid choice: 'maybe'"),
]
GPU_REFUSALS = [(4, ["--gpu", "h100"], "needs a CUDA GPU and torch sees none"),
                (4, ["--require-gpu"], "this target measures a GPU")]


def sweep_refusals(degree: str, lab_cases: list) -> list:
    """The sweep's refusals: of its degree flag, the lab's own (its shapes), the shared ones, and those only a machine
    without a GPU gives (marked to skip on one with a GPU)."""
    own = [(4, [f"--{degree}", "3"], f"--{degree} 3 must divide the number of ranks (4"),
           (4, [f"--{degree}", "0"], f"--{degree} degrees must be positive"),
           (4, ["--seq-lens", "0"], "--seq-lens must be positive")]
    return [*own, *lab_cases, *SHARED_REFUSALS, *(pytest.param(*case, marks=no_gpu_mark()) for case in GPU_REFUSALS)]


def _ids(v) -> str | None:
    return " ".join(v) if isinstance(v, list) else str(v)


def refusal_test(main: Callable[[list[str]], Any], lab: Path, cases: list) -> Callable:
    """A test (bound to a test_ name in a lab's module) of `main`, bench.py's or verify.py's, refusing each case
    (world, argv, what the one line says) before `world` ranks start: one line, exit 2, nothing under `lab` written."""
    @pytest.mark.parametrize("world, argv, needle", cases, ids=_ids)
    def test(world, argv, needle, capsys, monkeypatch):
        expect_refused_at(main, world, argv, needle, capsys, monkeypatch, watch=[lab])
    return test


def nothing_to_resume_test(main: Callable[[list[str]], Any]) -> Callable:
    """A test: the sweep's --resume with no earlier run folder is refused in one line."""
    def test(tmp_path, capsys, monkeypatch):
        expect_nothing_to_resume(main, tmp_path, capsys, monkeypatch)
    return test


def report_refusal_test(report_main: Callable[[list[str]], Any], lab: Path,
                        lab_cases: list[tuple[str, Callable[[Path], Any], str]]) -> Callable:
    """A test: the report refuses a copy of `lab`/results damaged each way of report_damages(lab_cases)."""
    @pytest.mark.parametrize("damage, needle", report_damages(lab_cases))
    def test(damage, needle, tmp_path, capsys):
        expect_report_refuses(report_main, lab, damage, needle, tmp_path, capsys)
    return test


class BadInputTests(NamedTuple):
    """An attention lab's bad-input tests, bound to these names in its tests/test_bad_input.py."""

    tracked_files_unchanged: Callable  # a module-scoped autouse fixture: git status of the lab as before
    test_sweep: Callable
    test_sweep_resume_with_nothing_to_resume: Callable
    test_verify: Callable
    test_report_refuses_damaged_results: Callable
    test_report_arguments: Callable


def bad_input_tests(lab: Path, degree: str, bench_main: Callable, verify_main: Callable, report_main: Callable, *,
                    sweep: list, verify: list, report: list) -> BadInputTests:
    """Every bad-input test of an attention lab at `lab`, from its own cases: `sweep` (world, argv, needle) beside
    sweep_refusals' shared ones, `verify` (world, argv, needle), `report` (id, damage, needle) beside report_damages'
    shared ones; and the report's command line (testkit.bad_input.report_arguments_test)."""
    return BadInputTests(keep_tracked_files(lab), refusal_test(bench_main, lab, sweep_refusals(degree, sweep)),
                         nothing_to_resume_test(bench_main), refusal_test(verify_main, lab, verify),
                         report_refusal_test(report_main, lab, report), report_arguments_test(report_main, lab))


def expect_refused_at(main: Callable[[list[str]], Any], world: int, argv: list[str], needle: str, capsys,
                      monkeypatch, watch=()) -> None:
    """The command (bench.py's or verify.py's main), checked before `world` ranks, refuses argv in one line, exit 2,
    nothing written."""
    monkeypatch.setenv("DT_PLANNED_WORLD", str(world))
    expect_bad_input(lambda: main(argv), needle, capsys, watch=watch)


def expect_nothing_to_resume(main: Callable[[list[str]], Any], tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("DT_PLANNED_WORLD", "2")
    expect_bad_input(lambda: main(["--gpu", "cpu", "--resume", "--results", str(tmp_path / "results")]),
                     "--resume: nothing to resume", capsys, watch=[tmp_path])


def committed_tables(report: SweepReport) -> Callable:
    """A module-scoped fixture: the lab's committed result sets (SweepTables), read and checked as its report reads
    them."""
    @pytest.fixture(scope="module")
    def committed() -> SweepTables:
        return read_sweep(report.lab / "results", report.lab / "REPORT.md", report)
    return committed


def opening_texts(findings: list[Finding]) -> dict[str, str]:
    """A report's opening findings by label, after checking that they fit one screen, whatever the data."""
    block(findings, one_screen=True)
    return {f.label: f.text for f in findings}


def bench_twice(env, main: Callable[[list[str]], Any], argv: list[str], results: str) -> str:
    """On every rank of 2 (testkit.run_ranks): a tiny sweep, an experiment kept in runs/ with results/ untouched; then
    the same with --resume --promote replace, which measures nothing again and publishes. Rank 0's first rows."""
    main(argv + ["--results", results])
    kept = Path(results).parent / "runs" / "cpu_ws2" / "bench_cpu_ws2.csv"
    first = kept.read_text() if env.rank == 0 else ""
    assert not Path(results, "bench_cpu_ws2.csv").exists()
    main(argv + ["--results", results, "--resume", "--promote", "replace"])
    return first


def _cut(path: Path) -> None:
    path.write_text(path.read_text()[:-25])


def report_damages(lab_cases: list[tuple[str, Callable[[Path], Any], str]]) -> list:
    """(id, damage to a copy of results/, what the one line says): the damages every such report refuses, then the lab's
    own (a header's quote, a number column's text): the parameters of its test_report_refuses_damaged_results."""
    shared = [("no-folder", shutil.rmtree, "results folder"),
              ("no-csv", lambda r: [p.unlink() for p in r.glob("*.csv")], "no correctness_*.csv or bench_*.csv"),
              ("empty", lambda r: (r / "correctness_cpu_ws4.csv").write_text(""), "correctness_cpu_ws4.csv is empty"),
              ("cut", lambda r: _cut(r / "bench_cpu_ws4.csv"), "a half-written last row")]
    return [pytest.param(damage, needle, id=name) for name, damage, needle in [*shared, *lab_cases]]
