"""The driver as nvidia-smi reports it, the torch build that fits it, and every GPU target's refusal.

Drivers are faked (testkit.fake_nvidia_smi prints what drivers 535/550/570/580 print, or fails like a
machine without one); the GPU targets are driven through make itself, with this interpreter as PYTHON.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from common import cuda_env
from common.cuda_env import Driver, mismatch, preferred_builds, read_driver, refusal
from testkit import fake_nvidia_smi, no_gpu_mark, tree_state

ROOT = Path(__file__).resolve().parents[3]
LABS = ROOT / "distributed-training"
NO_GPU = no_gpu_mark()


def driver_of(tmp_path, version, **kw) -> Driver | None:
    return read_driver(str(fake_nvidia_smi(tmp_path, version, **kw)))


@pytest.mark.parametrize("version, expect", [
    (535, ("535.183.01", (12, 2))), (550, ("550.54.15", (12, 4))), (570, ("570.133.20", (12, 8))),
    (580, ("580.82.07", (13, 0))), (None, None)])
def test_read_driver_takes_the_drivers_own_word(tmp_path, version, expect):
    d = driver_of(tmp_path, version, gpus=8)
    if expect is None:  # nvidia-smi present but no driver behind it, exit 9
        assert d is None
        return
    assert (d.version, d.cuda) == expect
    assert d.gpus == ("NVIDIA H100 80GB HBM3",) * 8 and d.compute_caps == ((9, 0),) * 8
    assert read_driver(str(tmp_path / "no-such-nvidia-smi")) is None


# A CUDA 12.x build runs on any CUDA-12 driver (minor-version compatibility); the nearest build above the
# driver's CUDA is preferred to a farther one, a build the driver runs natively to either.
@pytest.mark.parametrize("version, best, why", [
    (535, "cu126", "minor-version compatibility"), (550, "cu126", "minor-version compatibility"),
    (570, "cu128", "native"), (580, "cu130", "native"), (None, "cpu", "no NVIDIA driver")])
def test_the_build_that_fits_each_driver(tmp_path, version, best, why):
    builds = preferred_builds(driver_of(tmp_path, version))
    assert (builds[0].variant, builds[0].why) == (best, why)
    assert builds[-1].variant == "cpu"


def test_old_gpus_and_old_drivers():
    v100 = Driver("580.82.07", (13, 0), ("Tesla V100-SXM2-32GB",), ((7, 0),))
    assert [b.variant for b in preferred_builds(v100)] == ["cu128", "cu126", "cpu"]  # CUDA 13 dropped sm_70
    old = Driver("470.256.02", (11, 4), ("NVIDIA A100-SXM4-80GB",), ((8, 0),))
    (only,) = preferred_builds(old)
    assert only.variant == "cpu" and "update the NVIDIA driver" in only.why


def test_mismatch_names_torch_the_driver_and_the_fix():
    d550 = Driver("550.54.15", (12, 4), ("NVIDIA H100 80GB HBM3",) * 8, ((9, 0),) * 8)
    line = mismatch("2.13.0+cu130", "13.0", False, d550, python="py")
    assert line == ('torch 2.13.0+cu130 (a CUDA 13.0 build) cannot use the 8 GPUs nvidia-smi lists (driver '
                    '550.54.15, CUDA <= 12.4): install the cu126 build: py -m pip install "torch==2.13.0+cu126" '
                    '--index-url https://download.pytorch.org/whl/cu126')
    assert "(a CPU build)" in mismatch("2.13.0+cpu", None, False, d550, python="py")
    # the build fits and still no GPU: not a packaging problem, and no reinstall is suggested
    fits = mismatch("2.13.0+cu128", "12.8", False, d550, python="py")
    assert "the build fits the driver" in fits and "pip install" not in fits
    assert mismatch("2.13.0+cu126", "12.6", True, d550) is None  # torch uses the GPUs
    assert mismatch("2.13.0+cpu", None, False, None) is None      # no driver: nothing to mismatch
    assert "update the NVIDIA driver" in mismatch("2.13.0+cpu", None, False,
                                                  Driver("470.256.02", (11, 4), ("A100",), ((8, 0),)))


def test_refusal_without_a_gpu_and_with_a_mismatch():
    cpu_torch = ("2.13.0+cpu", None, False)
    assert refusal("allreduce-bench-gpu", "make allreduce-bench", None, cpu_torch) == (
        "allreduce-bench-gpu runs on NVIDIA GPUs only and this machine has none (nvidia-smi lists no GPU); "
        "on the CPU: make allreduce-bench")
    d = Driver("535.183.01", (12, 2), ("NVIDIA H100 80GB HBM3",), ((9, 0),))
    assert "torch==2.13.0+cu126" in refusal("fsdp-scaling-gpu", None, d, cpu_torch)
    assert refusal("x-gpu", None, d, ("2.13.0+cu126", "12.6", True)) is None


@pytest.mark.parametrize("behaviour, problem", [
    ("hang", "`nvidia-smi` did not answer within 1 s: the NVIDIA driver or a GPU hangs"),
    (None, "`nvidia-smi` failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA"),
    ("garbage", "`nvidia-smi` printed no driver and CUDA version ('Segmentation fault (core dumped) at 0x0')"),
])
def test_a_hanging_failing_or_garbage_driver_is_named_as_such(behaviour, problem, tmp_path):
    smi = str(fake_nvidia_smi(tmp_path, behaviour))
    found = cuda_env.probe_driver(smi, timeout_s=1)
    assert isinstance(found, cuda_env.DriverFault) and found.problem.startswith(problem), found
    assert read_driver(smi, timeout_s=1) is None  # for the callers that need a Driver: none that answers
    assert cuda_env.probe_driver(str(tmp_path / "no-such-nvidia-smi")) is None  # no nvidia-smi: no driver, no fault
    line = refusal("allreduce-bench-gpu", "make allreduce-bench", found, ("2.13.0+cpu", None, False))
    assert line == f"allreduce-bench-gpu runs on NVIDIA GPUs only and this machine's driver does not answer: " \
        f"{found.problem}"


def test_a_hanging_nvml_is_named_within_its_limit(monkeypatch):
    import threading

    import pynvml

    from common.hardware import NVMLUnavailable, bounded, nvml

    release = threading.Event()
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: release.wait(30))  # a driver call that does not return
    monkeypatch.setenv("DT_NVML_TIMEOUT_S", "0.5")
    with pytest.raises(NVMLUnavailable, match=r"^NVML \(nvmlInit\) did not answer within 0.5 s: the NVIDIA driver "):
        with nvml():
            pass
    release.set()
    assert bounded(lambda: 7, 1, "x") == 7
    with pytest.raises(ZeroDivisionError):
        bounded(lambda: 1 / 0, 1, "x")


def test_make_gives_up_on_a_hanging_nvidia_smi(tmp_path):
    """make help (and every target: make reads the GPU count first) within the limit, not never."""
    fake_nvidia_smi(tmp_path, "hang")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run(["make", "help", "DT_SMI_TIMEOUT_S=1", f"PYTHON={sys.executable}"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("Targets (variables: GPU=auto NPROC=4 "), r.stderr
    r = subprocess.run(["make", "allreduce-bench-gpu", "DT_SMI_TIMEOUT_S=1", f"PYTHON={sys.executable}"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]
    assert r.returncode == 2 and ours == ["error: allreduce-bench-gpu runs on NVIDIA GPUs only and this machine's "
                                          "driver does not answer: `nvidia-smi` did not answer within 1 s: the NVIDIA "
                                          "driver or a GPU hangs (a GPU in a bad state does this; ask for the GPU to "
                                          "be reset or the node rebooted)"], r.stderr


@NO_GPU
def test_gpu_presets_and_auto_refuse_with_the_fix_where_gpus_are_unusable(tmp_path, monkeypatch):
    from common.hardware import device_kind, get_preset

    fake_nvidia_smi(tmp_path, 570)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with pytest.raises(ValueError, match=r"--gpu h100 needs a CUDA GPU and torch sees none: torch .* cannot use "
                                         r"the 8 GPUs .*install the cu128 build"):
        device_kind(get_preset("h100"))
    # GPU=auto would quietly be the CPU preset on a GPU node: refused, naming the way to the CPU preset
    with pytest.raises(ValueError, match=r"^GPU=auto: torch .*; or GPU=cpu for the CPU preset$"):
        get_preset("auto")
    assert device_kind(get_preset("cpu")) == "cpu"


# ---- every GPU make target: one line, exit 2, nothing written, when torch cannot use CUDA -----------

def recipes() -> dict[str, list[str]]:
    """Every target's recipe lines, unexpanded, from make's own database (make -p; nothing is run)."""
    r = subprocess.run(["make", "-p", "--no-builtin-rules", "no-such-target-xyz"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    out, current = {}, None
    for line in r.stdout.splitlines():
        rule = re.match(r"^([a-z0-9.-]+):(?!=)", line)
        if rule:
            current = out.setdefault(rule.group(1), [])
        elif line.startswith("\t") and current is not None:
            current.append(line.strip())
        elif not line.startswith("#"):
            current = None
    return out


RECIPES = recipes()
GPU_TARGETS = sorted(t for t in RECIPES if re.fullmatch(r"[a-z0-9-]+-gpu|gpu-suite(-part-\d)?", t))


def test_the_gpu_targets_are_found():
    assert {"allreduce-bench-gpu", "fsdp-scaling-gpu", "tp-attention-gpu", "parallel-3d-gpu", "fp8-train-gpu",
            "gpu-suite", "gpu-suite-part-1", "gpu-suite-part-4"} <= set(GPU_TARGETS)


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_every_gpu_target_checks_cuda_first(target):
    # Every *-gpu target (a new one too) checks CUDA before any script or sub-make runs, right after its variables
    # (common/make_vars.py: a bad value is named first, wherever the target runs).
    assert RECIPES[target][0].startswith("$(call check_vars,"), RECIPES[target]
    assert RECIPES[target][1].startswith("$(call require_cuda"), RECIPES[target]


def make(target, tmp_path, *variables):
    fake_nvidia_smi(tmp_path, 550)  # 8 H100s on a CUDA 12.4 driver; this torch cannot use them
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(["make", target, f"PYTHON={sys.executable}", *variables], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)


@NO_GPU
@pytest.mark.parametrize("target", [t for t in GPU_TARGETS if not t.startswith("gpu-suite-part")])
def test_every_gpu_target_refuses_on_unusable_gpus_and_writes_nothing(target, tmp_path):
    watched = [LABS / lab / sub for lab in ("allreduce-bench", "fsdp-scaling", "tp-attention", "fp8-train",
                                            "parallel-3d") for sub in ("results", "runs")]
    before = [tree_state(w) for w in watched]
    r = make(target, tmp_path)
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]
    assert r.returncode == 2 and len(ours) == 1, r.stderr
    assert ours[0].startswith(f"error: {target} runs on NVIDIA GPUs only: torch ") and \
        "driver 550.54.15, CUDA <= 12.4" in ours[0] and '"torch==2.13.0+cu126"' in ours[0]
    assert r.stdout == "" and [tree_state(w) for w in watched] == before


@NO_GPU
@pytest.mark.parametrize("target", ["fp8-train", "fp8-train-bench", "parallel-3d-baseline"])
def test_a_gpu_preset_on_unusable_gpus_is_the_one_mismatch_line(target, tmp_path):
    """Not a *-gpu target, a GPU preset: the same line as the GPU targets (the driver, the build, the fix), never
    "use GPU=cpu here" on a node whose GPUs only need the right torch."""
    watched = [LABS / lab / sub for lab in ("fp8-train", "parallel-3d") for sub in ("results", "runs")]
    before = [tree_state(w) for w in watched]
    r = make(target, tmp_path, "GPU=h100", "NPROC=1")
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]
    assert r.returncode == 2 and len(ours) == 1, r.stderr
    assert "--gpu h100 needs a CUDA GPU and torch sees none: torch " in ours[0] and \
        "driver 550.54.15, CUDA <= 12.4" in ours[0] and '"torch==2.13.0+cu126"' in ours[0], ours[0]
    assert [tree_state(w) for w in watched] == before


def test_cuda_env_cli(capsys):
    assert cuda_env.main([]) == 0
    assert "fits        torch +" in capsys.readouterr().out


def test_torch_backend_given_to_an_existing_venv_is_checked_not_ignored(tmp_path):
    """make rebuilds .venv only when requirements.txt changes: TORCH_BACKEND=cu126 on a venv holding the CPU build
    is one line naming both and the command that installs it, exit 2; the build it holds, or none given, passes."""
    d550 = Driver("550.54.15", (12, 4), ("NVIDIA H100 80GB HBM3",), ((9, 0),))
    assert cuda_env.backend_problem("cpu", "2.13.0+cpu", None) is None
    assert cuda_env.backend_problem("registry", "2.13.0", None) is None
    assert cuda_env.backend_problem("auto", "2.13.0+cu126", d550) is None
    assert "asks for torch +cu126 and .venv holds torch 2.13.0+cpu" in cuda_env.backend_problem("auto", "2.13.0+cpu",
                                                                                                   d550)
    assert cuda_env.backend_problem("rocm", "2.13.0+cpu", None).startswith("TORCH_BACKEND='rocm'; allowed: auto, cpu")
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    (tmp_path / "requirements.txt").write_text("torch==2.13.0\n")
    (venv / ".installed").touch()  # newer than requirements.txt: make would not rebuild it
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def setup(*variables: str) -> subprocess.CompletedProcess:
        return subprocess.run(["make", "-f", str(ROOT / "Makefile"), f"LABS_DIR={LABS}", "setup", *variables],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    import importlib.metadata
    here = importlib.metadata.version("torch")
    other = "cu126" if not here.endswith("+cu126") else "cpu"
    r = setup(f"TORCH_BACKEND={other}")
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]
    assert r.returncode == 2 and ours == [
        f"error: TORCH_BACKEND={other} asks for torch +{other} and .venv holds torch {here} (a venv is rebuilt only "
        f"when requirements.txt changes): `make clean-venv setup TORCH_BACKEND={other}` installs that build"], r.stderr
    assert setup().returncode == 0 and setup(f"TORCH_BACKEND={here.partition('+')[2] or 'registry'}").returncode == 0
