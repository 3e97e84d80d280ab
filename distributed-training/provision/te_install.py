"""`make setup-fp8`'s TransformerEngine: its build prerequisites checked first, then the core wheel for
this torch's CUDA major and the PyTorch extension compiled against this torch.

    make setup-fp8                          # torchao, then TransformerEngine TE (2.20.2) from the package index
    make setup-fp8 TE=                      # torchao alone
    make setup-fp8 WHEELHOUSE=wheels        # offline, from a folder `make wheelhouse` filled
    PYTHONPATH=distributed-training python -m provision.te_install check --te 2.20.2     # the checks alone
    PYTHONPATH=distributed-training python -m provision.te_install install --te 2.20.2 --dry-run

TransformerEngine is three packages of one version (TE refuses to import a mix):
    transformer_engine                 the Python package; `transformer_engine[core_cu12]` / `[core_cu13]` also
                                       brings the next one
    transformer_engine_cu12 | _cu13    the core library, a binary wheel per CUDA major (~280-730 MB)
    transformer_engine_torch           the PyTorch extension, published as a source distribution only: compiled
                                       here, against this torch (`--no-build-isolation`: its build imports it)

What the build needs, checked before anything is downloaded; a missing piece is one line naming it and how to
get it, exit 2, nothing installed:
    a CUDA build of torch              its CUDA major picks cu12 or cu13 (`make doctor` says which build fits)
    nvcc of that CUDA major            where TE's build looks: $CUDA_HOME/bin, PATH, /usr/local/cuda/bin; TE
                                       reads the toolkit's version and headers through it
    cuDNN headers (cudnn.h)            $CUDNN_PATH, the toolkit, /usr/include, or the nvidia-cudnn-cu12/13 package
                                       that torch's CUDA builds bring
    a C++17 compiler                   g++ >= 9

Build settings: NVTE_FRAMEWORK=pytorch; NVTE_CUDA_ARCHS from this node's GPUs (90 Hopper, 100 Blackwell;
TE_CUDA_ARCHS= overrides); MAX_JOBS from the cores and memory (a compile job of torch's headers takes ~3 GB);
NVTE_PYTORCH_FORCE_BUILD=TRUE (TE's setup would first try to download a prebuilt extension from GitHub, which
exists for torch 2.8 only); CPATH with the nvidia-* packages' headers; pip's --no-cache-dir, so that a wheel
built against an earlier torch is never reused (an `undefined symbol` ImportError at import).

How long (an estimate, not measured: TE has not been built on a lent GPU yet): the core wheel's download, then
a few minutes of compiling on 8+ cores; much longer on a few cores. TE's docs: NVIDIA/TransformerEngine
docs/installation.rst; the facts used here: ../shared/reference/fp8-anchors.md section 1.8.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from common.cuda_env import read_driver


class Facts(NamedTuple):
    """What this machine offers the build, gathered once (tests build their own)."""
    torch_version: str
    torch_cuda: str | None             # torch.version.cuda: '12.8', None for a CPU build
    nvcc: str | None                   # path
    nvcc_cuda: tuple[int, int] | None  # its release
    cudnn_include: str | None          # the folder holding cudnn.h
    cxx: str | None                    # the C++ compiler
    archs: str | None                  # NVTE_CUDA_ARCHS from the GPUs: '90', '90;100'
    header_dirs: tuple[str, ...]       # the nvidia-* pip packages' include folders


class Step(NamedTuple):
    what: str
    argv: list[str]
    env: dict[str, str]


def _nvcc() -> tuple[str | None, tuple[int, int] | None]:
    """nvcc where TE's build_tools look for it (CUDA_HOME, PATH, /usr/local/cuda), with its CUDA release."""
    candidates = [os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")] if os.environ.get("CUDA_HOME") else []
    candidates += [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            try:
                out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            m = re.search(r"release (\d+)\.(\d+)", out)
            if m is None:
                return path, None
            return path, (int(m.group(1)), int(m.group(2)))
    return None, None


def _nvidia_include_dirs() -> tuple[str, ...]:
    try:
        import nvidia  # namespace package of the nvidia-* wheels that torch's CUDA builds depend on
    except ImportError:
        return ()
    return tuple(sorted(d for root in nvidia.__path__ for d in glob.glob(os.path.join(root, "*", "include"))))


def _cudnn_include(nvcc: str | None, header_dirs: tuple[str, ...]) -> str | None:
    dirs = [os.path.join(os.environ[v], "include") for v in ("CUDNN_PATH", "CUDNN_HOME", "CUDA_HOME")
            if os.environ.get(v)]
    if nvcc:
        dirs.append(str(Path(nvcc).resolve().parent.parent / "include"))
    dirs += ["/usr/include", f"/usr/include/{os.uname().machine}-linux-gnu", "/usr/local/cuda/include",
             *header_dirs]
    return next((d for d in dirs if os.path.isfile(os.path.join(d, "cudnn.h"))), None)


def _archs() -> str | None:
    import torch
    if torch.cuda.is_available():
        caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    else:
        driver = read_driver()
        caps = set(driver.compute_caps) if driver else set()
    return ";".join(f"{a}{b}" for a, b in sorted(caps)) or None


def gather() -> Facts:
    import torch
    nvcc, nvcc_cuda = _nvcc()
    header_dirs = _nvidia_include_dirs()
    return Facts(torch.__version__, torch.version.cuda, nvcc, nvcc_cuda, _cudnn_include(nvcc, header_dirs),
                 shutil.which("c++") or shutil.which("g++"), _archs(), header_dirs)


def cuda_major(f: Facts) -> int:
    return int(f.torch_cuda.split(".")[0])


def problem(f: Facts, te: str, wheelhouse: Path | None = None) -> str | None:
    """What is missing for TE `te` on this machine, in one line with the way to get it; None if nothing is."""
    if not f.torch_cuda:
        return (f"TransformerEngine needs a CUDA build of torch, and torch {f.torch_version} is a CPU build "
                "(`make doctor` names the build that fits this machine)")
    major = cuda_major(f)
    if major not in (12, 13):
        return f"TransformerEngine {te} has cores for CUDA 12 and 13; torch {f.torch_version} is a CUDA {f.torch_cuda} build"
    if f.nvcc is None:
        return (f"no nvcc ($CUDA_HOME/bin, PATH, /usr/local/cuda/bin), and TransformerEngine's torch extension is "
                f"compiled here: install a CUDA {major}.x toolkit (NVIDIA's cuda-toolkit-{major}-x package) and set "
                "CUDA_HOME to it")
    if f.nvcc_cuda is None or f.nvcc_cuda[0] != major:
        found = f"CUDA {f.nvcc_cuda[0]}.{f.nvcc_cuda[1]}" if f.nvcc_cuda else "an unknown CUDA release"
        return (f"{f.nvcc} is {found} and torch {f.torch_version} is a CUDA {f.torch_cuda} build: the extension "
                f"needs the same CUDA major; set CUDA_HOME to a CUDA {major}.x toolkit")
    if f.cudnn_include is None:
        return (f"no cuDNN headers (cudnn.h in $CUDNN_PATH, the CUDA toolkit, /usr/include or the nvidia-cudnn "
                f"package): pip install nvidia-cudnn-cu{major}, or apt install libcudnn9-dev-cuda-{major}, or set "
                "CUDNN_PATH")
    if f.cxx is None:
        return "no C++ compiler (c++/g++) for the extension: apt install g++ (>= 9, C++17)"
    if wheelhouse is not None:
        need = [f"transformer_engine-{te}-*.whl", f"transformer_engine_cu{major}-{te}-*.whl",
                f"transformer_engine_torch-{te}.tar.gz"]
        # the build imports these (--no-build-isolation): installed here already, or in the wheelhouse
        need += [f"{m}-*.whl" for m in ("wheel", "packaging", "setuptools") if importlib.util.find_spec(m) is None]
        missing = [n for n in need if not list(wheelhouse.glob(n))]
        if missing:
            return (f"{wheelhouse} holds no {', '.join(missing)} (torch is a CUDA {major} build): fill it with "
                    f"`make wheelhouse WHEELHOUSE=... TE={te} TE_CUDA=cu{major}` where there is internet")
    return None


def default_jobs() -> int:
    """Parallel compile jobs: one per core, at most one per ~3 GB of available memory."""
    try:
        with open("/proc/meminfo") as fh:
            avail_gb = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable")) / 2**20
    except (OSError, StopIteration, ValueError):
        avail_gb = 8.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, int(avail_gb // 3)))


def steps(f: Facts, te: str, wheelhouse: Path | None = None, archs: str | None = None,
          jobs: int | None = None, python: str = sys.executable, dest: Path | None = None) -> list[Step]:
    """The pip commands that install TE `te` here (online: the core, then the extension; offline: the extension,
    make has installed the wheelhouse's wheels before), or with `dest` build the extension's wheel there."""
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    major = cuda_major(f)
    cpath = [f.cudnn_include, *f.header_dirs, *filter(None, [os.environ.get("CPATH")])]
    jobs = jobs or int(os.environ.get("MAX_JOBS") or 0) or default_jobs()  # a MAX_JOBS the user set wins
    # One nvcc thread per compile job: TE's maintainers' fix for builds that hang near the end (TE #976).
    env = {"NVTE_FRAMEWORK": "pytorch", "NVTE_PYTORCH_FORCE_BUILD": "TRUE", "MAX_JOBS": str(jobs),
           "NVTE_BUILD_THREADS_PER_JOB": "1", "CPATH": ":".join(dict.fromkeys(cpath))}
    if archs or f.archs:
        env["NVTE_CUDA_ARCHS"] = archs or f.archs
    build = [*pip, "--no-build-isolation", "--no-cache-dir"]
    if dest is not None:  # the offline kit: a wheel to carry, nothing installed here
        wheel = [python, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-build-isolation", "--no-deps",
                 "--no-cache-dir", "-w", str(dest), f"transformer_engine_torch=={te}"]
        return [Step(f"compile a transformer_engine_torch {te} wheel against torch {f.torch_version}", wheel, env)]
    if wheelhouse is not None:
        sdist = str(wheelhouse / f"transformer_engine_torch-{te}.tar.gz")
        return [Step(f"compile transformer_engine_torch {te} against torch {f.torch_version}",
                     [*build, "--no-index", "--no-deps", sdist], env)]
    return [Step(f"transformer_engine {te} and its CUDA {major} core, and the extension's build tools",
                 [*pip, f"transformer_engine[core_cu{major}]=={te}", "wheel", "packaging", "setuptools", "ninja"], {}),
            Step(f"compile transformer_engine_torch {te} against torch {f.torch_version}",
                 [*build, f"transformer_engine_torch=={te}"], env)]


def te_imports(python: str = sys.executable) -> str | None:
    """None when `import transformer_engine.pytorch` works in `python`; else the error's last line."""
    r = subprocess.run([python, "-c", "import transformer_engine.pytorch"], capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["exit code %d" % r.returncode])[-1]


def installed(te: str) -> bool:
    from importlib import metadata
    try:
        return metadata.version("transformer_engine_torch") == te == metadata.version("transformer_engine")
    except metadata.PackageNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="te_install", description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=("check", "install", "wheel"),
                    help="check the prerequisites, install (checks first), or build the extension's wheel (--dest)")
    ap.add_argument("--dest", default=None, help="wheel: the folder for the compiled wheel (the offline kit's)")
    ap.add_argument("--te", default="2.20.2", help="TransformerEngine version")
    ap.add_argument("--wheelhouse", default=None, help="install offline from this folder (make wheelhouse)")
    ap.add_argument("--cuda-archs", default=None, help="NVTE_CUDA_ARCHS; default: this node's GPUs")
    ap.add_argument("--max-jobs", type=int, default=None,
                    help="parallel compile jobs; default: $MAX_JOBS, else from the cores and memory")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    wheelhouse = Path(args.wheelhouse) if args.wheelhouse else None
    facts = gather()
    line = problem(facts, args.te, wheelhouse)
    if line:
        print(f"setup-fp8: error: {line}; TE= installs torchao alone", file=sys.stderr)
        return 2
    if args.cmd == "check":
        return 0
    dest = Path(args.dest) if args.cmd == "wheel" else None
    if args.cmd == "wheel" and dest is None:
        print("setup-fp8: error: wheel needs --dest DIR", file=sys.stderr)
        return 2
    if dest is None and installed(args.te) and te_imports() is None and not args.dry_run:
        print(f"TransformerEngine {args.te} is installed and imports; nothing to do")
        return 0
    for step in steps(facts, args.te, wheelhouse, args.cuda_archs, args.max_jobs, dest=dest):
        shown = " ".join(f"{k}={v}" for k, v in step.env.items() if k != "CPATH")
        print(f"setup-fp8: {step.what}\n  {shown} {' '.join(step.argv)}".rstrip(), flush=True)
        if args.dry_run:
            continue
        code = subprocess.run(step.argv, env={**os.environ, **step.env}).returncode
        if code:
            print(f"setup-fp8: error: pip exited {code} at: {step.what} (its output is above)", file=sys.stderr)
            return 1
    if args.dry_run or dest is not None:
        return 0
    error = te_imports()
    if error:
        print(f"setup-fp8: error: TransformerEngine {args.te} installed but does not import: {error}", file=sys.stderr)
        return 1
    print(f"setup-fp8: TransformerEngine {args.te} installed and imports (make doctor shows is_fp8_available)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
