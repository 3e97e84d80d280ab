"""`make setup`: a venv whose torch can use this machine's GPUs, or says in one line why it cannot.

    PYTHONPATH=distributed-training python3 -m provision.torch_install preflight     # before the venv exists
    PYTHONPATH=distributed-training .venv/bin/python -m provision.torch_install install --requirements requirements.txt
    ... install --dry-run          # what it would install, and from where; nothing installed
    ... install --backend cu128    # force a build (auto, cpu, cu126, cu128, cu130, registry)

requirements.txt pins torch (==2.13.0) but not its build: the package registry serves one build of
each release (PyPI's Linux torch is the CUDA 13.0 one, several GB, useless on a CUDA-12 driver and on a
laptop without a GPU). `install` reads the driver (nvidia-smi, common/cuda_env.py), picks the build that
fits it (+cu126/+cu128/+cu130, or +cpu without a driver) and installs the pinned release of that build
from PyTorch's own wheel index, as pytorch.org's install selector does (`pip install torch --index-url
https://download.pytorch.org/whl/cu126`); pip then installs the rest of requirements.txt, which the
installed torch already satisfies.

Before it asks pip, it fetches the index page itself with a timeout of seconds (TORCH_INDEX_TIMEOUT_S):
pip retries an unreachable index for minutes, and uv (whose --torch-backend=auto makes the same kind of
choice) fails rather than falls back. Where the index cannot be reached (a machine that reaches only a
package-registry mirror, like the CI's), or has no wheel of the pin for this Python, one line says so and
torch comes from the registry as pip is configured (the CI's pip finds a local CPU wheel there; uv would
not see it, which is one more reason this is pip).

`preflight` runs with the bootstrap interpreter before any venv exists: Python >= 3.10, and the venv
module able to bootstrap pip (Debian and Ubuntu ship that part separately, as python3.X-venv).
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import platform
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from importlib import metadata
from pathlib import Path
from typing import Callable, NamedTuple

from common.cuda_env import TORCH_CUDA_BUILDS, TORCH_INDEX, Build, Driver, DriverFault, preferred_builds, probe_driver

BACKENDS = ("auto", "cpu", *TORCH_CUDA_BUILDS, "registry")


class Plan(NamedTuple):
    """What `install` does: a requirement from an index (None: leave torch to the registry), and why."""
    requirement: str | None  # 'torch==2.13.0+cu126'
    index_url: str | None    # 'https://download.pytorch.org/whl/cu126'
    note: str                # the one line printed


class Unreachable(Exception):
    pass


def preflight(version: tuple[int, int] = sys.version_info[:2], has_ensurepip: bool | None = None,
              python: str = sys.executable) -> str | None:
    """One line when this interpreter cannot build the venv (too old; no ensurepip), else None."""
    if version < (3, 10):
        return (f"Python >= 3.10 is needed, {python} is {version[0]}.{version[1]}; "
                "pass BOOTSTRAP_PYTHON=python3.11 or similar")
    if has_ensurepip is None:
        has_ensurepip = importlib.util.find_spec("ensurepip") is not None
    if not has_ensurepip:
        pkg = f"python{version[0]}.{version[1]}-venv"
        return (f"{python} cannot create a virtual environment (its venv module has no ensurepip): install "
                f"Debian/Ubuntu's {pkg} (sudo apt install {pkg}, or python3-venv), or pass BOOTSTRAP_PYTHON=...")
    return None


def pinned(requirements: Path, package: str) -> str:
    """The version a requirements file pins exactly (`package==X.Y.Z`), or '' when it pins none."""
    text = requirements.read_text() if requirements.is_file() else ""
    for line in text.splitlines():
        m = re.match(rf"\s*{re.escape(package)}\s*==\s*([\w.]+)\s*(?:;.*)?(?:#.*)?$", line)
        if m:
            return m.group(1)
    return ""


def pinned_torch(requirements: Path) -> str:
    """The torch version requirements.txt pins ('2.13.0'); SystemExit when it pins none exactly."""
    version = pinned(requirements, "torch")
    if not version:
        raise SystemExit(f"torch_install: error: {requirements} pins no torch==X.Y.Z")
    return version


def wheel_pattern(version: str, variant: str, py: tuple[int, int] = sys.version_info[:2],
                  machine: str = platform.machine()) -> re.Pattern:
    """The file name of the pinned torch wheel of one build for this CPython and CPU architecture."""
    tag = f"cp{py[0]}{py[1]}"
    return re.compile(rf"torch-{re.escape(version)}\+{variant}-{tag}-{tag}-\S*{re.escape(machine)}\.whl$")


def fetch(url: str, timeout_s: float) -> str:
    """The page at url; Unreachable (with the reason) when it does not answer within timeout_s."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return ""  # the index answers, and has no such page
        raise Unreachable(f"HTTP {e.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise Unreachable(f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__) from None


def has_wheel(page: str, pattern: re.Pattern) -> bool:
    names = (urllib.parse.unquote(urllib.parse.urlsplit(html.unescape(h)).path).rsplit("/", 1)[-1]
             for h in re.findall(r'href="([^"]+)"', page))
    return any(pattern.match(n) for n in names)


def registry_plan(pin: str, why: str) -> Plan:
    return Plan(None, None, f"note: {why}; torch=={pin} comes from the package registry as pip is configured "
                            "instead (PyPI's Linux build: CUDA 13.0, for drivers >= 580; `make doctor` checks it)")


def plan(pin: str, driver: Driver | None, backend: str = "auto", index: str = TORCH_INDEX, timeout_s: float = 5.0,
         get: Callable[[str, float], str] | None = None) -> Plan:
    """Which torch build to install from where: the first build that fits the driver and that the index
    has for this Python; the registry when the index does not answer, has none, or the platform is not Linux."""
    if backend == "registry":
        return Plan(None, None, f"torch=={pin} from the package registry (TORCH_BACKEND=registry)")
    if sys.platform != "linux":
        return Plan(None, None, f"torch=={pin} from the package registry ({sys.platform}: its own builds)")
    if backend == "auto":
        builds = preferred_builds(driver)
    else:
        builds = [Build(backend, f"TORCH_BACKEND={backend}")]
    get = get or fetch
    index = index.rstrip("/")
    missing = []
    for build in builds:
        url = f"{index}/{build.variant}/torch/"
        start = time.monotonic()
        try:
            page = get(url, timeout_s)
        except Unreachable as e:
            return registry_plan(pin, f"{index} did not answer ({e}, {time.monotonic() - start:.1f} s)")
        if has_wheel(page, wheel_pattern(pin, build.variant)):
            where = f"driver {driver.version}, CUDA <= {driver.cuda_text}" if driver else "no NVIDIA driver"
            return Plan(f"torch=={pin}+{build.variant}", f"{index}/{build.variant}",
                        f"torch {pin}+{build.variant} from {index}/{build.variant} ({where}; {build.why})")
        missing.append(build.variant)
    return registry_plan(pin, f"{index} has no torch {pin} wheel of {'/'.join(missing)} for this Python "
                              f"({sys.version_info[0]}.{sys.version_info[1]}, {platform.machine()})")


def installed_torch() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="torch_install", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pre = sub.add_parser("preflight", help="can this interpreter build the venv (Python >= 3.10, ensurepip)")
    pre.add_argument("--python", default=sys.executable, help="its name, as the user gave it")
    ins = sub.add_parser("install", help="install the pinned torch built for this machine's driver")
    ins.add_argument("--requirements", default="requirements.txt", help="the file that pins torch==X")
    ins.add_argument("--backend", default="auto", help=f"which build: {', '.join(BACKENDS)}")
    ins.add_argument("--index", default=TORCH_INDEX, help="PyTorch's wheel index (one sub-index per build)")
    ins.add_argument("--timeout-s", type=float, default=5.0, help="how long the index may take to answer")
    ins.add_argument("--dry-run", action="store_true", help="say what would be installed; install nothing")
    args = ap.parse_args(argv)
    if args.cmd == "preflight":
        line = preflight(python=args.python)
        if line:
            print(f"error: {line}", file=sys.stderr)
            return 2
        return 0
    if args.backend not in BACKENDS:
        print(f"torch_install: error: TORCH_BACKEND={args.backend}; allowed: {', '.join(BACKENDS)}", file=sys.stderr)
        return 2
    pin = pinned_torch(Path(args.requirements))
    have = installed_torch()
    if have and have.split("+")[0] == pin and args.backend == "auto" and not args.dry_run:
        print(f"torch {have} is installed already (make clean-venv setup chooses again)")
        return 0
    found = probe_driver()
    if isinstance(found, DriverFault) and args.backend == "auto":  # a hanging driver is not "no GPU": no CPU build
        print(f"torch_install: error: the NVIDIA driver does not answer: {found.problem}; fix the driver, or name "
              f"the build: TORCH_BACKEND={'|'.join(BACKENDS[1:])}", file=sys.stderr)
        return 1
    p = plan(pin, found if isinstance(found, Driver) else None, args.backend, args.index, args.timeout_s)
    print(p.note)
    if p.requirement is None or args.dry_run:
        if p.requirement and args.dry_run:
            print(f"would run: {sys.executable} -m pip install \"{p.requirement}\" --index-url {p.index_url}")
        return 0
    # Not -q: a CUDA build and its nvidia-* libraries are GBs, and pip's progress bars say how far it is.
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", p.requirement,
           "--index-url", p.index_url]
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    raise SystemExit(main())
