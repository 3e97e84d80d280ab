"""More bad input to the planner (see also test_cli.py): non-finite numbers, damaged calibration
sweeps, and the guide's flags. One line, exit code 2, nothing written; in process."""

from pathlib import Path

import pytest

from testkit import expect_bad_input, keep_tracked_files
from planner import plan
from planner.guide import guide

LAB = Path(plan.__file__).resolve().parent
SWEEP = LAB.parent / "allreduce-bench" / "results" / "sweep_cpu_ws4.csv"
RUNS = LAB.parent / "parallel-3d" / "results" / "runs_cpu.csv"


tracked_files_unchanged = keep_tracked_files(LAB)


@pytest.mark.parametrize("argv, needle", [
    (["--params", "inf"], "--params must be a positive finite count, got 'inf'"),
    (["--params", "nan"], "--params must be a positive finite count, got 'nan'"),
    (["--params=-5B"], "--params must be a positive finite count"),
    (["--params", "seven"], "cannot read --params 'seven'"),
    (["--params", "7B", "--memory-gb", "nan"], "argument --memory-gb: expected a finite number"),
    (["--params", "7B", "--inter-node-gbps", "inf"], "argument --inter-node-gbps: expected a finite number"),
    (["--params", "7B", "--zero", "4"], "--zero must be 0, 1, 2 or 3"),
    (["--params", "7B", "--bogus"], "unrecognized arguments: --bogus"),
    # issue 32: 1e30 parameters once laid out a shape for minutes; sizes beyond the planner's range are one line
    (["--params", "1e30", "--gpus", "512"], "--params 1e30 is beyond the planner's range: at most 1e+15 (1000T)"),
    (["--params", "7B", "--gpus", "1099511627776"], "argument --gpus: expected a whole number from 0 to 2,147,483,647"),
    (["--params", "7B", "--global-batch", "1000000000000"], "argument --global-batch: expected a whole number"),
    (["--layers", "4000000", "--hidden", "1024", "--heads", "8"], "--layers 4000000 is beyond the planner's range"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_plan(argv, needle, capsys):
    expect_bad_input(lambda: plan.main(argv), needle, capsys, watch=[LAB])


@pytest.mark.parametrize("content, needle", [
    (b"", "is empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "NUL bytes"),
    (b"a,b\n1,2\n", "lacks the column(s) collective, world_size"),
    (lambda: SWEEP.read_bytes()[:-50], "a half-written last row"),
    (lambda: SWEEP.read_bytes().replace(b"\nall_reduce,1024,", b"\nall_reduce,big,", 1), "'big' is not an int"),
    (lambda: RUNS.read_bytes()[:-40], "a half-written last row"),  # parallel-3d's runs calibrate the matmul rate
], ids=["empty", "binary", "foreign", "cut", "text-in-number", "cut-runs"])
def test_calibration_sweeps(content, needle, tmp_path, capsys):
    path = tmp_path / "sweep_x.csv"
    path.write_bytes(content() if callable(content) else content)
    line = expect_bad_input(lambda: plan.main(["--params", "7B", "--calibrate", str(path)]), needle, capsys,
                            watch=[tmp_path])
    assert line.startswith("plan.py: error: --calibrate: ") and "sweep_x.csv" in line


@pytest.mark.parametrize("argv, needle", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--out", "/nonexistent/dir/GUIDE.md"], "the folder /nonexistent/dir does not exist"),
])
def test_guide(argv, needle, capsys):
    expect_bad_input(lambda: guide.main(argv), needle, capsys, watch=[LAB, LAB.parent / "PARALLELISM_GUIDE.md"])
