"""Experiments never publish: a sweep of other shapes completes into runs/ and leaves a copy of the committed
results/ exactly as it was (common.runner.experiment, the one rule). One rank: t = 1 only."""

import shutil
from pathlib import Path

import bench
from testkit import tree_state

LAB = Path(bench.__file__).resolve().parent


def test_a_sweep_of_other_shapes_stays_in_runs(tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(LAB / "results", results)
    before = tree_state(results)
    assert bench.main(["--gpu", "cpu", "--seq-lens", "8", "--d-models", "32", "--seq-len", "8", "--d-model", "32",
                       "--head-dim", "8", "--batch", "1", "--warmup", "0", "--iters", "1",
                       "--results", str(results)]) in (0, None)
    out = capsys.readouterr().out
    assert "experiment (--" in out and tree_state(results) == before, out
