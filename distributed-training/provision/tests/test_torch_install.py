"""`make setup`'s torch: the build for each faked driver from a faked PyTorch index, the registry fallback
when the index does not answer (within its timeout), and the one line a Python without venv support gets."""

import platform
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.cuda_env import read_driver
from testkit import fake_nvidia_smi
from provision import torch_install
from provision.torch_install import Plan, pinned_torch, plan, preflight

ROOT = Path(__file__).resolve().parents[3]
PIN = pinned_torch(ROOT / "requirements.txt")
INDEX = "https://download.pytorch.org/whl"
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def page(*variants: str) -> str:
    """A PEP 503 page as download.pytorch.org/whl/<variant>/torch/ serves it: quoted '+', hashes, other wheels."""
    links = [f'<a href="/whl/{v}/torch-{PIN}%2B{v}-{TAG}-{TAG}-manylinux_2_28_{platform.machine()}.whl#sha256=ab">'
             f'torch-{PIN}+{v}-{TAG}-{TAG}-manylinux_2_28_{platform.machine()}.whl</a><br/>' for v in variants]
    links.append('<a href="/whl/cu126/torch-2.5.1%2Bcu124-cp39-cp39-linux_x86_64.whl">old</a><br/>')
    return "<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>"


def index_with(*variants):
    """A fake getter for an index that publishes the pin for `variants` (and answers 404 for other builds)."""
    def get(url, timeout_s):
        v = url.rstrip("/").split("/")[-2]
        return page(v) if v in variants else ""
    return get


def test_the_pin_comes_from_requirements_txt(tmp_path):
    assert PIN == "2.13.0"
    (tmp_path / "r.txt").write_text("numpy==2.4.6\n")
    with pytest.raises(SystemExit, match="pins no torch==X.Y.Z"):
        pinned_torch(tmp_path / "r.txt")


@pytest.mark.parametrize("driver, expect", [(535, "cu126"), (550, "cu126"), (570, "cu128"), (580, "cu130"),
                                            (None, "cpu")])
def test_each_driver_gets_the_build_that_fits_from_pytorchs_index(tmp_path, driver, expect):
    d = read_driver(str(fake_nvidia_smi(tmp_path, driver)))
    p = plan(PIN, d, get=index_with("cpu", "cu126", "cu128", "cu130"))
    assert (p.requirement, p.index_url) == (f"torch=={PIN}+{expect}", f"{INDEX}/{expect}")
    assert p.note.startswith(f"torch {PIN}+{expect} from {INDEX}/{expect} (")


def test_a_build_the_index_lacks_for_this_python_is_skipped(tmp_path):
    d550 = read_driver(str(fake_nvidia_smi(tmp_path, 550)))
    assert plan(PIN, d550, get=index_with("cu128", "cu130")).requirement == f"torch=={PIN}+cu128"
    p = plan(PIN, d550, get=index_with())  # answers, and has none for this Python: the registry, said so
    assert p.requirement is None and p.note.startswith(f"note: {INDEX} has no torch {PIN} wheel of cu126/cu128/cpu")
    forced = plan(PIN, d550, backend="cu130", get=index_with("cu126", "cu130"))
    assert forced.requirement == f"torch=={PIN}+cu130" and "TORCH_BACKEND=cu130" in forced.note
    assert plan(PIN, d550, backend="registry") == Plan(None, None, f"torch=={PIN} from the package registry "
                                                                   "(TORCH_BACKEND=registry)")


def test_an_unreachable_index_falls_back_to_the_registry_within_its_timeout():
    # A port nobody listens on (refused at once), and one that accepts and never answers (the timeout).
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        mute = silent.getsockname()[1]
        for port in (dead, mute):
            start = time.monotonic()
            p = plan(PIN, None, index=f"http://127.0.0.1:{port}/whl", timeout_s=0.5)
            assert time.monotonic() - start < 5
            assert p.requirement is None and p.note.startswith(f"note: http://127.0.0.1:{port}/whl did not answer (")
            assert f"torch=={PIN} comes from the package registry as pip is configured instead" in p.note


def test_install_cli_dry_run_and_bad_backend(tmp_path, monkeypatch, capsys):
    fake_nvidia_smi(tmp_path, 580)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(torch_install, "fetch", lambda url, t: page("cu130"))
    args = ["install", "--requirements", str(ROOT / "requirements.txt"), "--dry-run"]
    assert torch_install.main(args) == 0
    out = capsys.readouterr().out
    assert f"torch {PIN}+cu130 from {INDEX}/cu130 (driver 580.82.07, CUDA <= 13.0; native)" in out
    assert f'would run: {sys.executable} -m pip install "torch=={PIN}+cu130" --index-url {INDEX}/cu130' in out
    assert torch_install.main(["install", "--backend", "rocm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TORCH_BACKEND=rocm; allowed: auto, cpu, cu126, cu128, cu130, registry" in err


@pytest.mark.parametrize("driver", ["hang", "garbage"])
def test_a_driver_that_does_not_answer_installs_no_cpu_build_in_its_place(tmp_path, monkeypatch, capsys, driver):
    # Issue 32: a hanging nvidia-smi read as "no GPU" would install the CPU build on a GPU node. One line, exit 1,
    # within DT_SMI_TIMEOUT_S; a build named with TORCH_BACKEND does not ask the driver.
    fake_nvidia_smi(tmp_path, driver)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("DT_SMI_TIMEOUT_S", "1")
    monkeypatch.setattr(torch_install, "fetch", lambda url, t: page("cu130"))
    args = ["install", "--requirements", str(ROOT / "requirements.txt"), "--dry-run"]
    assert torch_install.main(args) == 1
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and "the NVIDIA driver does not answer" in err and "TORCH_BACKEND=" in err
    assert torch_install.main(args + ["--backend", "cu130"]) == 0
    assert "+cu130" in capsys.readouterr().out


def test_preflight_names_the_missing_venv_package():
    assert preflight((3, 11), has_ensurepip=True) is None
    line = preflight((3, 12), has_ensurepip=False, python="python3")
    assert "install Debian/Ubuntu's python3.12-venv (sudo apt install python3.12-venv" in line
    assert "Python >= 3.10 is needed, python3 is 3.9" in preflight((3, 9), python="python3")


def test_make_setup_without_venv_support_is_one_line_and_builds_nothing(tmp_path):
    # A Debian Python without python3.X-venv: ensurepip is absent (sitecustomize hides it, as Debian does).
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['ensurepip'] = None\n")
    py = tmp_path / "python3"
    py.write_text(f'#!/bin/sh\nPYTHONPATH={hide}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n')
    py.chmod(0o755)
    repo = tmp_path / "repo"
    (repo / "distributed-training").mkdir(parents=True)
    for f in ("Makefile", "requirements.txt"):
        shutil.copy(ROOT / f, repo / f)
    for package in ("common", "provision"):
        (repo / "distributed-training" / package).symlink_to(ROOT / "distributed-training" / package)
    r = subprocess.run(["make", "setup", f"BOOTSTRAP_PYTHON={py}"], cwd=repo, capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin"})
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]
    v = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert r.returncode == 2 and len(ours) == 1 and f"sudo apt install python{v}-venv" in ours[0], r.stderr
    assert ours[0].startswith(f"error: {py} cannot create a virtual environment")
    assert not (repo / ".venv").exists()
