"""Bad input: one line on stderr, exit code 2, nothing written, before any process group (the project contract),
for the verify command, the runner's sweep, and the report's damaged results."""

import shutil
from pathlib import Path

import pytest

import bench
import report
import verify
from testkit import expect_bad_input, expect_report_refuses, keep_tracked_files, no_gpu_mark

LAB = Path(bench.__file__).resolve().parent
NO_GPU = no_gpu_mark()
tracked_files_unchanged = keep_tracked_files(LAB)


@pytest.mark.parametrize("world, argv, needle", [
    (4, ["--cp", "3"], "--cp 3 must divide the number of ranks (4"),
    (4, ["--cp", "0"], "--seq-lens and --cp take positive integers"),
    (4, ["--seq-lens", "100"], "the sequence (100) must divide into 2 x CP = 8 equal chunks"),
    (4, ["--n-heads", "6", "--n-kv-heads", "4"], "n_heads (6) must be a positive multiple of n_kv_heads (4)"),
    (4, ["--iters", "0"], "--iters must be positive"),
    (4, ["--dtype", "float16"], "invalid choice: 'float16'"),
    pytest.param(4, ["--gpu", "h100"], "needs a CUDA GPU and torch sees none", marks=NO_GPU),
    pytest.param(4, ["--require-gpu"], "this target measures a GPU", marks=NO_GPU),
    (4, ["--promote", "maybe"], "invalid choice: 'maybe'"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_sweep(world, argv, needle, capsys, monkeypatch):
    monkeypatch.setenv("DT_PLANNED_WORLD", str(world))
    expect_bad_input(lambda: bench.main(argv), needle, capsys, watch=[LAB])


def test_sweep_resume_with_nothing_to_resume(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DT_PLANNED_WORLD", "2")
    expect_bad_input(lambda: bench.main(["--gpu", "cpu", "--resume", "--out-dir", str(tmp_path / "results")]),
                     "--resume: nothing to resume", capsys, watch=[tmp_path])


@pytest.mark.parametrize("world, argv, needle", [
    (2, ["--cp", "2", "--seq-len", "30"], "the sequence (30) must divide into 2 x CP = 4 equal chunks"),
    (4, ["--cp", "3", "--seq-len", "36"], "--cp 3 must divide the number of ranks (4)"),
    (2, ["--cp", "2", "--n-kv-heads", "3"], "n_heads (8) must be a positive multiple of n_kv_heads (3)"),
    (2, ["--cp", "2", "--batch", "0"], "--batch must be positive"),
    (2, ["--cp", "2", "--impl", "ring"], "invalid choice: 'ring'"),
    (2, ["--cp", "2", "--kernel", "flash"], "invalid choice: 'flash'"),
    pytest.param(2, ["--cp", "2", "--gpu", "h100"], "needs a CUDA GPU and torch sees none", marks=NO_GPU),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_verify(world, argv, needle, capsys, monkeypatch):
    monkeypatch.setenv("DT_PLANNED_WORLD", str(world))
    expect_bad_input(lambda: verify.main(argv), needle, capsys, watch=[LAB])


@pytest.mark.parametrize("damage, needle", [
    (lambda r: shutil.rmtree(r), "results folder"),
    (lambda r: [p.unlink() for p in r.glob("*.csv")], "no correctness_*.csv or bench_*.csv"),
    (lambda r: (r / "bench_cpu_ws4.csv").write_text('impl,"cp\n'), "bench_cpu_ws4.csv is not a readable CSV"),
    (lambda r: (r / "correctness_cpu_ws4.csv").write_text(""), "correctness_cpu_ws4.csv is empty"),
    (lambda r: (r / "bench_cpu_ws4.csv").write_text((r / "bench_cpu_ws4.csv").read_text().replace(
        "\nours,1,", "\nours,one,", 1)), "column cp: 'one' is not an int"),
    (lambda r: (r / "bench_cpu_ws4.csv").write_text((r / "bench_cpu_ws4.csv").read_text()[:-25]),
     "a half-written last row"),
], ids=["no-folder", "no-csv", "quote", "empty", "text-in-number", "cut"])
def test_report_refuses_damaged_results(damage, needle, tmp_path, capsys):
    expect_report_refuses(report.main, LAB, damage, needle, tmp_path, capsys)


def test_report_arguments(capsys):
    expect_bad_input(lambda: report.main(["--bogus"]), "unrecognized arguments: --bogus", capsys, watch=[LAB])
