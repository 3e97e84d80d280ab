"""Bad input to every fsdp-scaling command: one line, exit code 2, no file written, before any rank.

The sweep (its plan for every world size, data path, preset), the fake-PG study, the projection
(including a damaged sweep it reads) and the report on damaged CSVs. In process, main(argv)."""

import shutil
from pathlib import Path

import pytest

import at_scale
import bench
import project
import report
from testkit import expect_bad_input, expect_report_refuses, keep_tracked_files, no_gpu_mark
from testkit.bad_input import report_arguments_test

LAB = Path(bench.__file__).resolve().parent
NO_GPU = no_gpu_mark()


tracked_files_unchanged = keep_tracked_files(LAB)


@pytest.mark.parametrize("world, argv, needle", [
    (1, ["--strategies", "ddp,fsdp"], "--strategies got 'fsdp'; allowed: single, ddp"),
    (1, ["--grad-accum", "0"], "--grad-accum must be a positive integer"),
    (1, ["--scale-worlds", "8,12"], "--scale-worlds 12 is not a multiple of --node-size 8"),
    (1, ["--model", "huge"], "invalid choice: 'huge'"),
    (1, ["--data", "/nonexistent/dir"], "--data /nonexistent/dir: no such folder"),
    (1, ["--data", str(Path(__file__).parent)], "missing train.bin, val.bin"),
    pytest.param(1, ["--gpu", "h100"], "needs a CUDA GPU and torch sees none", marks=NO_GPU),
    (1, ["--gpu", "h900"], "unknown GPU preset 'h900'"),
    (1, ["--preflight", "--worlds", "4,6", "--hsdp-shard", "4", "--global-batch", "24"],
     "hsdp needs the world size (6) to be a multiple of its shard group (--hsdp-shard 4)"),
    (4, ["--global-batch", "12", "--grad-accum", "2"],
     "--global-batch 12 (sequences per step, in 2 micro-batches) does not split evenly over 4 ranks"),
    (2, ["--strategies", "single"], "one-process baseline; it cannot run at world size 2"),
    (1, ["--timeout-s", "0"], "--lr and --timeout-s > 0"),
    (1, ["--lr", "nan"], "expected a finite number"),
    (1, ["--preflight", "--resume", "--results", "/nonexistent/results"], "--resume: nothing to resume"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_sweep(world, argv, needle, capsys, monkeypatch):
    monkeypatch.setenv("DT_PLANNED_WORLD", str(world))
    expect_bad_input(lambda: bench.main(["--gpu", "cpu", *argv] if "--gpu" not in argv else argv), needle, capsys,
                     watch=[LAB])


@pytest.mark.parametrize("main, argv, needle", [
    (at_scale.main, ["--scale-worlds", "8,12"], "not a multiple of --node-size 8"),
    (at_scale.main, ["--node-size", "0"], "--node-size must be a positive integer"),
    (project.main, ["--gpu", "h900"], "unknown GPU preset 'h900'"),
    (project.main, ["--node-size", "-8"], "argument --node-size: expected a whole number from 0"),
], ids=["at-scale-worlds", "at-scale-node", "project-gpu", "project-node"])
def test_studies(main, argv, needle, capsys):
    expect_bad_input(lambda: main(argv), needle, capsys, watch=[LAB])


def test_projection_refuses_a_damaged_sweep(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    (results / "scaling_cpu_ws4.csv").write_text("strategy,mode\nddp,weak\n")
    expect_bad_input(lambda: project.main(["--results", str(results)]), "scaling_cpu_ws4.csv lacks the column(s)",
                     capsys, watch=[tmp_path])


@pytest.mark.parametrize("damage, needle", [
    (lambda r: shutil.rmtree(r), "results folder"),
    (lambda r: [p.unlink() for p in r.glob("*.csv")], "no scaling_*.csv, at_scale.csv or projection.csv"),
    (lambda r: (r / "at_scale.csv").write_text('strategy,"w\n'), "at_scale.csv is not a readable CSV"),
    (lambda r: (r / "scaling_cpu_ws4.csv").write_text(""), "scaling_cpu_ws4.csv is empty"),
    (lambda r: (r / "scaling_cpu_ws4.csv").write_text((r / "scaling_cpu_ws4.csv").read_text()[:-60]),
     "a half-written last row"),
    (lambda r: (r / "comms_cpu_ws4.csv").write_bytes(b"\xff\xfe" + b"junk" * 30), "not UTF-8 text"),
    (lambda r: (r / "projection.csv").write_text("a,b\n1,2\n"), "projection.csv lacks the column(s)"),
    (lambda r: (r / "at_scale.csv").write_text((r / "at_scale.csv").read_text().replace(
        "\nddp,8,", "\nddp,eight,", 1)), "column world_size: 'eight' is not an int"),
], ids=["no-folder", "no-csv", "quote", "empty", "cut", "binary", "foreign", "text-in-number"])
def test_report_refuses_damaged_results(damage, needle, tmp_path, capsys):
    expect_report_refuses(report.main, LAB, damage, needle, tmp_path, capsys)


test_report_arguments = report_arguments_test(report.main, LAB)
