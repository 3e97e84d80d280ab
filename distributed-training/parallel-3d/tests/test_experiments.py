"""Experiments never publish: the activation study, the at-scale study and the ranking set, given measurement
flags, complete into runs/ and leave a copy of the committed results/ exactly as it was (common.runs.experiment_flags,
the one rule; the 3D runner's own case is test_runner.py). The at-scale study and the ranking set are stubbed: what is
tested is where their rows go (test_at_scale.py measures)."""

import shutil
from pathlib import Path

import activations
import at_scale
from testkit import tree_state

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


def _stub_ranking(monkeypatch, tmp_path):
    """The ranking set with its measurements stubbed (a row per layout, a calibration per world size) in a copy
    of this lab's folders: what is tested is where its rows go."""
    import ranking

    shutil.copytree(LAB / "results", tmp_path / "results")
    monkeypatch.setattr(ranking, "LAB", tmp_path)
    monkeypatch.setattr(ranking, "SCRATCH", tmp_path / "runs" / "ranking_cpu_launches")

    def cal(quantities, world):
        return [{"quantity": q, "world": world, "value": 1.0, "unit": "-", "method": "stub"} for q in quantities]

    monkeypatch.setattr(ranking, "local_calibration", lambda: cal(["op_us", "cores"], 1))
    monkeypatch.setattr(ranking, "collective_calibration",
                        lambda world, cfg: cal(["allreduce_alpha_us", "allreduce_busbw_GBps"], world))

    def launch(cases, cfg):
        return [{"variant": f"z{c.zero}-{c.recompute}-v{c.interleave}", "model": "stub", "global_batch": "8",
                 "num_microbatches": "1", "stage_layers": "6", "step_time_ms": "1", "step_time_min_ms": "1",
                 "step_time_max_ms": "1", "counts_match_design": "true", "git_commit": "stub"} for c in cases]

    monkeypatch.setattr(ranking, "launch", launch)
    return ranking


def test_a_ranking_set_of_one_group_stays_in_runs(tmp_path, monkeypatch, capsys):
    """--groups ws4-gb4 (one group of six) must not replace ranking_cpu.csv with its rows alone (--groups ws4 once did)."""
    ranking = _stub_ranking(monkeypatch, tmp_path)
    before = tree_state(tmp_path / "results")
    assert ranking.main(["--groups", "ws4-gb4", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "experiment (--groups, --steps" in out and tree_state(tmp_path / "results") == before, out
    assert ranking.main([]) == 0  # the preset's set, the same stubs: published
    assert "published 4 file(s)" in capsys.readouterr().out and tree_state(tmp_path / "results") != before
