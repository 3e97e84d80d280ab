"""Bad input to parallel-3d's commands: one line, exit code 2, no file written, before any rank starts;
the report on missing and damaged CSVs (common/csvread.py's checks). In process, main(argv)."""

import shutil
from pathlib import Path

import pytest

import at_scale
import report
import train
from testkit import expect_bad_input, expect_report_refuses, keep_tracked_files, no_gpu_mark

LAB = Path(train.__file__).resolve().parent
NO_GPU = no_gpu_mark()


tracked_files_unchanged = keep_tracked_files(LAB)


@pytest.mark.parametrize("argv, needle", [
    (["--tp", "3", "--pp", "2", "--dp", "2", "--world", "8"], "world size 8 is not a multiple of tp x pp = 6"),
    (["--tp", "2", "--pp", "2", "--dp", "2", "--world", "4"], "but the world is 4 ranks"),
    (["--tp", "2", "--pp", "2", "--dp", "2"], "needs 8 ranks: launch it with torchrun"),
    (["--recompute", "most"], "--recompute 'most'; allowed: none, op, full"),
    (["--zero", "1"], "--zero 1 is not available"),
    (["--interleave", "2"], "--interleave 2 needs --pp > 1"),
    (["--lr", "nan"], "expected a finite number"),
    (["--data", "/nonexistent"], "--data /nonexistent: missing train.bin, val.bin"),
    (["--resume"], "--resume: nothing to resume in"),
    (["--promote", "sometimes"], "--promote"),
    pytest.param(["--gpu", "h100"], "needs a CUDA GPU and torch sees none", marks=NO_GPU),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_runner(argv, needle, capsys):
    expect_bad_input(lambda: train.main(["--gpu", "cpu", *argv] if "--gpu" not in argv else argv), needle, capsys,
                     watch=[LAB])


def test_at_scale_study(capsys):
    expect_bad_input(lambda: at_scale.main(["--studies", "70B"]), "is not MODEL@GPUS", capsys, watch=[LAB])


@pytest.mark.parametrize("damage, needle", [
    (lambda r: shutil.rmtree(r), "no results folder"),
    (lambda r: (r / "runs_cpu.csv").write_text('preset,"variant\n'), "runs_cpu.csv is not a readable CSV"),
    (lambda r: (r / "comms_cpu.csv").write_text(""), "comms_cpu.csv is empty"),
    (lambda r: (r / "runs_cpu.csv").write_text((r / "runs_cpu.csv").read_text()[:-30]), "a half-written last row"),
    (lambda r: (r / "at_scale.csv").write_text("a,b\n1,2\n"), "at_scale.csv lacks the column(s)"),
    (lambda r: (r / "activations_cpu.csv").write_bytes(b"\x00" * 64), "NUL bytes"),
], ids=["no-folder", "quote", "empty", "cut", "foreign", "binary"])
def test_report_refuses_damaged_results(damage, needle, tmp_path, capsys):
    expect_report_refuses(report.main, LAB, damage, needle, tmp_path, capsys)
