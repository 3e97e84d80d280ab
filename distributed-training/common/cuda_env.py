"""Does this torch fit this machine's NVIDIA driver? Which torch build would, and the one line when not.

    python -m common.cuda_env                      # the driver, torch's build, the build that fits
    python -m common.cuda_env require allreduce-bench-gpu --cpu "make allreduce-bench"
                                                   # every *-gpu make target's first step: exit 2 unless
                                                   # torch can use CUDA, before anything is written
    python -m common.cuda_env backend cu126        # make's check when TORCH_BACKEND is given and .venv
                                                   # exists: exit 2 unless its torch is that build

nvidia-smi is the driver's own word on what it runs: its header names the newest CUDA the driver
supports ("CUDA Version: 12.4" for driver 550). PyTorch publishes each release once per CUDA version
(torch 2.13: +cu126, +cu128, +cu130) plus a CPU build (+cpu), each on its own wheel index; a package
registry serves one of them (PyPI's Linux torch 2.13 is the CUDA 13.0 build, which needs driver >= 580).
Which build fits a driver (`preferred_builds`, best first):

    1. the newest CUDA build the driver runs natively (build CUDA <= the driver's CUDA);
    2. else the oldest newer build of the driver's CUDA major: CUDA's minor-version compatibility runs
       any 12.x build on any CUDA-12 driver (>= 525.60.13; docs.nvidia.com/deploy/cuda-compatibility);
    3. else the CPU build (a driver older than every published CUDA version: update the driver).

CUDA 13 dropped GPUs older than Turing (sm_75), so a node with such a GPU is given a 12.x build.

nvidia-smi is asked with a time limit (DT_SMI_TIMEOUT_S, 15 s; it answers in about a second, a few on a
large node without persistence mode): a GPU in a bad state makes it hang, and then the answer is that the
driver hangs, never "no GPU". One that fails, or prints no driver version, is named as failing
(`probe_driver` -> DriverFault); the GPU targets and `make doctor` say so and exit non-zero.
uv's `--torch-backend=auto` makes a similar choice (the newest 12.x for any 12.x driver); this module
exists because `make setup` also probes the index first and falls back to the registry
(provision/torch_install.py), because `make doctor` and the GPU targets need the same rule to tell a user
what to fix, and because it must run before any package is installed: the standard library only here,
torch is imported inside the functions that need it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from typing import NamedTuple

from .config import env_seconds

# The CUDA builds PyTorch publishes for the pinned torch (requirements.txt), one wheel index each.
TORCH_CUDA_BUILDS = ("cu126", "cu128", "cu130")
TORCH_INDEX = "https://download.pytorch.org/whl"


class Driver(NamedTuple):
    """What nvidia-smi says: the driver, the newest CUDA it runs, the GPUs and their compute capabilities."""
    version: str                            # "550.54.15"
    cuda: tuple[int, int]                   # (12, 4)
    gpus: tuple[str, ...]                   # ("NVIDIA H100 80GB HBM3", ...)
    compute_caps: tuple[tuple[int, int], ...]  # ((9, 0), ...); empty where nvidia-smi does not say

    @property
    def cuda_text(self) -> str:
        return f"{self.cuda[0]}.{self.cuda[1]}"


class DriverFault(NamedTuple):
    """nvidia-smi is there and gave no usable answer: it hung (a driver or GPU in a bad state), failed, or
    printed something that names no driver. `problem` is one line that says which."""
    problem: str


class Build(NamedTuple):
    """A torch build for this machine: its local version label and why it was chosen."""
    variant: str  # "cu126", ..., "cpu"
    why: str      # "native" | "minor-version compatibility" | "no NVIDIA driver" | ...


def build_cuda(variant: str) -> tuple[int, int]:
    """'cu128' -> (12, 8), 'cu130' -> (13, 0): the CUDA version a build's label names."""
    digits = variant[2:]
    return int(digits[:-1]), int(digits[-1])


def variant_of(torch_cuda: str | None) -> str:
    """torch.version.cuda -> its build label: '12.6' -> 'cu126', None -> 'cpu'."""
    if not torch_cuda:
        return "cpu"
    major, minor = torch_cuda.split(".")[:2]
    return f"cu{major}{minor}"


def smi_timeout_s() -> float:
    """How long nvidia-smi may take to answer (DT_SMI_TIMEOUT_S, default 15 s)."""
    return env_seconds("DT_SMI_TIMEOUT_S", 15.0)


class _NoAnswer(Exception):
    """nvidia-smi ran and gave no usable answer (the message is DriverFault's line)."""


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[0][:160] if lines else "no output"


def _smi(smi: str, args: list[str], timeout_s: float) -> str | None:
    """nvidia-smi's stdout; None where there is no such program; _NoAnswer when it hangs or fails."""
    shown = " ".join(["nvidia-smi", *args])
    try:
        r = subprocess.run([smi, *args], capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        raise _NoAnswer(f"`{shown}` did not answer within {timeout_s:g} s: the NVIDIA driver or a GPU hangs (a GPU "
                        "in a bad state does this; ask for the GPU to be reset or the node rebooted)") from None
    except OSError as e:
        raise _NoAnswer(f"`{shown}` cannot run ({e.strerror})") from None
    if r.returncode != 0:
        raise _NoAnswer(f"`{shown}` failed (exit {r.returncode}): {_first_line(r.stdout + chr(10) + r.stderr)}")
    return r.stdout


def probe_driver(smi: str = "nvidia-smi", timeout_s: float | None = None) -> Driver | DriverFault | None:
    """The driver as nvidia-smi reports it; None where there is no nvidia-smi; DriverFault (one line) where
    nvidia-smi hangs beyond `timeout_s`, fails, or prints no driver and CUDA version."""
    timeout_s = smi_timeout_s() if timeout_s is None else timeout_s
    try:
        header = _smi(smi, [], timeout_s)
        if header is None:
            return None
        version = re.search(r"Driver Version:\s*([\d.]+)", header)
        cuda = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", header)
        if not (version and cuda):
            return DriverFault(f"`nvidia-smi` printed no driver and CUDA version ({_first_line(header)!r}): a broken "
                               "driver install, or not NVIDIA's tool")
        listing = _smi(smi, ["--query-gpu=name,compute_cap", "--format=csv,noheader"], timeout_s) or ""
    except _NoAnswer as e:
        return DriverFault(str(e))
    gpus, caps = [], []
    for line in listing.splitlines():
        name, _, cap = line.rpartition(",")
        if not name.strip():
            continue
        gpus.append(name.strip())
        if re.fullmatch(r"\s*\d+\.\d+\s*", cap):
            major, minor = cap.strip().split(".")
            caps.append((int(major), int(minor)))
    return Driver(version.group(1), (int(cuda.group(1)), int(cuda.group(2))), tuple(gpus), tuple(caps))


def read_driver(smi: str = "nvidia-smi", timeout_s: float | None = None) -> Driver | None:
    """The driver, or None where there is none that answers (probe_driver says which it is)."""
    found = probe_driver(smi, timeout_s)
    return found if isinstance(found, Driver) else None


def preferred_builds(driver: Driver | None, builds: tuple[str, ...] = TORCH_CUDA_BUILDS) -> list[Build]:
    """The torch builds that run on this driver, best first; always ends with the CPU build."""
    if driver is None:
        return [Build("cpu", "no NVIDIA driver")]
    pre_turing = any(cap < (7, 5) for cap in driver.compute_caps)
    usable = [b for b in builds if not (build_cuda(b)[0] >= 13 and pre_turing)]
    native = sorted((b for b in usable if build_cuda(b) <= driver.cuda), key=build_cuda, reverse=True)
    compat = sorted((b for b in usable if build_cuda(b)[0] == driver.cuda[0] and build_cuda(b) > driver.cuda),
                    key=build_cuda)
    fits = [Build(b, "native") for b in native] + [Build(b, "minor-version compatibility") for b in compat]
    if fits:
        return fits + [Build("cpu", "the last resort")]
    return [Build("cpu", f"driver {driver.version} runs CUDA <= {driver.cuda_text}, older than every CUDA build "
                         f"of this torch ({', '.join(builds)}): update the NVIDIA driver")]


def install_command(python: str, torch_version: str, variant: str, index: str = TORCH_INDEX) -> str:
    """The pip command that installs torch `torch_version` (public part) built for `variant`."""
    public = torch_version.split("+")[0]
    return f'{python} -m pip install "torch=={public}+{variant}" --index-url {index}/{variant}'


def build_text(torch_cuda: str | None) -> str:
    """torch.version.cuda in words: 'a CUDA 12.6 build', 'a CPU build'."""
    return f"a CUDA {torch_cuda} build" if torch_cuda else "a CPU build"


def mismatch(torch_version: str, torch_cuda: str | None, cuda_available: bool, driver: Driver | None,
             python: str = sys.executable) -> str | None:
    """One line when torch cannot use GPUs that nvidia-smi lists, naming both and the fix; else None."""
    if cuda_available or driver is None or not driver.gpus:
        return None
    n = len(driver.gpus)
    head = (f"torch {torch_version} ({build_text(torch_cuda)}) cannot use the {n} GPU{'s' if n > 1 else ''} "
            f"nvidia-smi lists (driver {driver.version}, CUDA <= {driver.cuda_text})")
    best = preferred_builds(driver)[0]
    if best.variant == "cpu":
        return f"{head}: {best.why}"
    current = variant_of(torch_cuda)
    if current in {b.variant for b in preferred_builds(driver)} - {"cpu"}:  # a build that fits, yet no GPU
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hint = f"CUDA_VISIBLE_DEVICES={visible!r} hides them" if visible is not None else \
            "check that this process may open /dev/nvidia* (container runtime, cgroup)"
        return f"{head}: the build fits the driver, so {hint}"
    return f"{head}: install the {best.variant} build: {install_command(python, torch_version, best.variant)}"


def _torch_facts() -> tuple[str, str | None, bool]:
    import torch
    return torch.__version__, torch.version.cuda, torch.cuda.is_available()


def refusal(target: str, cpu_alternative: str | None, driver: Driver | DriverFault | None,
            facts=None) -> str | None:
    """Why `target` (a GPU target) cannot run here, in one line; None when torch can use CUDA."""
    torch_version, torch_cuda, available = facts or _torch_facts()
    if available:
        return None
    instead = f"; on the CPU: {cpu_alternative}" if cpu_alternative else ""
    if isinstance(driver, DriverFault):
        return f"{target} runs on NVIDIA GPUs only and this machine's driver does not answer: {driver.problem}"
    if driver is None or not driver.gpus:
        return f"{target} runs on NVIDIA GPUs only and this machine has none (nvidia-smi lists no GPU){instead}"
    return f"{target} runs on NVIDIA GPUs only: {mismatch(torch_version, torch_cuda, False, driver)}"


BACKENDS = ("auto", "cpu", *TORCH_CUDA_BUILDS, "registry")  # TORCH_BACKEND's values (provision/torch_install.py)


def backend_problem(requested: str, installed: str | None, driver: Driver | DriverFault | None) -> str | None:
    """One line when TORCH_BACKEND asks for a torch build that the existing .venv does not hold (the venv is
    rebuilt only when requirements.txt changes, so the variable alone would change nothing); else None.
    `installed` is the venv's torch version ("2.13.0+cpu"), None without torch."""
    if requested not in BACKENDS:
        return f"TORCH_BACKEND={requested!r}; allowed: {', '.join(BACKENDS)}"
    if requested == "registry":  # whatever the package registry serves: nothing to compare
        return None
    if isinstance(driver, DriverFault) and requested == "auto":
        return f"TORCH_BACKEND=auto reads the driver, and it does not answer: {driver.problem}"
    want = preferred_builds(driver if isinstance(driver, Driver) else None)[0].variant if requested == "auto" \
        else requested
    have = (installed or "").partition("+")[2]
    if have == want:
        return None
    holds = f"torch {installed}" if installed else "no torch"
    return (f"TORCH_BACKEND={requested} asks for torch +{want} and .venv holds {holds} (a venv is rebuilt only when "
            f"requirements.txt changes): `make clean-venv setup TORCH_BACKEND={requested}` installs that build")


def describe(driver: Driver | DriverFault | None) -> str:
    if isinstance(driver, DriverFault):
        return f"not answering: {driver.problem}"
    if driver is None:
        where = shutil.which("nvidia-smi")
        return f"none ({'nvidia-smi finds no driver' if where else 'no nvidia-smi on PATH'})"
    return (f"{driver.version}, runs CUDA <= {driver.cuda_text}; nvidia-smi lists {len(driver.gpus)} GPU"
            f"{'s' if len(driver.gpus) != 1 else ''}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cuda_env", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    req = sub.add_parser("require", help="exit 2 with one line unless torch can use CUDA")
    req.add_argument("target", help="the make target, named in the message")
    req.add_argument("--cpu", default=None, help="the command that runs this lab's CPU preset instead")
    back = sub.add_parser("backend", help="exit 2 with one line unless this torch is the TORCH_BACKEND build")
    back.add_argument("requested", help="TORCH_BACKEND as given")
    args = ap.parse_args(argv)
    if args.cmd == "backend":  # no torch import: the installed version is enough
        from importlib import metadata
        try:
            installed = metadata.version("torch")
        except metadata.PackageNotFoundError:
            installed = None
        needs_driver = args.requested == "auto"
        line = backend_problem(args.requested, installed, probe_driver() if needs_driver else None)
        if line:
            print(f"error: {line}", file=sys.stderr)
            return 2
        return 0
    driver = probe_driver()
    if args.cmd == "require":
        line = refusal(args.target, args.cpu, driver)
        if line:
            print(f"error: {line}", file=sys.stderr)
            return 2
        return 0
    torch_version, torch_cuda, available = _torch_facts()
    print(f"driver      {describe(driver)}")
    print(f"torch       {torch_version}, {build_text(torch_cuda)}; CUDA usable: {'yes' if available else 'no'}")
    if isinstance(driver, DriverFault):
        print(f"problem     {driver.problem}")
        return 1
    best = preferred_builds(driver)[0]
    print(f"fits        torch +{best.variant} ({best.why})")
    line = mismatch(torch_version, torch_cuda, available, driver)
    if line:
        print(f"problem     {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
