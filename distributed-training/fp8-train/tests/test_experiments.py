"""Experiments never publish: a training run and a benchmark with other settings complete into runs/ and leave
a copy of the committed results/ exactly as it was (common.runs.experiment_flags, the one rule)."""

import shutil
from pathlib import Path

import bench
import train
from testkit import tree_state

LAB = Path(train.__file__).resolve().parent


def _copy(tmp_path) -> tuple[Path, list]:
    results = tmp_path / "results"
    shutil.copytree(LAB / "results" / "cpu_ws1", results / "cpu_ws1")
    return results, tree_state(results)


def test_a_training_run_with_other_settings_stays_in_runs(tmp_path, capsys, tiny):
    results, before = _copy(tmp_path)
    args = tiny.TINY[:tiny.TINY.index("--promote")]  # the default, --promote auto (TINY publishes its runs)
    assert train.main(args + ["--runs", "fp32", "--steps", "2", "--val-every", "0", "--results",
                                   str(results / "cpu_ws1"), "--ckpt-dir", str(tmp_path / "ckpt")]) == 0
    out = capsys.readouterr().out
    assert "experiment (--" in out and tree_state(results) == before, out


def test_a_benchmark_with_other_sizes_stays_in_runs(tmp_path, capsys):
    results, before = _copy(tmp_path)
    assert bench.main(["--gpu", "cpu", "--hidden", "32", "--n-layers", "1", "--batch", "2", "--seq-len", "16",
                       "--warmup", "1", "--iters", "2", "--threads", "1", "--runs", "fp32", "--parts", "step",
                       "--results", str(results / "cpu_ws1")]) == 0
    out = capsys.readouterr().out
    assert "experiment (--" in out and tree_state(results) == before, out


def test_results_elsewhere_keeps_its_run_folder_beside_them(tmp_path, tiny):
    """`train.py --results /some/dir` publishes into /some/dir; its run folder and lock are /some/runs/dir, not
    /runs/dir at the top of the filesystem (the parent of /some)."""
    out = tmp_path / "some" / "dir"
    assert train.main(tiny.TINY + ["--runs", "fp32", "--steps", "2", "--val-every", "0", "--results", str(out),
                                   "--ckpt-dir", str(tmp_path / "ckpt")]) == 0
    assert (tmp_path / "some" / "runs" / "dir" / "run.json").is_file() and (out / "steps.csv").is_file()
    assert not (tmp_path / "runs").exists()
