"""A wheelhouse for GPU nodes without internet: the optional FP8 backends and what they need.

Run it on any machine that reaches PyPI, for the node's Python and platform, then copy the folder
to the node and install from it there with no network (`make setup-fp8 WHEELHOUSE=dir`):

    make wheelhouse WHEELHOUSE=wheels                      # this Python, manylinux x86_64, this torch's CUDA
    make wheelhouse WHEELHOUSE=wheels WHEEL_PY=3.12 TORCHAO=0.18.0 TE=2.20.2 TE_CUDA=cu12
    make setup-fp8 WHEELHOUSE=wheels                      # on the node; builds TE's torch extension there

The defaults follow this checkout: the running Python's version, the torchao that requirements-fp8.txt pins
(0.18.0: torch 2.11 or newer, its release notes say; the committed H200 rows ran it with torch 2.11.0), and
the CUDA major of the torch installed here (a CPU build: cu13, the build the package registry serves for the
pinned torch). Name the node's own where they differ (WHEEL_PY, TE_CUDA=cu12 for a node whose driver predates
580).

What it fetches:
    torchao==TORCHAO                    3 MB binary wheel, no dependencies
    transformer_engine==TE              the package TE's import checks for (its Python code), 1 MB
    transformer_engine_<TE_CUDA>==TE    TransformerEngine's core library, ~280-730 MB
    transformer_engine_torch==TE        the PyTorch extension, a source distribution only: it must be
                                        compiled against the node's own torch (setup-fp8 does it)
    pydantic and its dependencies, importlib-metadata   what TE imports at run time
    wheel, packaging, setuptools, ninja                 what the extension's build imports and runs

pip cannot download the TE torch sdist without running its setup.py (which needs torch and CUDA), so
that one file is taken straight from the package index's simple page (PEP 503), the index pip uses.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from .torch_install import pinned

PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64")
RUNTIME_DEPS = ("pydantic", "importlib-metadata", "wheel", "packaging", "setuptools", "ninja")
FP8_REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements-fp8.txt"


def pinned_torchao(requirements: Path = FP8_REQUIREMENTS) -> str:
    """The torchao version requirements-fp8.txt pins ('' when it pins none)."""
    return pinned(requirements, "torchao")


def local_te_cuda() -> str:
    """cu12/cu13 for the torch installed here; cu13 (the registry's build of the pinned torch) for a CPU build."""
    try:
        import torch
        cuda = torch.version.cuda
    except ImportError:
        cuda = None
    return f"cu{cuda.split('.')[0]}" if cuda else "cu13"


def pip_download(dest: Path, py: str, packages: list[str], deps: bool) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "-d", str(dest),
           "--only-binary=:all:", "--python-version", py, "--implementation", "cp"]
    cmd += [a for p in PLATFORMS for a in ("--platform", p)]
    cmd += ([] if deps else ["--no-deps"]) + packages
    subprocess.run(cmd, check=True)


def find_sdist(page: str, page_url: str, project: str, version: str) -> str:
    """The .tar.gz link of project==version on a PEP 503 simple index page (its HTML and its URL)."""
    want = f"{project.replace('-', '_')}-{version}.tar.gz"
    for href in re.findall(r'href="([^"]+)"', page):
        if urllib.parse.urlsplit(href).path.endswith("/" + want):
            return urllib.parse.urljoin(page_url, href.split("#")[0])
    raise SystemExit(f"wheelhouse: error: no {want} on {page_url}")


def sdist_url(project: str, version: str, index: str) -> str:
    page_url = f"{index.rstrip('/')}/{project}/"
    return find_sdist(urllib.request.urlopen(page_url, timeout=60).read().decode(), page_url, project, version)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="wheelhouse", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dest", required=True, help="folder to fill")
    ap.add_argument("--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}",
                    help="the node's Python version")
    ap.add_argument("--torchao", default=pinned_torchao(), help="torchao version ('' = skip)")
    ap.add_argument("--te", default="2.20.2", help="TransformerEngine version ('' = skip)")
    ap.add_argument("--te-cuda", default=local_te_cuda(), choices=("cu12", "cu13"),
                    help="the CUDA major of the node's torch")
    ap.add_argument("--index", default=os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple"),
                    help="PEP 503 index for the TE sdist")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        print(f"wheelhouse: error: --python takes a version like 3.12, got {args.python!r}", file=sys.stderr)
        return 2
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    if args.torchao:
        pip_download(dest, args.python, [f"torchao=={args.torchao}"], deps=False)
    if args.te:
        pip_download(dest, args.python, list(RUNTIME_DEPS), deps=True)
        te = [f"transformer-engine=={args.te}", f"transformer-engine-{args.te_cuda}=={args.te}"]
        pip_download(dest, args.python, te, deps=False)
        url = sdist_url("transformer-engine-torch", args.te, args.index)
        target = dest / Path(urllib.parse.urlsplit(url).path).name
        urllib.request.urlretrieve(url, target)
    files = sorted(p.name for p in dest.iterdir())
    size = sum(p.stat().st_size for p in dest.iterdir()) / 2**20
    print(f"wheelhouse: {len(files)} files, {size:.0f} MiB in {dest}:\n  " + "\n  ".join(files))
    print(f"wheelhouse: for a node with Python {args.python} and a CUDA {args.te_cuda[2:]} build of torch "
          f"(torchao {args.torchao or 'skipped'}, TransformerEngine {args.te or 'skipped'}); "
          "WHEEL_PY=/TE_CUDA= name another")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
