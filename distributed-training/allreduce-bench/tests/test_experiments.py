"""Experiments never publish: the sweep and the overhead benchmark, given measurement flags, complete into runs/
and leave a copy of the committed results/ exactly as it was (common.runner.experiment, the one rule).
nccl-tests needs GPUs and its binary: its decision, the same rule, is checked without running it."""

import shutil
from dataclasses import replace
from pathlib import Path

import bench
import nccl_tests
import overhead
from testkit import tree_state

LAB = Path(bench.__file__).resolve().parent


def _copy(tmp_path) -> tuple[Path, list]:
    results = tmp_path / "results"
    shutil.copytree(LAB / "results", results)
    return results, tree_state(results)


def test_a_sweep_with_other_sizes_stays_in_runs(tmp_path, capsys):
    results, before = _copy(tmp_path)
    assert bench.main(["--gpu", "cpu", "--collectives", "all_reduce", "--dtypes", "fp32", "--max-bytes", "4K",
                       "--iters", "2", "--min-iters", "1", "--target-ms", "1", "--no-topology",
                       "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "experiment (--" in out and tree_state(results) == before, out


def test_an_overhead_run_with_other_sizes_stays_in_runs(tmp_path, capsys):
    results, before = _copy(tmp_path)
    assert overhead.main(["--gpu", "cpu", "--collectives", "all_reduce", "--max-bytes", "1M", "--rounds", "1",
                          "--target-ms", "1", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "experiment (--" in out and tree_state(results) == before, out


def test_nccl_tests_decides_by_the_same_rule():
    preset_cfg = nccl_tests.resolve(nccl_tests.preset("cpu"))[0]
    assert nccl_tests.changed(preset_cfg) == []
    assert nccl_tests.changed(nccl_tests.resolve(replace(preset_cfg, max_bytes="1M"))[0]) == ["--max-bytes"]
