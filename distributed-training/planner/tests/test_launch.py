"""plan.py prints the command that runs its choice in parallel-3d, and calibrates from parallel-3d's runs."""

import csv

import pytest

from dataclasses import fields, replace

from common.hardware import get_preset
from planner import plan
from planner.calibrate.measured_runs import calibrate_from_runs
from planner.model.cluster import make_cluster
from planner.model.shapes import Shape
from planner.search import launch
from planner.search.records import Plan

MODEL = Shape(layers=24, hidden=5120, heads=40, kv_heads=40, vocab=51200, seq=4096, ffn=20480)
ZEROS = Plan(**{f.name: 0 for f in fields(Plan) if f.name != "vs_fastest"})  # what the commands do not read


def _plan(**kw) -> Plan:
    return replace(ZEROS, **{"tp": 8, "pp": 2, "dp": 4, "cp": 1, "zero": 3, "microbatch": 1, "interleave": 2,
                             "recompute": "full", "global_batch": 64, "layers_per_stage": "12+12", **kw})


def test_commands_carry_every_degree_and_the_shape():
    cmds = launch.commands(_plan(), MODEL, "h100")
    assert "--nnodes 8 --nproc-per-node 8" in cmds.torchrun and "sbatch --nodes=8" in cmds.slurm
    for flag in ("--tp=8", "--pp=2", "--dp=4", "--zero=3", "--microbatch=1", "--global-batch=64", "--interleave=2",
                 "--recompute=full", "--layers=24", "--hidden=5120", "--kv-heads=40", "--seq=4096"):
        assert flag in cmds.torchrun, flag
    assert "TP=8 PP=2 DP=4 CP=1 GPU=h100" in cmds.slurm and cmds.notes == ()
    # context parallelism runs in parallel-3d (issue 33): --cp is a runner flag; per-op recompute is `op` in both
    cp = launch.commands(_plan(cp=2, dp=2, recompute="op"), MODEL, "h100")
    assert "--cp=2" in cp.torchrun and "--recompute=op" in cp.torchrun and "CP=2" in cp.slurm
    assert "--zero=2" in launch.commands(_plan(zero=0), MODEL, "h100").torchrun


def test_differences_name_what_parallel_3d_would_not_run_as_priced():
    from planner.search.search import Workload
    from planner.model.stacks import MEGATRON, PYTORCH

    sh = MODEL
    assert launch.differences(Workload.of(PYTORCH, sh, 64), _plan()) == []
    assert "megatron stack" in launch.differences(Workload.of(MEGATRON, sh, 64))[0]
    fp8 = launch.differences(Workload.of(PYTORCH, sh, 64, "fp8", optimizer="fused", dropout=True), _plan(zero=1))
    assert any("bf16, not fp8" in d for d in fp8) and any("no dropout" in d for d in fp8)
    assert any("AdamW foreach" in d for d in fp8)
    assert any("ZeRO-1 runs in PyTorch as DDP + ZeroRedundancyOptimizer" in d for d in fp8)
    assert "--stage-layers" not in launch.commands(_plan(), MODEL, "h100").torchrun  # even: the runner's default


def test_uneven_split_becomes_stage_layers():
    # Llama 3 405B's 126 layers on 16 stages, one fewer on the first and last
    assert launch.rank_layers("7+8x14+7", 126, 16) == [7] + [8] * 14 + [7]
    assert launch.rank_layers("5+6x10+5", 70, 12) == [5] + [6] * 10 + [5]
    assert launch.rank_layers("8x16", 128, 16) == [8] * 16 and launch.rank_layers("24", 24, 1) == [24]
    # 2 ranks x 2 chunks: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3; extras to a rank's first chunk
    assert launch.virtual_stage_layers("5+6", 11, 2, 2) == (3, 3, 2, 3)
    cmd = launch.commands(_plan(pp=2, interleave=2, layers_per_stage="11+13"), MODEL, "h100").torchrun
    assert "--stage-layers=6,7,5,6" in cmd


def test_plan_prints_the_command(capsys):
    assert plan.main(["--params", "1B", "--gpus", "16", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "run it (parallel-3d" in out and "parallel-3d/train.py --gpu=h100" in out and "sbatch --nodes=2" in out


def _runs_csv(path, rows):
    cols = ["preset", "variant", "step_time_ms", "planner_step_s"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows(rows)
    return str(path)


def test_calibration_from_measured_runs(tmp_path, capsys):
    cl = make_cluster(get_preset("h100"), 8)
    path = _runs_csv(tmp_path / "runs_h100.csv", [
        {"preset": "h100", "variant": "a", "step_time_ms": 2000.0, "planner_step_s": 1.0},  # twice as slow
        {"preset": "h100", "variant": "b", "step_time_ms": 1000.0, "planner_step_s": 0.8},
        {"preset": "h100", "variant": "c", "step_time_ms": 1250.0, "planner_step_s": 1.0},
        {"preset": "cpu", "variant": "d", "step_time_ms": 9000.0, "planner_step_s": ""}])  # not this cluster's
    got = calibrate_from_runs(cl, [path])
    assert got.matmul_tflops == pytest.approx(cl.matmul_tflops * 0.8)  # the median of 0.5, 0.8, 0.8
    assert any("3 parallel-3d run(s)" in n for n in got.notes)
    cpu_only = _runs_csv(tmp_path / "runs_cpu.csv", [{"preset": "cpu", "variant": "a", "step_time_ms": 5.0,
                                                      "planner_step_s": ""}])
    with pytest.raises(SystemExit) as e:
        plan.main(["--params", "1B", "--gpus", "8", "--calibrate", cpu_only])
    assert e.value.code == 2 and "no parallel-3d runs on h100" in capsys.readouterr().err
