"""gpu-quick, rehearsed on the CPU: the time box (priorities, minimums, a step's cap, SIGTERM then SIGKILL),
and the whole target through make with CPU stand-ins: a fake nvidia-smi, a stand-in kit of tiny wheels, the
real fp8-train at a tiny size, one step forced to overrun, one skipped; it ends with a closing table naming
them, an archive, and only finished runs published."""

import json
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pandas as pd

from testkit import fake_nvidia_smi
from provision import gpu_quick
from provision.gpu_quick import Outcome, QuickConfig, Step
from provision.wheel_edit import record_hash

ROOT = Path(__file__).resolve().parents[3]
PY = sys.executable


def sleeper(seconds: float, ignore_term: bool = False) -> list[str]:
    code = "import signal, time\n"
    code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else ""
    return [PY, "-c", code + f"time.sleep({seconds})"]


def test_steps_run_in_order_and_what_cannot_finish_is_skipped_with_its_reason():
    cfg = QuickConfig(gpu="cpu", budget_s=10, reserve_s=1, grace_s=1)
    done: list[Outcome] = []
    deadline = time.monotonic() + 3
    gpu_quick.run_all(cfg, [Step("a", [PY, "-c", "pass"], 0.5), Step("big", sleeper(0), 60),
                            Step("b", [PY, "-c", "raise SystemExit(3)"], 0.5)], deadline, done)
    assert [(o.step, o.status) for o in done] == [("a", "done"), ("big", "skipped"), ("b", "failed (exit 3)")]
    assert done[1].note.startswith("needs >= 60 s, ")


def test_an_overrunning_step_gets_sigterm_at_the_deadline_then_sigkill_after_the_grace():
    t0 = time.monotonic()
    polite = gpu_quick.run_step(Step("polite", sleeper(60), 0), left_s=1.0, grace_s=30)
    stubborn = gpu_quick.run_step(Step("stubborn", sleeper(60, ignore_term=True), 0), left_s=1.0, grace_s=1.0)
    capped = gpu_quick.run_step(Step("capped", sleeper(60), 0, limit_s=1.0), left_s=50, grace_s=5)
    assert polite.status == stubborn.status == "cut off at the deadline" and capped.status == "cut off at its limit"
    assert time.monotonic() - t0 < 20  # SIGTERM ended the first at once, SIGKILL the second after its grace


def _standin_kit(folder: Path) -> Path:
    """A kit of one tiny wheel, made for this Python and torch, as `make offline-kit` would describe it."""
    import torch
    folder.mkdir()
    wheel = folder / "dt_kit_probe-1.0-py3-none-any.whl"
    files = {"dt_kit_probe/__init__.py": b"CARRIED = True\n",
             "dt_kit_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: dt_kit_probe\nVersion: 1.0\n",
             "dt_kit_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in files.items())
    with zipfile.ZipFile(wheel, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr("dt_kit_probe-1.0.dist-info/RECORD", record + "dt_kit_probe-1.0.dist-info/RECORD,,\n")
    import hashlib
    manifest = {"target": {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "torch": torch.__version__},
                "files": {wheel.name: {"bytes": wheel.stat().st_size,
                                       "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}}}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))
    return folder


def test_make_gpu_quick_rehearsed_on_the_cpu(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_nvidia_smi(bin_dir, driver=580, gpus=0)  # a driver, no GPU: the CPU preset is the right one
    kit, site, out, results = _standin_kit(tmp_path / "kit"), tmp_path / "site", tmp_path / "out", tmp_path / "r"
    tiny = ("--runs bf16 --noise-seeds 2 --steps 3 --batch 4 --seq-len 16 --d-model 32 --n-layers 1 --n-heads 2 "
            "--val-every 0 --data-size 256K --threads 1")
    endless = "--runs bf16 --iters 100000000 --warmup 1 --n-layers 1 --seq-len 16 --batch 2 --threads 1"
    # The bench overruns (its cap: 3 s); bf16-s1 can never have the 1000 s it asks for: skipped.
    args = (f"--out {results / 'cpu_ws1'} --train-args '{tiny}' --bench-args '{endless}' --bench-hidden 32 "
            "--min-first-s 1 --min-bench-s 1 --bench-limit-s 3 --min-train-s 1000 --reserve-s 5 --grace-s 5")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "DT_GIT_COMMIT": "rehearsal"}
    r = subprocess.run(["make", "-s", "gpu-quick", f"PYTHON={PY}", "GPU=cpu", "BUDGET_S=600", f"KIT={kit}",
                        f"KIT_SITE={site}", f"ARCHIVE_DIR={out}", f"ARGS={args}"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (site / "dt_kit_probe" / "__init__.py").is_file()  # the kit, into KIT_SITE
    table = (out / "gpu_quick_cpu_ws1.txt").read_text()
    assert "offline-install" in table and "installed 1 wheels" in table
    assert "bench            cut off at its limit" in table
    assert "bf16-s1          skipped" in table and "needs >= 1000 s" in table
    assert "| bf16-s0 |" in table and "BF16 seeds: s0 (one seed: no noise band yet)" in table  # the closing table
    assert "cpu_ws1-bench: no mode finished; nothing published" in table or "-bench" not in table
    assert not (results / "cpu_ws1" / "bench_step.csv").exists()  # the cut-off bench published nothing
    steps = pd.read_csv(results / "cpu_ws1" / "steps.csv")
    assert sorted(steps["run"].unique()) == ["bf16-s0"]  # only what finished
    archive = next(out.glob("results_*_rehearsal_*.tar.gz"))
    with tarfile.open(archive) as tar:
        assert "MANIFEST.json" in tar.getnames()
