"""Bad input: one line on stderr, exit code 2, nothing written, before any process group (the project contract),
for the verify command, the runner's sweep, and the report's damaged results."""

from pathlib import Path

import pytest

import bench
import report
import verify
from testkit import (expect_bad_input, expect_nothing_to_resume, expect_refused_at, expect_report_refuses,
                     keep_tracked_files, no_gpu_mark, refusals, report_damages)

LAB = Path(bench.__file__).resolve().parent
NO_GPU = no_gpu_mark()
tracked_files_unchanged = keep_tracked_files(LAB)


@pytest.mark.parametrize("world, argv, needle", refusals([
    (4, ["--cp", "3"], "--cp 3 must divide the number of ranks (4"),
    (4, ["--cp", "0"], "--cp degrees must be positive"),
    (4, ["--seq-lens", "100"], "the sequence (100) must divide into 2 x CP = 8 equal chunks"),
    (4, ["--n-heads", "6", "--n-kv-heads", "4"], "n_heads (6) must be a positive multiple of n_kv_heads (4)"),
]), ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_sweep(world, argv, needle, capsys, monkeypatch):
    expect_refused_at(bench.main, world, argv, needle, capsys, monkeypatch, watch=[LAB])


def test_sweep_resume_with_nothing_to_resume(tmp_path, capsys, monkeypatch):
    expect_nothing_to_resume(bench.main, tmp_path, capsys, monkeypatch)


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
    expect_refused_at(verify.main, world, argv, needle, capsys, monkeypatch, watch=[LAB])


@pytest.mark.parametrize("damage, needle", report_damages([
    ("quote", lambda r: (r / "bench_cpu_ws4.csv").write_text('impl,"cp\n'), "bench_cpu_ws4.csv is not a readable CSV"),
    ("text-in-number", lambda r: (r / "bench_cpu_ws4.csv").write_text((r / "bench_cpu_ws4.csv").read_text().replace(
        "\nours,1,", "\nours,one,", 1)), "column cp: 'one' is not an int"),
]))
def test_report_refuses_damaged_results(damage, needle, tmp_path, capsys):
    expect_report_refuses(report.main, LAB, damage, needle, tmp_path, capsys)


def test_report_arguments(capsys):
    expect_bad_input(lambda: report.main(["--bogus"]), "unrecognized arguments: --bogus", capsys, watch=[LAB])
