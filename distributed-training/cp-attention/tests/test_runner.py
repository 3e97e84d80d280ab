"""The verify command refusing bad input in a real process, the runner end to end with resume, and the report from
its CSVs alone (the in-process bad-input matrix is test_bad_input.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

import bench
import report
from testkit import bench_twice, run_ranks

LAB = Path(__file__).resolve().parents[1]


def test_the_verify_command_refuses_bad_input():
    """The real entry point in a fresh interpreter (torch imported): one line on stderr, exit 2."""
    cmd = [sys.executable, str(LAB / "verify.py"), "--cp", "2", "--seq-len", "30"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(LAB.parent), "DT_PLANNED_WORLD": "2"})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["verify.py: error: the sequence (30) must divide into 2 x CP = 4 equal "
                                             "chunks for the load-balanced split; use a multiple of 4"]


TINY_SWEEP = ["--gpu", "cpu", "--seq-lens", "16,32", "--heads", "4/2", "--head-dim", "8",
              "--batch", "1", "--warmup", "0", "--iters", "1", "--no-correctness"]


def test_runner_end_to_end_with_resume_then_report(tmp_path):
    res = tmp_path / "results"
    first = run_ranks(bench_twice, 2, bench.main, TINY_SWEEP, str(res), timeout_s=240)[0]
    assert Path(res, "bench_cpu_ws2.csv").read_text() == first  # the resumed run appended nothing, then published
    b = pd.read_csv(res / "bench_cpu_ws2.csv")
    assert len(b) == 2 * (6 + 5)  # 2 lengths x (N = 1: sdpa, 3 of ours, 2 x torch; N = 2: 3 of ours, 2 x torch)
    assert b["verified"].dropna().all() and b["impl"].value_counts()["sdpa"] == 2
    assert ((b["fwd_sent_bytes"] == b["formula_fwd_bytes"]) & (b["bwd_sent_bytes"] == b["formula_bwd_bytes"])).all()
    assert b["load_1m"].notna().all()
    two = b[b["cp"] == 2].set_index(["impl", "seq_len"])
    assert (two.loc["ring", "fwd_calls"] == "all_reduce:1 recv:1 send:1").all()
    assert (two.loc["ulysses", "bwd_calls"] == "all_to_all:2").all()
    # GQA 4 over 2: PyTorch repeats K/V, so its forward sends twice the ring's; the ring saves less for backward
    assert (two.loc["torch-allgather", "fwd_sent_bytes"] == 2 * two.loc["ring", "fwd_sent_bytes"]).all()
    assert (two.loc["ring", "saved_bytes"] < two.loc["torch-allgather", "saved_bytes"]).all()
    assert (b["world_size"] == 2).all() and (b["backend"] == "gloo").all()
    public = pd.read_csv(res / "public_api_cpu_ws2.csv")
    assert not public["runs"].iloc[0] and "sharding strategy" in public["error"].iloc[0]

    report.main(["--results", str(res), "--out", str(tmp_path / "REPORT.md")])
    text = (tmp_path / "REPORT.md").read_text()
    assert "### `cpu_ws2`" in text and "GPUs at N > 1 and run-to-run spread unmeasured" in text and "{{" not in text
    assert "No bf16 rows with their distance from fp32 yet" in text  # a CPU-only results folder
    assert (tmp_path / "plots" / "cp_cpu_ws2.png").exists()
