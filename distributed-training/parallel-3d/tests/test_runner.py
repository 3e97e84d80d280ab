"""The runners end to end, in process (main(argv)), into a temporary results folder:

- the 1-GPU path of `make parallel-3d-gpu` (bf16 baseline with FSDP2's policy on a 1-rank group, the
  activation study at t = 1 in bf16, the report), rehearsed on the CPU with the same code, a tiny model;
- run folders: a launch writes into runs/<tag>/ and, complete, merges its rows into results/ (other
  degrees' rows stay); an interrupted launch leaves results/ as it was and --resume finishes it; a launch
  whose run folder is locked is refused in one line.
"""

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

import activations
import report
import train
from common import runs as common_runs
from common.runs import Lock
from testkit import expect_bad_input

LAB = Path(train.__file__).resolve().parent
TINY = ["--gpu", "cpu", "--tp", "1", "--pp", "1", "--dp", "1", "--interleave", "1", "--model", "tiny",
        "--global-batch", "4", "--microbatch", "2", "--warmup", "0", "--steps", "1"]


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _state(run_dir: Path) -> str:
    return json.loads((run_dir / "run.json").read_text())["state"]


def test_the_one_gpu_path_rehearsed_on_cpu(tmp_path, capsys):
    """What `make parallel-3d-gpu` runs on one GPU, in bf16 on the CPU: the baseline trains like the fp32 model
    within bf16's error, issues exactly the design's collectives (none: FSDP2 on one rank), the activation
    study's bytes equal PyTorch's terms, and the report is written from those CSVs."""
    results = tmp_path / "results"
    common = [*TINY, "--recompute", "none,full", "--results", str(results), "--promote", "merge"]
    assert train.main([*common, "--precision", "bf16"]) == 0
    runs = _rows(results / "runs_cpu.csv")
    assert {r["variant"] for r in runs} == {"z3-none-v1", "z3-full-v1"}
    assert all(r["precision"] == "bf16" and r["counts_match_design"] == "true" for r in runs)
    assert not (results / "comms_cpu.csv").exists() or not _rows(results / "comms_cpu.csv")  # one rank: no traffic
    assert _state(tmp_path / "runs" / "cpu_ws1_tp1pp1dp1") == "merged"

    fp32 = tmp_path / "fp32"
    assert train.main([*TINY, "--recompute", "none", "--results", str(fp32 / "results"), "--promote", "merge"]) == 0
    ref = _rows(fp32 / "results" / "runs_cpu.csv")[0]
    for r in runs:  # same weights, same batches: bf16 compute with fp32 master weights stays within bf16's error
        assert float(r["loss_first"]) == pytest.approx(float(ref["loss_first"]), rel=1e-2)
        assert float(r["loss_last"]) == pytest.approx(float(ref["loss_last"]), rel=1e-2)

    small = ["--microbatch", "1", "--seq", "64", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128"]
    assert activations.main(["--gpu", "cpu", "--tp", "1", "--precision", "bf16", *small, "--results", str(results),
                             "--promote", "merge"]) == 0
    acts = _rows(results / "activations_cpu.csv")
    assert {r["recompute"] for r in acts} == {"none", "op", "full"}
    assert all(r["dtype"] == "bfloat16" and r["measured_bytes"] == r["torch_terms_bytes"] for r in acts)

    assert report.main(["--results", str(results), "--out", str(tmp_path / "REPORT.md")]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "bf16" in text and "{{" not in text
    capsys.readouterr()


def test_a_launch_merges_its_rows_and_keeps_the_others(tmp_path, capsys):
    """Into a copy of the committed results: an experiment (other measurement flags) stays in runs/; published by
    hand with --merge, its row replaces the row of the same key and every other row stays."""
    results = tmp_path / "results"
    shutil.copytree(LAB / "results", results)
    before = _rows(results / "runs_cpu.csv")
    assert train.main([*TINY, "--recompute", "none", "--results", str(results)]) == 0
    assert "experiment (--microbatch" in capsys.readouterr().out and _rows(results / "runs_cpu.csv") == before
    assert common_runs.main(["promote", str(tmp_path / "runs" / "cpu_ws1_tp1pp1dp1"), "--merge"]) == 0
    after = _rows(results / "runs_cpu.csv")
    new = [r for r in after if r not in before]
    assert [(r["variant"], r["world_size"]) for r in new] == [("z3-none-v1", "1")]
    key = ("variant", "tp", "pp", "dp", "world_size", "nnodes")
    assert [r for r in before if tuple(r[k] for k in key) != tuple(new[0][k] for k in key)] == \
        [r for r in after if r is not new[0] and r not in new]  # every other row, in order


def test_the_preset_is_published_and_other_flags_are_an_experiment():
    """--promote auto merges a launch of the preset's measurement settings (degrees and variants are not among
    them), and keeps any other in runs/."""
    cfg, _ = train.resolve(replace(train.preset("cpu"), tp=2, pp=2, dp=2, recompute=("full",), interleave=(2,)))
    assert train.changed(cfg) == []
    assert train.changed(train.resolve(replace(train.preset("cpu"), steps=1, stage_layers=(1, 5)))[0]) == \
        ["--stage-layers", "--steps"]


def test_an_interrupted_launch_leaves_results_and_resumes(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    argv = [*TINY, "--recompute", "none,full", "--results", str(results), "--promote", "merge"]
    measure, calls = train.Run.measure, []

    def stopped_on_the_second(self, v):
        calls.append(v.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measure(self, v)

    monkeypatch.setattr(train.Run, "measure", stopped_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        train.main(argv)
    run_dir = tmp_path / "runs" / "cpu_ws1_tp1pp1dp1"
    assert not results.exists() and _state(run_dir) == "incomplete" and len(_rows(run_dir / "runs_cpu.csv")) == 1
    monkeypatch.setattr(train.Run, "measure", measure)
    assert train.main([*argv, "--resume"]) == 0  # measures the variant left, then publishes both
    assert len(_rows(results / "runs_cpu.csv")) == 2 and _state(run_dir) == "merged"
    assert "merged 4 file(s)" in capsys.readouterr().out


def test_a_locked_run_folder_is_refused(tmp_path, capsys):
    results = tmp_path / "results"
    lock = Lock(tmp_path / "runs" / "cpu_ws1_tp1pp1dp1")
    lock.acquire()  # another run of the same launch is writing
    try:
        expect_bad_input(lambda: train.main([*TINY, "--results", str(results)]), "is being written by another run",
                         capsys, watch=[tmp_path / "runs" / "cpu_ws1_tp1pp1dp1"])
    finally:
        lock.release()
    assert not results.exists()
