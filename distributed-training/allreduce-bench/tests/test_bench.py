"""The runner on real gloo ranks: a 4-rank sweep of every collective and dtype, the CSV schema, nnodes,
a stuck rank (timeout, message, exit 4, rows kept in the run folder, results/ untouched) and --resume;
bad arguments exit 2 in one line."""

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bench
import collectives as C
from common.collective_cost import COLLECTIVES, busbw_factor
from common.dist import DistInfo, distributed
from common.hardware import PRESETS
from common.results import PROVENANCE_COLUMNS
from testkit import RankFailed, run_ranks

FAST = dict(iters=2, min_iters=1, warmup=1, target_ms=1.0, topology=False, promote="replace")


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _sweep(env, cfg):
    return bench.run(cfg, env, PRESETS["cpu"])


def test_four_rank_sweep_of_every_collective_and_dtype(tmp_path):
    out = tmp_path / "results" / "sweep_cpu_ws4_n2.csv"
    cfg = bench.Config(min_bytes="1K", max_bytes="4K", dtypes=("fp32", "bf16", "fp16"), results=str(out.parent), **FAST)
    # LOCAL_WORLD_SIZE=2: the ranks see what two torchrun agents with 2 workers each would set.
    assert run_ranks(_sweep, 4, cfg, env={"LOCAL_WORLD_SIZE": "2"}) == [0, 0, 0, 0]
    rows = _rows(out)
    assert list(rows[0]) == bench.COLUMNS + [c for c in PROVENANCE_COLUMNS if c not in bench.COLUMNS]
    assert len(rows) == len(COLLECTIVES) * 3 * 3
    assert {(r["collective"], r["dtype"]) for r in rows} == {(c, d) for c in COLLECTIVES for d in C.DTYPES}
    for r in rows:
        assert (r["world_size"], r["nnodes"], r["backend"], r["preset"], r["wrong"]) == ("4", "2", "gloo", "cpu", "0")
        t, lo, hi = float(r["time_us"]), float(r["time_min_us"]), float(r["time_max_us"])
        assert 0 < lo <= t <= hi and 1 <= int(r["iters"]) <= 2 and r["timing"].endswith("max over 4 ranks")
        size = int(r["size_bytes"])
        assert float(r["algbw_GBps"]) == pytest.approx(size / (t * 1e-6) / 1e9, rel=1e-4)
        assert float(r["busbw_GBps"]) == pytest.approx(float(r["algbw_GBps"]) * busbw_factor(r["collective"], 4),
                                                       rel=1e-4)
        loop = float(r["time_loop_us"])  # nccl-tests' statistic: loop time / iterations, mean over ranks
        assert loop > 0 and float(r["busbw_loop_GBps"]) == pytest.approx(
            size / (loop * 1e-6) / 1e9 * busbw_factor(r["collective"], 4), rel=1e-4)
    counts = {(r["collective"], r["dtype"], r["size_bytes"]): r["count"] for r in rows}
    assert counts["all_reduce", "fp32", "1024"] == "256" and counts["all_gather", "fp32", "1024"] == "64"
    assert counts["all_to_all", "bf16", "4096"] == "512" and counts["reduce_scatter", "fp16", "2048"] == "256"
    env = DistInfo(0, 0, 4, 2, None, "gloo")
    assert bench.sweep_path(bench.cpu(), env, PRESETS["cpu"]).name == "sweep_cpu_ws4_n2.csv"


def _stuck_rank_1(env, cfg):
    if env.rank == 1:  # rank 1 stops answering at the second size
        real = C.make_call

        def make_call(coll, bufs, rank, n, group=None):
            call = real(coll, bufs, rank, n, group)
            return (lambda: (time.sleep(2 * cfg.timeout_s), call())) if bufs.inp.numel() > 256 else call
        C.make_call = make_call
    return bench.run(cfg, env, PRESETS["cpu"])


def test_stuck_rank_times_out_keeps_rows_and_resume_finishes(tmp_path, capfd):
    out = tmp_path / "results" / "sweep_cpu_ws2.csv"
    out.parent.mkdir()
    out.write_text("the committed sweep\n")
    cfg = bench.Config(collectives=("all_reduce",), min_bytes="1K", max_bytes="2K", results=str(out.parent),
                       timeout_s=1.0, **FAST)
    t0 = time.monotonic()
    codes = run_ranks(_stuck_rank_1, 2, cfg, timeout_s=60)
    assert codes[0] == 4 and time.monotonic() - t0 < 20
    err = capfd.readouterr().err
    assert "error: all_reduce of 2K fp32 failed" in err and "--resume" in err
    first = _rows(tmp_path / "runs" / "sweep_cpu_ws2" / "sweep_cpu_ws2.csv")
    assert [r["size_bytes"] for r in first] == ["1024"]  # the row measured before the failure stays in runs/
    assert out.read_text() == "the committed sweep\n"  # and results/ is untouched by the failed run
    again = bench.Config(**{**cfg.__dict__, "resume": True})
    assert run_ranks(_sweep, 2, again) == [0, 0]
    rows = _rows(out)  # complete: published
    assert [r["size_bytes"] for r in rows] == ["1024", "2048"] and rows[0] == first[0]  # only the missing row ran
    changed = bench.Config(**{**again.__dict__, "max_bytes": "4K"})
    capfd.readouterr()
    with pytest.raises(RankFailed, match="SystemExit: 2"):
        run_ranks(_sweep, 2, changed)  # resuming under another config is refused: exit 2, nothing measured
    assert "the config changed (max_bytes: '2K' -> '4K')" in capfd.readouterr().err and len(_rows(out)) == 2
    assert len(_rows(tmp_path / "runs" / "sweep_cpu_ws2" / "sweep_cpu_ws2.csv")) == 2


def test_bad_argument_from_the_command_line_writes_nothing(tmp_path):
    lab = Path(bench.__file__).parent
    proc = subprocess.run([sys.executable, str(lab / "bench.py"), "--iters", "-1", "--results", str(tmp_path)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(lab.parent)}, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "argument --iters: expected a whole number from 0" in proc.stderr
    assert not any(tmp_path.iterdir())


def test_one_rank_writes_busbw_zero_with_a_note(tmp_path):
    out = tmp_path / "results" / "sweep_cpu_ws1.csv"
    with distributed(device="cpu") as env:
        assert bench.run(bench.Config(min_bytes="1K", max_bytes="2K", results=str(out.parent), **FAST), env,
                         PRESETS["cpu"]) == 0
    rows = _rows(out)
    assert {r["collective"] for r in rows} == set(COLLECTIVES) - {"send_recv"}  # no peer to send to
    assert all(r["busbw_GBps"] == r["busbw_loop_GBps"] == "0.0" and float(r["algbw_GBps"]) > 0 for r in rows)
    for r in rows:  # in-place collectives on one rank move nothing: labelled, and left out of peaks and fits
        in_place = r["collective"] in ("all_reduce", "broadcast")
        assert r["moves_data"] == ("false" if in_place else "true")
        assert r["note"] == (bench.NO_TRANSFER_NOTE if in_place else bench.ONE_RANK_NOTE)
    import report
    df = report.load(tmp_path / "results", "sweep_cpu_ws1.csv")
    assert set(report.summary(df)["collective"]) == {"all_gather", "reduce_scatter", "all_to_all"}


@pytest.mark.gpu
def test_one_gpu_sweep_over_nccl(tmp_path):
    with distributed(device="cuda") as env:
        cfg, preset = bench.resolve(bench.Config(min_bytes="1K", max_bytes="1M", dtypes=("fp32", "bf16"),
                                                 results=str(tmp_path / "results"), **FAST))
        assert bench.run(cfg, env, preset) == 0
    rows = _rows(bench.sweep_path(cfg, env, preset))
    assert rows and all(r["wrong"] == "0" and r["backend"] == "nccl" and r["timing"].startswith("cuda_event")
                        and r["busbw_GBps"] == "0.0" for r in rows)
