"""Bad input to every allreduce-bench command: one line, exit code 2, no file written, before any rank.

The runner's arguments and what is checked before torchrun (GPU for a preset, memory for the largest
message, resume state, another run holding the folder), and the report on missing, corrupt, empty,
binary, mistyped, foreign and half-written CSVs. Every case runs in process (main(argv))."""

import shutil
from pathlib import Path

import pytest

import bench
import nccl_tests
import overhead
import report
from common.runs import RunFolder
from testkit import expect_bad_input, expect_report_refuses, keep_tracked_files, no_gpu_mark
from testkit.bad_input import report_arguments_test

LAB = Path(bench.__file__).resolve().parent
NO_GPU = no_gpu_mark()


tracked_files_unchanged = keep_tracked_files(LAB)


@pytest.mark.parametrize("argv, needle", [
    (["--collectives", "all_reduce,reduce"], "unknown collective 'reduce'; valid: all_reduce, all_gather"),
    (["--min-bytes", "1M", "--max-bytes", "1K"], "size range reversed"),
    (["--iters", "0"], "--iters must be a positive integer"),
    (["--min-iters", "-3"], "argument --min-iters: expected a whole number from 0 to 2,147,483,647, got '-3'"),
    (["--min-iters", "50", "--iters", "5"], "--min-iters 50 exceeds --iters 5"),
    (["--dtypes", "fp8"], "unknown dtype 'fp8'"),
    (["--min-bytes", "2G", "--gpu", "cpu"], "size range reversed: --min-bytes 2G > --max-bytes 64M"),
    (["--gpu", "tpu"], "unknown GPU preset 'tpu'"),
    pytest.param(["--gpu", "h100"], "needs a CUDA GPU and torch sees none", marks=NO_GPU),
    (["--gpu", "cpu", "--max-bytes", "1000G"], "--max-bytes 1000G needs about"),
    (["--max-bytes", "lots"], "cannot read size 'lots'"),
    (["--timeout-s", "0"], "--timeout-s must be > 0"),
    (["--timeout-s", "nan"], "expected a finite number"),
    (["--step-factor", "1"], "--step-factor must be an integer >= 2"),
    (["--promote", "sometimes"], "invalid choice: 'sometimes'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_runner(argv, needle, capsys):
    expect_bad_input(lambda: bench.main(argv + ["--gpu", "cpu"] if "--gpu" not in argv else argv), needle, capsys,
                     watch=[LAB])


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory) -> Path:
    """A finished tiny sweep's run folder (an experiment: kept in runs/), to resume against."""
    results = tmp_path_factory.mktemp("arb") / "results"
    assert bench.main(["--gpu", "cpu", "--collectives", "all_reduce", "--max-bytes", "2K", "--iters", "2",
                       "--min-iters", "1", "--target-ms", "1", "--no-topology", "--results", str(results)]) == 0
    return results


def test_resume_with_nothing_to_resume(tmp_path, capsys):
    expect_bad_input(lambda: bench.main(["--gpu", "cpu", "--resume", "--results", str(tmp_path / "r")]),
                     "--resume: nothing to resume", capsys, watch=[tmp_path])


def test_resume_under_another_config(earlier_run, capsys):
    argv = ["--gpu", "cpu", "--collectives", "all_reduce", "--max-bytes", "4K", "--iters", "2", "--min-iters", "1",
            "--target-ms", "1", "--no-topology", "--results", str(earlier_run), "--resume"]
    expect_bad_input(lambda: bench.main(argv), "the config changed (max_bytes: '2K' -> '4K')", capsys,
                     watch=[earlier_run.parent])


def test_a_second_run_on_a_folder_in_use(tmp_path, capsys):
    held = RunFolder.open(tmp_path / "runs" / "sweep_cpu_ws1", tmp_path / "results")
    try:
        expect_bad_input(lambda: bench.main(["--gpu", "cpu", "--results", str(tmp_path / "results")]),
                         "being written by another run",
                         capsys, watch=[tmp_path])
    finally:
        held.close()


@pytest.mark.parametrize("argv, needle", [
    (["--rounds", "0"], "--rounds must be a positive integer"),
    (["--gpu", "h900"], "unknown GPU preset 'h900'"),
    (["--collectives", "gather"], "unknown collective 'gather'"),
])
def test_overhead(argv, needle, capsys):
    expect_bad_input(lambda: overhead.main(argv), needle, capsys, watch=[LAB])


def test_nccl_tests_without_the_binary(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    expect_bad_input(lambda: nccl_tests.main(["--gpu", "cpu"]), "all_reduce_perf is not on PATH", capsys,
                     watch=[LAB])


# ---- the report: every damaged input is one line naming the file; no REPORT.md, no plot is written

HEADER = (LAB / "results" / "sweep_cpu_ws4.csv").read_text().splitlines()[0]


@pytest.mark.parametrize("damage, needle", [
    (lambda r: shutil.rmtree(r), "results folder"),
    (lambda r: [p.unlink() for p in r.glob("sweep_*.csv")], "no sweep_*.csv in"),
    (lambda r: (r / "sweep_cpu_ws8.csv").write_text('x,"y\n'), "sweep_cpu_ws8.csv is not a readable CSV"),
    (lambda r: (r / "sweep_cpu_ws4.csv").write_text(""), "sweep_cpu_ws4.csv is empty"),
    (lambda r: (r / "sweep_cpu_ws4.csv").write_bytes(b"\x00\x01\x02\xff" * 64), "contains NUL bytes"),
    (lambda r: (r / "sweep_cpu_ws4.csv").write_text((r / "sweep_cpu_ws4.csv").read_text().replace(
        "\nall_reduce,1024,", "\nall_reduce,fast,", 1)), "line 2, column size_bytes: 'fast' is not an int"),
    (lambda r: (r / "sweep_cpu_ws2.csv").write_text("a,b\n1,2\n"), "sweep_cpu_ws2.csv lacks the column(s)"),
    (lambda r: (r / "sweep_cpu_ws4.csv").write_text((r / "sweep_cpu_ws4.csv").read_text()[:-40]),
     "a half-written last row"),
    (lambda r: (r / "sweep_cpu_ws4.csv").write_text(HEADER + "\n"), "has a header but no rows"),
    (lambda r: (r / "overhead_cpu_ws4.csv").write_text(""), "overhead_cpu_ws4.csv is empty"),
    (lambda r: (r / "nccl_tests_h100_ws8.csv").write_text("collective,size_bytes\nall_reduce,x\n"),
     "nccl_tests_h100_ws8.csv lacks the column(s)"),
], ids=["no-folder", "no-sweep", "quote", "empty", "binary", "text-in-number", "foreign", "cut", "header-only",
        "empty-overhead", "foreign-nccl-tests"])
def test_report_refuses_damaged_results(damage, needle, tmp_path, capsys):
    expect_report_refuses(report.main, LAB, damage, needle, tmp_path, capsys)


test_report_arguments = report_arguments_test(report.main, LAB)
