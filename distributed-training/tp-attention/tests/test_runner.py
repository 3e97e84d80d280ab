"""The verify command refusing bad input in a real process, the sweep checks, the runner end to end with
resume, and the report from its CSVs alone (the in-process bad-input matrix is test_bad_input.py)."""

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import bench
import report
from testkit import bench_twice, run_ranks

LAB = Path(__file__).resolve().parents[1]


def test_the_verify_command_refuses_bad_input():
    """The real entry point in a fresh interpreter (torch imported): one line on stderr, exit 2."""
    cmd = [sys.executable, str(LAB / "verify.py"), "--tp", "2", "--n-heads", "6", "--n-kv-heads", "3",
           "--d-model", "96"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(LAB.parent)})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["verify.py: error: n_kv_heads (3) must be divisible by tp (2): every "
                                             "rank holds whole K/V heads (replicating them when n_kv_heads < tp is "
                                             "not implemented)"]


def test_bad_sweeps_are_refused():
    with pytest.raises(ValueError, match=r"seq_len \(6\) must be divisible by tp \(4\)"):
        bench.check_shapes(replace(bench.cpu(4), seq_lens=(6,)), 4)
    with pytest.raises(ValueError, match="multiple of --head-dim 48"):
        replace(bench.cpu(4), head_dim=48, d_models=(128,))
    cfg = replace(bench.cpu(2), d_models=(64, 128))  # the other flags keep the CPU preset's values
    assert cfg.tp == (1, 2) and cfg.seq_len == 128 and cfg.shapes()[-2:] == [(128, 64), (128, 128)]


TINY_SWEEP = ["--gpu", "cpu", "--seq-lens", "8,16", "--d-models", "32", "--seq-len", "8", "--d-model", "32",
              "--head-dim", "8", "--batch", "1", "--warmup", "0", "--iters", "1"]


def test_runner_end_to_end_with_resume_then_report(tmp_path):
    res = tmp_path / "results"
    first = run_ranks(bench_twice, 2, bench.main, TINY_SWEEP, str(res), timeout_s=240)[0]
    assert Path(res, "bench_cpu_ws2.csv").read_text() == first  # the resumed run appended nothing, then published
    b, c = pd.read_csv(res / "bench_cpu_ws2.csv"), pd.read_csv(res / "correctness_cpu_ws2.csv")
    assert len(b) == 2 * 3 and b["verified"].all() and c["pass"].all()  # 2 shapes x (t=1, t=2, t=2+SP)
    assert (b["comm_bytes_ours"] == b["comm_bytes_analytic"]).all()
    t2 = b[b["tp"] == 2]
    assert (t2["ours_fwd_collectives"] == t2["sp"].map({False: "all_reduce:2",
                                                       True: "all_gather:2 reduce_scatter:2"})).all()
    assert b["ref_ms"].notna().tolist() == (b["tp"] == 1).tolist()
    assert (b["world_size"] == 2).all() and (b["backend"] == "gloo").all()

    report.main(["--results", str(res), "--out", str(tmp_path / "REPORT.md")])
    text = (tmp_path / "REPORT.md").read_text()
    assert "#### `cpu_ws2`" in text and "## Benchmark `cpu_ws2`" in text
    assert "- GPU: no result is committed yet" in text
    assert "**NO**" not in text and str(tmp_path) not in text and "/tmp/" not in text
    for png in ("time_vs_tp_cpu_ws2.png", "time_vs_shape_cpu_ws2.png", "comm_cpu_ws2.png"):
        assert (tmp_path / "plots" / png).read_bytes()[:4] == b"\x89PNG"
