"""Results are never lost, mixed or silently wrong: two sweeps at once, kill -9 and Ctrl-C mid-sweep.

Real processes (one rank each, as `python bench.py` runs without torchrun), a real sweep of 165
rows, the default layout: the run writes runs/sweep_cpu_ws1/, results/ gets only a complete sweep."""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bench

LAB = Path(bench.__file__).resolve().parent
SWEEP = ["--gpu", "cpu", "--dtypes", "fp32,bf16,fp16", "--max-bytes", "1M", "--target-ms", "20", "--iters", "5",
         "--min-iters", "1", "--no-topology", "--promote", "replace"]
PLANNED = 5 * 3 * 11  # collectives (no send_recv on one rank) x dtypes x sizes 1K..1M


def _start(results: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(LAB.parent), "OMP_NUM_THREADS": "1"}
    # Ctrl-C as a terminal sends it: a suite started in the background (`(make test &)`) inherits SIGINT ignored,
    # and Python then installs no KeyboardInterrupt handler
    return subprocess.Popen([sys.executable, str(LAB / "bench.py"), *SWEEP, "--results", str(results), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _keys(path: Path) -> list[tuple[str, str, str]]:
    with open(path, newline="") as f:
        return [(r["collective"], r["dtype"], r["size_bytes"]) for r in csv.DictReader(f)]


def _stop_after_rows(path: Path, n: int, proc: subprocess.Popen) -> None:
    """Let the sweep run in short bursts until `path` holds more than `n` rows, and return with it stopped
    (SIGSTOP): whatever the test does next (a second sweep, Ctrl-C, kill -9) meets a sweep under way. Polling
    while it ran freely raced it on a loaded machine: the sweep could finish before the signal was sent."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        proc.send_signal(signal.SIGSTOP)
        if path.exists() and sum(1 for _ in open(path)) > n:
            return
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} rows in {path}")


def test_two_sweeps_at_once_one_is_refused_and_nothing_mixes(tmp_path, capsys):
    out = tmp_path / "results" / "sweep_cpu_ws1.csv"
    first = _start(out.parent)
    # the first sweep is under way
    _stop_after_rows(tmp_path / "runs" / "sweep_cpu_ws1" / "sweep_cpu_ws1.csv", 10, first)
    try:
        with pytest.raises(SystemExit) as e:  # the second, in this process: refused at once, nothing written
            bench.main(SWEEP + ["--results", str(out.parent)])
    finally:
        first.send_signal(signal.SIGCONT)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and f"being written by another run (pid {first.pid}" in err
    stdout, stderr = first.communicate(timeout=180)
    assert first.returncode == 0, stderr
    keys = _keys(out)
    assert len(keys) == PLANNED and len(set(keys)) == PLANNED  # one run's rows, none twice


def test_ctrl_c_and_kill_9_mid_sweep_lose_and_duplicate_nothing(tmp_path):
    out = tmp_path / "results" / "sweep_cpu_ws1.csv"
    out.parent.mkdir()
    out.write_text("the committed sweep\n")
    run_csv = tmp_path / "runs" / "sweep_cpu_ws1" / "sweep_cpu_ws1.csv"
    proc = _start(out.parent)
    _stop_after_rows(run_csv, 20, proc)
    proc.send_signal(signal.SIGINT)  # Ctrl-C, handled as the sweep continues
    proc.send_signal(signal.SIGCONT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted (Ctrl-C)"), stderr
    first = _keys(run_csv)
    proc = _start(out.parent, "--resume")
    _stop_after_rows(run_csv, len(first) + 20, proc)
    proc.kill()  # kill -9
    proc.wait()
    assert out.read_text() == "the committed sweep\n"  # neither interruption touched results/
    before = run_csv.read_bytes()
    with open(run_csv, "ab") as f:
        f.write(b"all_gather,bf16,40")  # and the row being written when it died, cut short
    assert bench.main(SWEEP + ["--results", str(out.parent), "--resume"]) == 0  # in process: finishes and publishes
    keys = _keys(out)
    assert len(keys) == PLANNED and len(set(keys)) == PLANNED  # 0 lost, 0 duplicated
    assert out.read_bytes().startswith(before)  # the rows measured before the kill are kept verbatim
    assert keys[: len(first)] == first
