"""Bad input to every fp8-train command: one line, exit code 2, no file written, before training.

The runner (faults outside the run, resume with nothing to resume, data, preset, precision settings;
unavailable backends are in test_train.py), the benchmark, the report and the dashboard command on
missing and damaged CSVs. In process, main(argv)."""

import shutil
from pathlib import Path

import pytest

import bench
import dashboard
import report
import train
from testkit import expect_bad_input, expect_report_refuses, keep_tracked_files, no_gpu_mark

LAB = Path(train.__file__).resolve().parent
NO_GPU = no_gpu_mark()


tracked_files_unchanged = keep_tracked_files(LAB)


@pytest.mark.parametrize("argv, needle", [
    (["--inject", "nan@500", "--steps", "10"], "--inject nan@500: the run has steps 0..9 (--steps 10)"),
    (["--inject", "nan@x"], "expected KIND@STEP"),
    (["--inject", "overflow@5", "--runs", "bf16,fp8:emulated"], "has none (use --runs with FP8 runs only)"),
    (["--data", "/nonexistent/dir"], "--data /nonexistent/dir: missing train.bin, val.bin"),
    pytest.param(["--gpu", "h100"], "needs a CUDA GPU and torch sees none", marks=NO_GPU),
    (["--gpu", "h900"], "unknown GPU preset 'h900'"),
    (["--runs", "fp99"], "fp99"),
    (["--batch", "6", "--grad-accum", "4"], "--batch 6 must be divisible by --grad-accum 4"),
    (["--on-nan", "rollback", "--ckpt-every", "0"], "--on-nan rollback needs checkpoints"),
    (["--nan-lr-factor", "2"], "--nan-lr-factor must be in (0, 1)"),
    (["--lr", "inf"], "expected a finite number"),
    (["--steps", "-1"], "--steps must be >= 1"),
    (["--data-size", "lots"], "cannot read size 'lots'"),
    (["--promote", "later"], "invalid choice: 'later'"),
    (["--mx-scale-rule", "floor"], "invalid choice: 'floor'"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_runner(argv, needle, capsys):
    expect_bad_input(lambda: train.main(["--gpu", "cpu", *argv] if "--gpu" not in argv else argv), needle, capsys,
                     watch=[LAB])


def test_resume_with_nothing_to_resume(tmp_path, capsys):
    argv = ["--gpu", "cpu", "--resume", "--results", str(tmp_path / "results" / "cpu"), "--ckpt-dir",
            str(tmp_path / "c")]
    expect_bad_input(lambda: train.main(argv), "--resume: nothing to resume", capsys, watch=[tmp_path])


@pytest.mark.parametrize("argv, needle", [
    (["--hidden", "100"], "--hidden sizes must be multiples of 16"),
    (["--parts", "step,speed"], "--parts takes step, gemm, monitor"),
    (["--iters", "0"], "--iters/--batch/--seq-len/--n-layers must be >= 1"),
    (["--resume"], "--resume: fp8-train-bench measures every part it is given afresh"),
    (["--gpu", "h900"], "unknown GPU preset 'h900'"),
])
def test_benchmark(argv, needle, capsys):
    expect_bad_input(lambda: bench.main(["--gpu", "cpu", *argv]), needle, capsys, watch=[LAB])


def _set_cell(path: Path, column: str, value: str) -> None:
    """Put `value` into `column` of the first data row (a hand edit, a botched merge)."""
    lines = path.read_text().split("\n")
    header = lines[0].split(",")
    row = lines[1].split(",")  # the first columns hold no commas or quotes
    row[header.index(column)] = value
    lines[1] = ",".join(row)
    path.write_text("\n".join(lines))


@pytest.mark.parametrize("damage, needle", [
    (lambda r: shutil.rmtree(r), "results folder"),
    (lambda r: [p.unlink() for p in r.glob("*/steps.csv")], "no result folder with a steps.csv"),
    (lambda r: (r / "cpu_ws1" / "steps.csv").write_text(""), "steps.csv is empty"),
    (lambda r: (r / "cpu_ws1" / "fp8.csv").write_text('run,"step\n'), "fp8.csv is not a readable CSV"),
    (lambda r: _set_cell(r / "cpu_ws1" / "steps.csv", "step", "zero"), "line 2, column step: 'zero' is not an int"),
    (lambda r: (r / "cpu_ws1-demo" / "layers.csv").write_text((r / "cpu_ws1-demo" / "layers.csv").read_text()[:-30]),
     "a half-written last row"),
    (lambda r: (r / "cpu_ws1" / "bench_gemm.csv").write_text("a,b\n1,2\n"), "bench_gemm.csv lacks the column(s)"),
    (lambda r: (r / "cpu_ws1" / "events.csv").write_bytes(b"\x00" * 100), "NUL bytes"),
], ids=["no-folder", "no-steps", "empty-steps", "quote", "text-in-number", "cut", "foreign", "binary"])
def test_report_refuses_damaged_results(damage, needle, tmp_path, capsys):
    expect_report_refuses(report.main, LAB, damage, needle, tmp_path, capsys)


def test_report_arguments(capsys):
    expect_bad_input(lambda: report.main(["--bogus"]), "unrecognized arguments: --bogus", capsys, watch=[LAB])


@pytest.mark.parametrize("run, needle", [
    ("nowhere", "expected DIR:RUN with RUN in DIR/steps.csv"),
    (f"{LAB / 'results' / 'cpu_ws1'}:no-such-run", "expected DIR:RUN with RUN in DIR/steps.csv"),
    ("{tmp}:fp32-s0", "steps.csv: line 1601 has"),
], ids=["no-dir", "no-run", "damaged"])
def test_dashboard_command(run, needle, tmp_path, capsys):
    (tmp_path / "steps.csv").write_text((LAB / "results" / "cpu_ws1-wide" / "steps.csv").read_text()[:-200])  # cut
    argv = ["--run", run.format(tmp=tmp_path), "--out", str(tmp_path / "d.html")]
    expect_bad_input(lambda: dashboard.main(argv), needle, capsys, watch=[LAB, tmp_path])
