"""plan.py: bad input is one line and exit 2; a real run prints the JSON the issue asks for."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import plan

PLAN = Path(__file__).resolve().parents[1] / "plan.py"


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


def test_json_run_as_a_script():
    proc = subprocess.run([sys.executable, str(PLAN), "--params", "1B", "--gpus", "16", "--zero", "1",
                           "--json", "--top", "3"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    best = out["best"]
    for key in ("tp", "pp", "dp", "cp", "zero", "microbatch", "interleave", "recompute", "compute_s", "tp_comm_s",
                "tp_hidden_s", "pp_comm_s", "dp_comm_s", "dp_hidden_s", "bubble_fraction", "step_s", "tokens_per_s",
                "model_tflops_per_gpu", "mfu", "hardware_tflops_per_gpu", "hfu"):
        assert key in best, key
    assert set(best["memory_gb"]) == {"params", "grads", "optimizer", "activations", "buffers", "total"}
    assert best["zero"] == 1 and len(out["candidates"]) == 3 and out["candidates"][0] == best
    assert best["tp"] * best["pp"] * best["dp"] * best["cp"] == 16
    assert "mfu" in out["definitions"] and "hfu" in out["definitions"] and out["config"]["gpus"] == 16
    assert all("reason" in r for r in out["rejected"]) and out["rejected_total"] >= len(out["rejected"])
