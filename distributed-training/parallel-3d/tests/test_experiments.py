"""Experiments never publish: the activation study and the at-scale study, given measurement flags, complete
into runs/ and leave a copy of the committed results/ exactly as it was (common.runs.experiment_flags, the one
rule; the 3D runner's own case is test_runner.py). The at-scale study is stubbed to one row: what is tested is
where its rows go (test_at_scale.py measures)."""

import shutil
from pathlib import Path

import activations
import at_scale
from common.testing import tree_state

LAB = Path(activations.__file__).resolve().parent


def test_an_activation_study_of_another_shape_stays_in_runs(tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(LAB / "results", results)
    before = tree_state(results)
    small = ["--microbatch", "1", "--seq", "64", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128"]
    assert activations.main(["--gpu", "cpu", "--tp", "1", "--recompute", "none", *small,
                             "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "experiment (--" in out and tree_state(results) == before, out


def test_an_at_scale_study_for_another_gpu_stays_in_runs(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    shutil.copytree(LAB / "results", results)
    before = tree_state(results)

    def one_row(study, gpu, writer, term_writer):
        writer.write({**{c: 1 for c in at_scale.COLUMNS}, "study": study, "role": "first"})

    monkeypatch.setattr(at_scale, "measure_study", one_row)
    assert at_scale.main(["--gpu", "a100", "--studies", "8B@64", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "experiment (--gpu" in out and tree_state(results) == before, out
