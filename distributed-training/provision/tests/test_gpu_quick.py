"""gpu-quick: the time box (priorities, estimates, a step's cap, SIGTERM then SIGKILL, one log of everything), a
GPU target that never runs on the CPU (no GPU, a hanging or unusable driver: one line, exit 2, nothing written),
its other refusals (a rehearsal into committed results, an unwritable folder, no ARCHIVE_DIR), and the rehearsal
through make with the real fp8-train at a tiny size, a stand-in kit and a fake nvidia-smi."""

import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest

from testkit import fake_nvidia_smi, no_gpu_mark, tree_state
from provision.tests.kit_standin import standin_kit
from provision import gpu_quick, quick_run, timebox
from provision.timebox import Outcome, Step

ROOT = Path(__file__).resolve().parents[3]
LABS = ROOT / "distributed-training"
PY = sys.executable
NO_GPU = no_gpu_mark()
WATCHED = [LABS / "fp8-train" / "results", LABS / "fp8-train" / "runs"]


def sleeper(seconds: float, ignore_term: bool = False) -> list[str]:
    code = "import signal, time\n"
    code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else ""
    return [PY, "-c", code + f"time.sleep({seconds})"]


def test_steps_run_in_order_and_what_cannot_finish_is_skipped_with_its_reason():
    done: list[Outcome] = []
    deadline = time.monotonic() + 3
    timebox.run_all([Step("a", [PY, "-c", "pass"], 0.5), Step("big", sleeper(0), 60),
                     Step("b", [PY, "-c", "raise SystemExit(3)"], 0.5)], deadline, done, grace_s=1)
    assert [(o.step, o.status) for o in done] == [("a", "done"), ("big", "skipped"), ("b", "failed (exit 3)")]
    assert done[1].note.startswith("needs >= 60 s, ")


def test_an_overrunning_step_gets_sigterm_at_the_deadline_then_sigkill_after_the_grace():
    t0 = time.monotonic()
    polite = timebox.run_step(Step("polite", sleeper(60), 0), left_s=1.0, grace_s=30)
    stubborn = timebox.run_step(Step("stubborn", sleeper(60, ignore_term=True), 0), left_s=1.0, grace_s=1.0)
    capped = timebox.run_step(Step("capped", sleeper(60), 0, limit_s=1.0), left_s=50, grace_s=5)
    assert polite.status == stubborn.status == "cut off at the deadline" and capped.status == "cut off at its limit"
    assert time.monotonic() - t0 < 20  # SIGTERM ended the first at once, SIGKILL the second after its grace


def test_the_log_holds_what_the_time_box_and_its_children_print(tmp_path, capfd):
    log = tmp_path / "gpu_quick.log"
    with timebox.teed(log):
        print("from gpu-quick", flush=True)
        timebox.run_step(Step("child", [PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], 0),
                         left_s=30, grace_s=1)
    text = log.read_text()
    assert "from gpu-quick" in text and "== gpu-quick: child" in text and "out\n" in text and "err\n" in text
    assert "err" in capfd.readouterr().out  # and the console still shows it


def _refused(argv, capsys, needle: str) -> str:
    before = [tree_state(w) for w in WATCHED]
    assert gpu_quick.main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and captured.out == "", captured
    assert [tree_state(w) for w in WATCHED] == before
    return err[0]


@NO_GPU
@pytest.mark.parametrize("driver, gpus, needle", [
    (580, 0, "gpu-quick runs on NVIDIA GPUs only and this machine has none (nvidia-smi lists no GPU); on the CPU: "
             "make gpu-quick GPU=cpu REHEARSAL=1"),
    ("hang", 8, "gpu-quick runs on NVIDIA GPUs only and this machine's driver does not answer: `nvidia-smi` did not "
                "answer within 1 s"),
    (550, 8, "gpu-quick runs on NVIDIA GPUs only: torch "),  # 8 GPUs this torch cannot use: the build that fits
])
def test_a_gpu_target_never_runs_on_the_cpu(driver, gpus, needle, tmp_path, monkeypatch, capsys):
    fake_nvidia_smi(tmp_path, driver, gpus=gpus)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("DT_SMI_TIMEOUT_S", "1")
    for gpu in ("auto", "h200"):
        line = _refused(["--gpu", gpu, "--archive-dir", str(tmp_path / "out")], capsys, needle)
        assert line.startswith("error: gpu-quick runs on NVIDIA GPUs only") and not (tmp_path / "out").exists()


@NO_GPU
@pytest.mark.parametrize("driver", [580, "hang"])
def test_make_gpu_quick_on_a_machine_without_a_usable_gpu_is_one_line_and_writes_nothing(driver, tmp_path):
    """The make target a user types: no CPU preset trained into the committed cpu_ws1, no archive anywhere."""
    fake_nvidia_smi(tmp_path, driver, gpus=0)
    before = [tree_state(w) for w in WATCHED], sorted(ROOT.glob("results_*.tar.gz"))
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path), "DT_SMI_TIMEOUT_S": "1"}
    r = subprocess.run(["make", "gpu-quick", f"PYTHON={PY}", f"ARCHIVE_DIR={tmp_path / 'out'}"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]
    assert r.returncode == 2 and len(ours) == 1 and ours[0].startswith("error: gpu-quick runs on NVIDIA GPUs only")
    assert r.stdout == "" and not (tmp_path / "out").exists()
    assert ([tree_state(w) for w in WATCHED], sorted(ROOT.glob("results_*.tar.gz"))) == before


def test_the_cpu_runs_only_as_a_rehearsal_and_never_into_committed_results(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_quick.main(["--gpu", "cpu", "--archive-dir", str(tmp_path)])
    assert stop.value.code == 2 and "GPU=cpu only rehearses it: add REHEARSAL=1" in capsys.readouterr().err
    committed = LABS / "fp8-train" / "results" / "cpu_ws1"
    _refused(["--gpu", "cpu", "--rehearsal", "--results", str(committed), "--archive-dir", str(tmp_path)], capsys,
             "a rehearsal never writes into committed results")


@pytest.mark.parametrize("where", ["read-only", "sysfs"])
def test_a_results_folder_that_cannot_be_written_is_one_line(where, tmp_path, capsys):
    if where == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes through a folder's mode bits (the sysfs case covers root)")
        (tmp_path / "r").mkdir(mode=0o555)
        out = tmp_path / "r" / "cpu_ws1"
    else:
        out = Path("/sys/dt-gpu-quick/cpu_ws1")  # sysfs: no one creates a file there, root included
        if not Path("/sys").is_dir() or gpu_quick.unwritable(out) is None:
            pytest.skip("no read-only /sys here")
    line = _refused(["--gpu", "cpu", "--rehearsal", "--results", str(out), "--archive-dir", str(tmp_path / "a")],
                    capsys, "the results folder cannot be written: ")
    assert "is not writable" in line and not (tmp_path / "a").exists()


def test_a_rehearsal_without_out_names_its_own_folder_to_every_fp8_train_command(tmp_path):
    """Its default folder is runs/rehearsal/cpu_ws1: every training, bench and publish command names it, so that
    fp8-train never falls back to its own default, the committed results/cpu_ws1."""
    cfg = gpu_quick.QuickConfig(gpu="cpu", rehearsal=True, archive_dir=str(tmp_path), runs=("bf16-s0", "gemm"))
    p = gpu_quick.prepare(cfg)
    assert p.results == LABS / "fp8-train" / "runs" / "rehearsal" / "cpu_ws1"
    commands = [s.argv for s in quick_run.steps(cfg, p.results, p.items)] + [quick_run.train_argv(cfg, p.results)]
    assert [argv[argv.index("--results") + 1] for argv in commands] == [str(p.results)] * 3


def test_the_archive_needs_a_folder_outside_the_checkout(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    common = ["--gpu", "cpu", "--rehearsal", "--results", str(tmp_path / "r" / "cpu_ws1")]
    _refused(common, capsys, "gpu-quick needs ARCHIVE_DIR=<folder>")
    _refused(common + ["--archive-dir", str(ROOT)], capsys, "is inside the checkout's root")
    _refused(common + ["--archive-dir", str(LABS / "fp8-train")], capsys, "is inside the checkout's labs")


def test_make_gpu_quick_rehearsed_on_the_cpu_with_the_real_fp8_train(tmp_path):
    """REHEARSAL=1: the kit into KIT_SITE, doctor, fp8-train's own plan (--list-runs), bf16-s0 trained at a tiny
    size, bf16-s1 skipped (its guess cannot fit), the finished run published by fp8-train's --publish-finished,
    its closing table, the archive and the whole log in ARCHIVE_DIR; nothing written into committed results."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_nvidia_smi(bin_dir, driver=580, gpus=0)
    kit, site, out, results = standin_kit(tmp_path / "kit"), tmp_path / "site", tmp_path / "out", tmp_path / "r"
    tiny = ("--runs bf16 --noise-seeds 2 --steps 3 --batch 4 --seq-len 16 --d-model 32 --n-layers 1 --n-heads 2 "
            "--val-every 0 --data-size 256K --threads 1")
    args = (f"--results {results / 'cpu_ws1'} --train-args '{tiny}' --guess-first-s 1 --guess-train-s 1000 "
            "--reserve-s 30")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "DT_GIT_COMMIT": "rehearsal"}
    before = [tree_state(w) for w in WATCHED[:1]]
    r = subprocess.run(["make", "-s", "gpu-quick", f"PYTHON={PY}", "GPU=cpu", "REHEARSAL=1", "BUDGET_S=300",
                        "RUNS=bf16-s0,bf16-s1", f"KIT={kit}", f"KIT_SITE={site}", f"ARCHIVE_DIR={out}", f"ARGS={args}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (site / "dt_kit_probe" / "__init__.py").is_file()  # the kit, into KIT_SITE
    table = (out / "gpu_quick_cpu_ws1.txt").read_text()
    assert "offline-install" in table and "installed 1 wheels" in table
    assert "bf16-s0          done" in table and "bf16-s1          skipped" in table and "needs >= 1000 s" in table
    assert "| bf16-s0 |" in table and "BF16 seeds: s0 (one seed: no noise band yet)" in table  # the closing table
    log = (out / "gpu_quick_cpu_ws1.log").read_text()
    assert "bf16-s0 step     2" in log and table.splitlines()[-1] in log  # fp8-train's own lines, and the end
    steps = pd.read_csv(results / "cpu_ws1" / "steps.csv")
    assert sorted(steps["run"].unique()) == ["bf16-s0"]  # only what finished
    with tarfile.open(next(out.glob("results_*_rehearsal_*.tar.gz"))) as tar:
        assert "MANIFEST.json" in tar.getnames()
    assert sorted(p.name.split("_")[0] for p in out.iterdir()) == ["gpu", "gpu", "results"]
    assert [tree_state(w) for w in WATCHED[:1]] == before
