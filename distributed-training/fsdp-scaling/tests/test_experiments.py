"""Experiments never publish: each of this lab's publishing targets, given measurement flags of its own or of
the sweep's ARGS (make passes them to every step of fsdp-scaling-run), completes into runs/ and leaves a copy
of the committed results/ exactly as it was (common.runs.experiment_flags, the one rule).

The fake-process-group study is stubbed to one row per (strategy, world): what is tested is where its rows
go, not how they are measured (test_at_scale.py measures)."""

import shutil
from pathlib import Path

import pytest

import at_scale
import bench
import project
from testkit import tree_state

LAB = Path(bench.__file__).resolve().parent
ISSUE_FLAGS = ["--strategies", "ddp", "--modes", "weak", "--warmup", "0", "--steps", "2"]


def _stub_row(strategy: str, world: int, cfg) -> dict:
    return {**{c: 1 for c in at_scale.COLUMNS}, "strategy": strategy, "world_size": world, "backend": "fake",
            "model": "tiny", "optimizer": "adamw"}


@pytest.mark.parametrize("target", ["sweep", "at-scale", "project"])
def test_an_experiment_stays_in_runs_and_results_are_unchanged(target, tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    shutil.copytree(LAB / "results", results)
    before = tree_state(results)
    if target == "sweep":  # one launch of one rank: the whole sweep of --worlds 1, complete
        code = bench.main(["--gpu", "cpu", "--worlds", "1", *ISSUE_FLAGS, "--micro-batch", "2", "--grad-accum", "1",
                           "--results", str(results)])
        folder = tmp_path / "runs" / "scaling_cpu_ws1"
    elif target == "at-scale":
        monkeypatch.setattr(at_scale, "measure_one", _stub_row)
        code = at_scale.main(["--gpu", "cpu", "--worlds", "1,2,4", *ISSUE_FLAGS,
                              "--results", str(results)])
        folder = tmp_path / "runs" / "at_scale"
    else:
        code = project.main(["--gpu", "cpu", *ISSUE_FLAGS, "--results", str(results)])
        folder = tmp_path / "runs" / "projection"
    out = capsys.readouterr().out
    assert code == 0 and "experiment (--" in out and "unchanged" in out, out
    assert tree_state(results) == before  # nothing published: no CSV, no config
    assert '"state": "complete"' in (folder / "run.json").read_text()


def test_the_preset_is_still_published(tmp_path, monkeypatch, capsys):
    """The same step with only operational flags (make's --gpu/--worlds) is the preset's run: published."""
    results = tmp_path / "results"
    monkeypatch.setattr(at_scale, "measure_one", _stub_row)
    assert at_scale.main(["--gpu", "cpu", "--worlds", "1,2,4", "--results", str(results)]) == 0
    assert "published 2 file(s)" in capsys.readouterr().out and (results / "at_scale.csv").is_file()
