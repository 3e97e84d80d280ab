"""Experiments never publish: a sweep of other shapes, or one without its correctness grid, completes into runs/
and leaves a copy of the committed results/ exactly as it was (common.runner.experiment, the one rule). One
rank in this process: N = 1 only (test_runner.py runs two ranks, resumed and published)."""

import shutil
from pathlib import Path

import pytest

import bench
from common.runs import read_manifest
from testkit import tree_state

LAB = Path(bench.__file__).resolve().parent
TINY = ["--gpu", "cpu", "--seq-lens", "16", "--heads", "2/2", "--head-dim", "8", "--batch", "1",
        "--warmup", "0", "--iters", "1"]


@pytest.mark.parametrize("flags, named", [(TINY, "--seq-lens"), (TINY + ["--no-correctness"], "--correctness")])
def test_an_experiment_stays_in_runs(flags, named, tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(LAB / "results", results)
    before = tree_state(results)
    assert bench.main([*flags, "--results", str(results)]) in (0, None)
    out = capsys.readouterr().out
    assert "experiment (" in out and tree_state(results) == before, out
    kept = tmp_path / "runs" / "cpu_ws1"
    assert (kept / "bench_cpu_ws1.csv").is_file() and named in read_manifest(kept)["changed"]
