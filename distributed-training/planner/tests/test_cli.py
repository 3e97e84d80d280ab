"""plan.py: bad input is one line and exit 2; a real run prints the JSON the issue asks for."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner import plan

LABS = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, needle", [
    (["--params", "7B", "--gpus", "0"], "--gpus must be positive, got 0"),
    # heads 3: no TP degree above 1 divides them, and nothing else can use 8 GPUs with --dp 1
    (["--layers", "4", "--hidden", "96", "--heads", "3", "--seq", "1024", "--gpus", "8", "--dp", "1"],
     "no configuration divides: tp=2 does not divide heads 3"),
    (["--params", "7B", "--tp", "3"], "tp=3 does not divide heads 32"),
    (["--params", "7B", "--gpu", "v100"], "unknown GPU preset 'v100'; valid:"),
    (["--params", "7B", "--gpu", "a100", "--precision", "fp8"], "a100 has no FP8 tensor cores"),
    (["--params", "7B", "--layers", "4"], "either --params or --layers"),
    (["--params", "7B", "--calibrate", "nowhere.csv"], "--calibrate: no such file nowhere.csv"),
    (["--params", "7B", "--zero", "1", "--tp", "2"], "--zero 1 with TP, PP or CP: the pytorch stack runs ZeRO-1 as "
                                                     "DDP + ZeroRedundancyOptimizer"),
    (["--params", "7B", "--zero", "0", "--recompute", "full"], "--zero 0 with --recompute full"),
    (["--params", "7B", "--memory-headroom", "0"], "--memory-headroom must be in (0, 1], got 0.0"),
    (["--params", "8B", "--gpus", "64", "--pp", "3", "--pipeline-split", "even"],
     "pp=3 does not divide the 32 layers (--pipeline-split even)"),
    (["--params", "8B", "--kv-heads", "5"], "--heads 32 is not a multiple of --kv-heads 5"),
    (["--params", "7B", "--recompute", "selective"], "--recompute selective is not what the pytorch stack runs"),
    (["--params", "7B", "--cp", "2", "--recompute", "op"], "the pytorch stack runs none, full with context"),
    (["--from-run", "nowhere.csv"], "--from-run: no such file nowhere.csv"),
    (["--params", "7B", "--from-run", "nowhere.csv"], "--from-run reads the run's own model"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as e:
        plan.main(argv)
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert needle in captured.err and captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1, captured.err


def test_nothing_fits_exits_1_with_reasons(capsys):
    assert plan.main(["--params", "405B", "--gpus", "8", "--gpu", "a100-40gb"]) == 1
    out = capsys.readouterr().out
    assert "nothing fits in memory" in out and "does not fit: needs" in out


def test_json_run_as_a_module():
    # as `make plan` runs it: python -m planner.plan with PYTHONPATH=distributed-training
    proc = subprocess.run([sys.executable, "-m", "planner.plan", "--params", "1B", "--gpus", "16", "--zero", "3",
                           "--json", "--top", "3"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(LABS)})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    best = out["best"]
    for key in ("tp", "pp", "dp", "cp", "zero", "microbatch", "interleave", "recompute", "compute_s", "tp_comm_s",
                "tp_hidden_s", "pp_comm_s", "dp_comm_s", "dp_hidden_s", "bubble_fraction", "step_s", "tokens_per_s",
                "model_tflops_per_gpu", "mfu", "hardware_tflops_per_gpu", "hfu"):
        assert key in best, key
    assert set(best["memory_gb"]) == {"params", "grads", "optimizer", "activations", "buffers", "total"}
    assert best["zero"] == 3 and len(out["candidates"]) == 3 and out["candidates"][0] == best
    assert out["stack"]["name"] == "pytorch" and out["stack"]["runner"] == "parallel-3d" and out["run"]
    assert best["tp"] * best["pp"] * best["dp"] * best["cp"] == 16
    assert "mfu" in out["definitions"] and "hfu" in out["definitions"] and out["config"]["gpus"] == 16
    assert all("reason" in r for r in out["rejected"]) and out["rejected_total"] >= len(out["rejected"])


@pytest.mark.parametrize("flag, values", [
    ("--recompute", ("none", "selective", "full", "op")), ("--zero", ("0", "1", "2", "3")),
    ("--attention-kernel", ("best", "fa2")), ("--grad-bytes", ("2", "4")), ("--precision", ("bf16", "fp8"))])
def test_every_value_help_lists_is_accepted(capsys, flag, values):
    # Issue 15: `--recompute none` was refused ("invalid choice: None"); every listed value must plan.
    for value in values:  # Megatron's stack has them all (the pytorch stack refuses what FSDP2 lacks: above)
        assert plan.main(["--params", "1B", "--gpus", "8", flag, value, "--json", "--stack", "megatron"]) == 0, \
            (flag, value)
        out = json.loads(capsys.readouterr().out)
        key = flag[2:].replace("-", "_")
        assert str(out["config"][key]) == value
        if key in ("recompute", "zero"):
            assert str(out["best"][key]) == value


@pytest.mark.parametrize("negated", ["--no-fused-kernels", "--rope", "--no-tp-overlap", "--no-dp-overlap",
                                     "--no-sequence-parallel", "--no-flash-attention", "--dropout"])
def test_switches_plan(capsys, negated):
    assert plan.main(["--params", "1B", "--gpus", "16", negated]) == 0
    assert "best: step" in capsys.readouterr().out


@pytest.mark.parametrize("gpus", [384, 992, 1536, 2240])
def test_odd_gpu_counts_plan(capsys, gpus):
    # Published runs used GPU counts with factors of 3, 5, 7 and 31 (BLOOM, OPT, SC21, MT-NLG).
    assert plan.main(["--params", "175B", "--gpus", str(gpus), "--gpu", "a100", "--seq", "2048",
                      "--global-batch", "1024", "--json", "--top", "1"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["tp"] * best["pp"] * best["dp"] * best["cp"] == gpus
    assert abs(best["global_batch"] - 1024) <= 0.05 * 1024 and best["global_batch"] % best["dp"] == 0


def test_uneven_stages_and_the_nearest_batch_are_said(capsys):
    # 70 layers on 12 stages (pinned), 96 GPUs: the split is printed; 992 GPUs and 1,024 sequences: the batch is.
    argv = ["--layers", "70", "--hidden", "2048", "--heads", "16", "--seq", "2048", "--gpus", "96", "--pp", "12",
            "--global-batch", "96"]
    assert plan.main(argv) == 0
    out = capsys.readouterr().out
    split = out.split("layers per stage ")[1].split()[0].rstrip(";")
    first, mid, last = (int(x) for x in split.replace("x10", "").split("+"))
    assert first + 10 * mid + last == 70
    assert plan.main(["--params", "13B", "--gpus", "992", "--gpu", "a100", "--tp", "8", "--pp", "1",
                      "--global-batch", "1024", "--seq", "2048"]) == 0
    assert "runs a global batch of 992 sequences, not 1024" in capsys.readouterr().out
