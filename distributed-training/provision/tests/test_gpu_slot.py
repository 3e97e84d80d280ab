"""The lent machine's one command (provision/gpu_slot.sh), rehearsed on the CPU: a fake nvidia-smi, a stand-in
kit, and a stand-in fp8-train (tests/standin_fp8: its preset holds a TE run, and one of its runs never ends).
TransformerEngine does not import here, so the TE run is dropped with one line and the rest goes on; the run
forced past its deadline is cut off; the script stops within its budget with the archive, the closing table
and both logs in $OUT (four files, no folder: what comes back from a lent machine)."""

import subprocess
import sys
import time
from pathlib import Path

from testkit import fake_nvidia_smi
from provision.tests.kit_standin import standin_kit

ROOT = Path(__file__).resolve().parents[3]
SLOT = ROOT / "distributed-training" / "provision" / "gpu_slot.sh"
STANDIN = Path(__file__).resolve().parent / "standin_fp8"


def slot(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake_nvidia_smi(bin_dir, driver=580, gpus=0)
    base = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
            "PYTHON": sys.executable, "DT_SMI_TIMEOUT_S": "2"}
    return subprocess.run(["bash", str(SLOT)], cwd=tmp_path, env=base | env, capture_output=True, text=True,
                          timeout=300)


def test_the_slot_stops_at_its_budget_with_the_archive_and_the_whole_log(tmp_path):
    out, results = tmp_path / "out", tmp_path / "r" / "cpu_ws1"
    args = (f"--results {results} --fp8-lab {STANDIN} --reserve-s 14 --grace-s 1 --guess-first-s 1 --guess-train-s 1 "
            f"--guess-gemm-s 1 --site {tmp_path / 'site'}")
    t0 = time.monotonic()
    r = slot(tmp_path, OUT=str(out), SLOT_S="46", REHEARSAL="1", KIT=str(standin_kit(tmp_path / "kit")),
             RUNS="bf16-s0,te-fused,gemm,native,bf16-s1", STANDIN_HANG="fp8-native-s0", ARGS=args,
             DT_GIT_COMMIT="rehearsal")
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert wall < 46  # SLOT_S: the whole command, the end included
    assert sorted(p.name for p in out.iterdir())[:3] == ["gpu_quick_cpu_ws1.log", "gpu_quick_cpu_ws1.txt",
                                                         "gpu_slot.log"]
    assert len(list(out.iterdir())) == 4 and next(out.glob("results_cpu_rehearsal_*.tar.gz")).stat().st_size > 0
    log = (out / "gpu_slot.log").read_text()
    assert "torch       " in log and "kit         {'python'" in log  # the versions first
    dropped = [line for line in log.splitlines() if "dropped" in line and line.startswith("==")]
    assert dropped == ["== gpu-quick: dropped te-fused: TransformerEngine does not import (no module named "
                       "'transformer_engine'); the rest goes on"]
    table = (out / "gpu_quick_cpu_ws1.txt").read_text()
    for line in ["offline-install  done", "bf16-s0          done", "gemm             done",
                 "native           cut off at the deadline", "bf16-s1          skipped", "te-fused         dropped"]:
        assert line in table, table
    assert (results / "steps.csv").read_text().splitlines()[1:] == ["bf16-s0,0,0.2"]  # what finished, published
    assert (results / "bench_gemm.csv").is_file()
    assert table.splitlines()[-1] in (out / "gpu_quick_cpu_ws1.log").read_text()


def test_the_slots_own_inputs_are_one_line_each(tmp_path):
    r = slot(tmp_path)
    assert (r.returncode, r.stderr.strip()) == (2, "error: gpu_slot.sh needs OUT=<folder> (what comes back from the "
                                                   "machine)")
    for bad in ("abc", "5", "900", ""):
        r = slot(tmp_path, OUT=str(tmp_path / "o"), SLOT_S=bad) if bad else None
        if r is not None:
            assert (r.returncode, r.stderr.strip()) == (2, f"error: SLOT_S={bad}; allowed: whole seconds, 20 to 600")
    assert not (tmp_path / "o").exists()


def test_the_slot_command_fits_a_lent_machines_limit():
    """The device call the docs give: one line far under 2,000 characters (the kit travels as a carried path)."""
    text = (ROOT / "docs" / "gpu-nodes.md").read_text()
    command = next(line.strip() for line in text.splitlines() if "bash distributed-training/provision/gpu_slot.sh"
                   in line and "DT_GIT_COMMIT=" in line)
    assert len(command) < 2000 and "OUT" not in command.split("bash")[0]


def test_a_gpu_quick_that_refuses_still_leaves_an_archive_and_its_reason(tmp_path):
    out = tmp_path / "out"
    r = slot(tmp_path, OUT=str(out), SLOT_S="120", REHEARSAL="1", KIT="", ARGS="--reserve-s 1000",
             DT_GIT_COMMIT="rehearsal")
    log = (out / "gpu_slot.log").read_text()
    assert r.returncode == 2 and "gpu-quick: error: --budget-s (" in log and "must exceed --reserve-s (1000)" in log
    assert "gpu-quick left no archive (exit 2): make results-archive" in log
    assert [p.name.split("_")[0] for p in sorted(out.iterdir())] == ["gpu", "results"]
