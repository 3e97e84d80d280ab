"""One sweep is one run folder: make's preflight holds the folder's lock across every launch of the sweep
(bench.py --preflight ... -- <the launches>), so a second sweep started between two launches of the first is
refused in one line naming it, and its launches add no row. The first sweep here runs its 1-rank launch for
real (one plain process, under the lock it inherits), then waits between launches while the test starts a
second sweep."""

import os
import subprocess
import sys
import time
from pathlib import Path

import bench
from common.runs import lock_holder
from testkit import expect_bad_input, tree_state

LAB = Path(bench.__file__).resolve().parent
TINY = ["--gpu", "cpu", "--worlds", "1,2", "--strategies", "ddp", "--modes", "weak", "--warmup", "0", "--steps", "1",
        "--micro-batch", "2", "--grad-accum", "1"]
# The sweep's launches as make's loop runs them: the 1-rank launch, then (here) a pause before the 2-rank one.
LAUNCHES = """
import sys, time
from pathlib import Path
import bench
results, between, go = sys.argv[1:4]
code = bench.main({tiny!r} + ["--append", "--results", results])
Path(between).write_text(str(code))
deadline = time.monotonic() + 300
while not Path(go).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_a_second_sweep_between_two_launches_is_refused_naming_the_first(tmp_path, capsys, monkeypatch):
    results, between, go = tmp_path / "results", tmp_path / "between", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": f"{LAB}{os.pathsep}{LAB.parent}", "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "DT_CHECK_ARGS", "DT_PLANNED_WORLD", "DT_LAUNCH_PHASE"):
        env.pop(var, None)
    first = subprocess.Popen([sys.executable, str(LAB / "bench.py"), *TINY, "--results", str(results), "--preflight",
                              "--", sys.executable, "-c", LAUNCHES.format(tiny=TINY), str(results), str(between),
                              str(go)], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 240
        while not between.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert between.exists() and between.read_text() == "0", first.communicate(timeout=60)
        folder = tmp_path / "runs" / "scaling_cpu_ws2"
        rows = (folder / "scaling_cpu_ws2.csv").read_text()
        assert rows.count("\n") == 2  # the header and the 1-rank launch's row, written under the inherited lock
        before = tree_state(tmp_path)

        # between the first sweep's launches: a second sweep's preflight, its launcher check and its launch
        for var in ("RANK", "DT_LAUNCH_PHASE"):
            monkeypatch.delenv(var, raising=False)
        line = expect_bad_input(lambda: bench.main([*TINY, "--results", str(results), "--preflight", "--", "true"]),
                                "is being written by another run", capsys)
        assert f"pid {first.pid} " in line, line
        monkeypatch.setenv("DT_CHECK_ARGS", "1")
        monkeypatch.setenv("DT_PLANNED_WORLD", "2")
        expect_bad_input(lambda: bench.main([*TINY, "--append", "--results", str(results)]), f"pid {first.pid} ",
                         capsys)
        assert tree_state(tmp_path) == before  # nothing of the second sweep was written
        assert lock_holder(folder).startswith(f"pid {first.pid} ")
    finally:
        go.touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert lock_holder(folder) is None  # released when the sweep's last launch ended
    assert (folder / "scaling_cpu_ws2.csv").read_text() == rows
