"""The offline kit: every wheel fp8-train's FP8 backends need on a GPU node without internet, in one small folder.

Why. A lent or rented GPU node often has no network, a fixed image (here Python 3.12, torch 2.11.0+cu130, no
TransformerEngine, torchao or pydantic) and a small way in (a 64 MiB bundle). Installing there is impossible,
and compiling TransformerEngine's torch extension there spends the slot. So the kit is built where there is
internet, for the node's exact Python, torch build and GPU architectures, and checked before the trip:

    torchao                     3 MB, abi3, no dependencies
    pydantic and its four deps  what TransformerEngine imports at run time (2 MB)
    transformer_engine          TE's Python package (1 MB)
    transformer_engine_cu13     TE's core library, its kernels reduced to the node's architectures (fatbin.py):
                                276 MB on PyPI, about 29 MB for sm_90
    transformer_engine_torch    TE's PyTorch extension, compiled here against the node's torch in a build
                                environment of the node's Python (`.kit-build/`, kept for the next kit)

Checks: what reaches the node, the checkout's tree (what `git ls-files --cached --others --exclude-standard`
lists: tracked files and untracked ones git does not ignore, about 19.4 MiB) plus the kit, against BUNDLE_MIB
(64 MiB, all a lent machine takes), before the build (the tree alone) and after it; every wheel's tags against
the target with `pip install --dry-run` (one wrong tag stops the whole install on the node); the reduced
library listed by `cuobjdump --list-elf` (NVIDIA's, from the nvidia-cuda-cuobjdump wheel). MANIFEST.json
records the target, each file's size and hash, the kept architectures and how long each step took.

    make offline-kit KIT=kit                                      # the lent node: 3.12, 2.11.0+cu130, sm_90
    make offline-kit KIT=kit KIT_PYTHON=3.11 KIT_TORCH=2.13.0+cu128 KIT_ARCHS=90,100
    make offline-install KIT=kit PYTHON=python3                   # on the node: into .kit-site, no network
    PYTHONPATH=distributed-training python -m provision.offline_kit check --kit kit

How long (measured here, 2 cores): torch for the build environment ~2 min of download, the extension's
compile ~12 min on an idle machine (MAX_JOBS=2, one nvcc thread per job), the rest a minute.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from common.results import git_commit

from . import fatbin, wheel_edit
from .bundle import BundleError, bundle_problem, kit_bytes, tree_bytes
from .wheelhouse import PLATFORMS, pip_download

ROOT = Path(__file__).resolve().parents[2]


class KitError(ValueError):
    pass


@dataclass(frozen=True)
class Target:
    """The node the kit is for."""
    python: str = "3.12"
    torch: str = "2.11.0+cu130"
    archs: tuple[int, ...] = (90,)
    te: str = "2.20.2"
    torchao: str = "0.18.0"

    def __post_init__(self):
        if not re.fullmatch(r"3\.\d+", self.python):
            raise KitError(f"KIT_PYTHON takes a version like 3.12, got {self.python!r}")
        if not re.fullmatch(r"\d+\.\d+\.\d+\+cu1[23]\d", self.torch):
            raise KitError(f"KIT_TORCH takes a CUDA build like 2.11.0+cu130, got {self.torch!r} (TransformerEngine "
                           "has cores for CUDA 12 and 13 only)")
        if not self.archs or any(a < 70 for a in self.archs):
            raise KitError(f"KIT_ARCHS takes GPU architectures like 90 or 90,100, got {self.archs}")

    @property
    def cuda_major(self) -> int:
        return int(self.torch.split("+cu")[1][:2])

    @property
    def build_tag(self) -> str:
        return "0" + "".join(f"sm{a}" for a in self.archs)

    @property
    def env_name(self) -> str:
        return f"py{self.python}-torch{self.torch}"


def build_python(version: str) -> str:
    """An interpreter of `version` for the build environment: pythonX.Y on PATH, or pyenv's."""
    found = shutil.which(f"python{version}")
    candidates = [found] if found else []
    candidates += sorted(str(p) for p in Path.home().glob(f".pyenv/versions/{version}.*/bin/python"))
    for path in candidates:
        if path and subprocess.run([path, "-c", "import venv"], capture_output=True).returncode == 0:
            return path
    raise KitError(f"no Python {version} here for the build environment (python{version} on PATH or pyenv); "
                   "install one or set KIT_BUILD_PYTHON")


def build_env(t: Target, build: Path, python: str | None) -> Path:
    """The build environment: the node's Python with the node's torch, TE's core and the build tools (once)."""
    env = build / t.env_name
    py = env / "bin" / "python"
    ready = env / ".ready"
    if ready.is_file() and ready.read_text().strip() == t.torch:
        return py
    subprocess.run([python or build_python(t.python), "-m", "venv", "--clear", str(env)], check=True)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + [f"torch=={t.torch.split('+')[0]}", "wheel", "setuptools", "ninja", "packaging",
                          "pydantic", "importlib-metadata"], check=True)
    got = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True, check=True).stdout.strip()
    if got != t.torch:
        raise KitError(f"the registry's torch=={t.torch.split('+')[0]} is {got}, not {t.torch}: build the kit where "
                       "PyTorch's index for that build is reachable, or name the registry's build in KIT_TORCH")
    subprocess.run(pip + ["--no-deps", f"transformer_engine=={t.te}", f"transformer_engine_cu{t.cuda_major}=={t.te}"],
                   check=True)
    ready.write_text(t.torch + "\n")
    return py


def compile_extension(t: Target, py: Path, build: Path, jobs: int) -> Path:
    """transformer_engine_torch compiled against the build environment's torch (kept for the next kit)."""
    wheels = build / t.env_name / "wheels"
    have = sorted(wheels.glob(f"transformer_engine_torch-{t.te}-*.whl"))
    if have:
        return have[-1]
    args = ["-m", "provision.te_install", "wheel", "--te", t.te, "--dest", str(wheels),
            "--cuda-archs", ";".join(map(str, t.archs)), "--max-jobs", str(jobs)]
    subprocess.run([str(py), *args], check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "distributed-training")})
    return sorted(wheels.glob(f"transformer_engine_torch-{t.te}-*.whl"))[-1]


def prune_core(t: Target, downloads: Path, kit: Path) -> Path:
    """TE's core wheel with its libraries' device code reduced to the target's architectures."""
    src = next(downloads.glob(f"transformer_engine_cu{t.cuda_major}-{t.te}-*.whl"))
    keep = set(t.archs)

    def change(name: str, data: bytes) -> bytes | None:
        if not name.endswith(".so"):
            return None
        new, freed, _ = fatbin.prune_file(data, keep)
        return new if freed else None
    return wheel_edit.rewrite(src, kit, t.build_tag, change)


def kept_archs(kit: Path, t: Target, build: Path) -> list[str]:
    """`cuobjdump --list-elf` of the reduced core library: the architectures whose code it still holds."""
    tools = build / "cuobjdump"
    if not list(tools.rglob("cuobjdump")):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(tools),
                        "--only-binary=:all:", f"nvidia-cuda-cuobjdump>={t.cuda_major},<{t.cuda_major + 1}"],
                       check=True)
        shutil.unpack_archive(next(tools.glob("*.whl")), tools / "x", "zip")
    tool = next(p for p in tools.rglob("cuobjdump") if p.is_file())
    tool.chmod(0o755)
    with tempfile.TemporaryDirectory() as tmp:
        core = next(kit.glob(f"transformer_engine_cu{t.cuda_major}-*.whl"))
        shutil.unpack_archive(core, tmp, "zip")
        lib = next(Path(tmp).rglob("libtransformer_engine.so"))
        out = subprocess.run([str(tool), "--list-elf", str(lib)], capture_output=True, text=True, check=True).stdout
    return sorted(set(re.findall(r"\.(sm_\d+a?)\.cubin", out)))


def check(kit: Path, t: Target, limit_mib: float) -> list[str]:
    """Problems with the kit, each one line (none: it installs on the target and fits beside the tree)."""
    wheels = sorted(kit.glob("*.whl"))
    too_big = bundle_problem(tree_bytes(leave_out=kit), kit_bytes(kit), limit_mib)
    problems = [too_big] if too_big else []
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps", "--target", tmp,
               "--only-binary=:all:", "--python-version", t.python, "--implementation", "cp",
               *[a for p in PLATFORMS + ("linux_x86_64",) for a in ("--platform", p)], *map(str, wheels)]
        r = subprocess.run(cmd, capture_output=True, text=True)  # linux_x86_64: the extension compiled here
    if r.returncode:
        why = next((x for x in r.stdout.splitlines() + r.stderr.splitlines() if "ERROR" in x), "see pip's output")
        problems.append(f"pip cannot install the kit on Python {t.python}: {why}")
    return problems


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_kit(t: Target, kit: Path, build: Path, limit_mib: float, python: str | None, jobs: int) -> dict:
    early = bundle_problem(tree_bytes(leave_out=kit), 0, limit_mib)
    if early:  # before an hour of downloads and compiling
        raise KitError(early)
    times: dict[str, float] = {}
    kit.mkdir(parents=True, exist_ok=True)
    for old in kit.glob("*.whl"):
        old.unlink()
    downloads = build / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)

    def timed(what, fn, *a):
        print(f"offline-kit: {what}", flush=True)
        t0 = time.monotonic()
        out = fn(*a)
        times[what] = round(time.monotonic() - t0, 1)
        return out
    timed("download torchao, pydantic, TransformerEngine", lambda: (
        pip_download(kit, t.python, [f"torchao=={t.torchao}", f"transformer_engine=={t.te}"], deps=False),
        pip_download(kit, t.python, ["pydantic"], deps=True),
        pip_download(downloads, t.python, [f"transformer_engine_cu{t.cuda_major}=={t.te}"], deps=False)))
    timed(f"reduce TE's core to sm_{','.join(map(str, t.archs))}", prune_core, t, downloads, kit)
    py = timed(f"build environment: Python {t.python}, torch {t.torch}", build_env, t, build, python)
    ext = timed("compile transformer_engine_torch against it", compile_extension, t, py, build, jobs)
    shutil.copy2(ext, kit / ext.name)
    archs = timed("list the kept code (cuobjdump)", kept_archs, kit, t, build)
    problems = timed("check size and tags (pip install --dry-run)", check, kit, t, limit_mib)
    manifest = {"target": asdict(t), "kept_cubins": archs, "commit": git_commit(),
                "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "seconds": times,
                "files": {w.name: {"bytes": w.stat().st_size, "sha256": _sha256(w)} for w in sorted(kit.glob("*.whl"))}}
    (kit / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if problems:
        raise KitError("; ".join(problems))
    return manifest


def read_manifest(kit: Path) -> dict:
    try:
        manifest = json.loads((kit / "MANIFEST.json").read_text())
        manifest["target"], manifest["files"]  # noqa: B018 - the two keys install reads
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise KitError(f"{kit} holds no readable MANIFEST.json ({type(e).__name__}): not a kit made by "
                       "`make offline-kit`") from None
    return manifest


def install(kit: Path, site: Path) -> str:
    """The kit's wheels into `site` (a folder make puts on PYTHONPATH), checked against this Python and torch first;
    the interpreter's own environment is not touched."""
    manifest = read_manifest(kit)
    t = manifest["target"]
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if t["python"] != here:
        raise KitError(f"the kit in {kit} is for Python {t['python']}, this is {here}: build one with "
                       f"`make offline-kit KIT_PYTHON={here}` where there is internet")
    import torch
    if torch.__version__ != t["torch"]:
        raise KitError(f"the kit's TransformerEngine extension was compiled against torch {t['torch']}, this is "
                       f"{torch.__version__} (it would not load): build one with KIT_TORCH={torch.__version__}")
    for name, info in manifest["files"].items():
        if not (kit / name).is_file() or _sha256(kit / name) != info["sha256"]:
            raise KitError(f"{kit / name} is missing or does not match its hash in MANIFEST.json (a damaged copy)")
    wheels = [str(kit / name) for name in manifest["files"]]
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                        "--no-deps", "--no-compile", "--upgrade", "--target", str(site), *wheels],
                       capture_output=True, text=True)
    if r.returncode:
        raise KitError(f"pip could not install the kit: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return f"installed {len(wheels)} wheels of {kit} into {site} (make puts it on PYTHONPATH)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="offline_kit", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("cmd", choices=("build", "check", "install"))
    ap.add_argument("--kit", required=True, type=Path, help="the kit's folder")
    d = Target()
    ap.add_argument("--python", default=d.python, help="the node's Python version")
    ap.add_argument("--torch", default=d.torch, help="the node's torch, with its CUDA build")
    ap.add_argument("--archs", default=",".join(map(str, d.archs)), help="the node's GPU architectures (90 Hopper)")
    ap.add_argument("--te", default=d.te, help="TransformerEngine version")
    ap.add_argument("--torchao", default=d.torchao, help="torchao version")
    ap.add_argument("--bundle-mib", type=float, default=64.0, help="the tree and the kit together, at most "
                    "(BUNDLE_MIB: what a lent machine takes)")
    ap.add_argument("--build", type=Path, default=ROOT / ".kit-build", help="build environments and downloads")
    ap.add_argument("--build-python", default=None, help="interpreter for the build environment (default: found)")
    ap.add_argument("--max-jobs", type=int, default=2, help="parallel compile jobs for the extension")
    ap.add_argument("--site", type=Path, default=ROOT / ".kit-site", help="install: the folder to install into")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "install":
            print(f"offline-install: {install(args.kit, args.site)}")
            return 0
        archs = tuple(int(a) for a in args.archs.replace(";", ",").split(",") if a)
        t = Target(args.python, args.torch, archs, args.te, args.torchao)
        if args.cmd == "check":
            problems = check(args.kit, t, args.bundle_mib)
            if problems:
                raise KitError("; ".join(problems))
            total = (tree_bytes(leave_out=args.kit) + kit_bytes(args.kit)) / 2**20
            print(f"offline-kit: {args.kit} installs on Python {t.python}; tree + kit {total:.1f} MiB of "
                  f"{args.bundle_mib:g}")
            return 0
        m = build_kit(t, args.kit, args.build, args.bundle_mib, args.build_python, args.max_jobs)
        mb = sum(f["bytes"] for f in m["files"].values()) / 2**20
        tree = tree_bytes(leave_out=args.kit) / 2**20
        print(f"offline-kit: {len(m['files'])} wheels, {mb:.1f} MiB in {args.kit} for Python {t.python}, "
              f"torch {t.torch}, {', '.join(m['kept_cubins'])}; checked with pip install --dry-run; tree + kit "
              f"{tree + kit_bytes(args.kit) / 2**20:.1f} MiB of {args.bundle_mib:g}")
    except (KitError, BundleError, ValueError) as e:
        print(f"offline-kit: error: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"offline-kit: error: {' '.join(map(str, e.cmd[:6]))} ... exited {e.returncode} (its output is above)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
