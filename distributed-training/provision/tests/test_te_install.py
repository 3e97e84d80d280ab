"""`make setup-fp8`'s TransformerEngine: each missing prerequisite is one line naming it and how to get it,
the commands follow this torch's CUDA major, and the wheelhouse's defaults follow this checkout."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from testkit import no_gpu_mark
from provision import te_install, wheelhouse
from provision.te_install import Facts, problem, steps

ROOT = Path(__file__).resolve().parents[3]
TE = "2.20.2"
READY = Facts("2.13.0+cu128", "12.8", "/usr/local/cuda-12.8/bin/nvcc", (12, 8), "/venv/nvidia/cudnn/include",
              "/usr/bin/c++", "90", ("/venv/nvidia/cublas/include", "/venv/nvidia/cudnn/include"))


@pytest.mark.parametrize("change, needle", [
    (dict(torch_version="2.13.0+cpu", torch_cuda=None), "needs a CUDA build of torch, and torch 2.13.0+cpu is a CPU"),
    (dict(torch_cuda="11.8"), "has cores for CUDA 12 and 13; torch 2.13.0+cu128 is a CUDA 11.8 build"),
    (dict(nvcc=None, nvcc_cuda=None), "no nvcc ($CUDA_HOME/bin, PATH, /usr/local/cuda/bin)"),
    (dict(nvcc_cuda=(13, 0)), "is CUDA 13.0 and torch 2.13.0+cu128 is a CUDA 12.8 build"),
    (dict(cudnn_include=None), "no cuDNN headers (cudnn.h"),
    (dict(cxx=None), "no C++ compiler"),
])
def test_each_missing_prerequisite_is_named_with_its_remedy(change, needle):
    line = problem(READY._replace(**change), TE)
    assert needle in line and "\n" not in line
    assert problem(READY, TE) is None


def test_the_remedies_name_the_packages_for_torchs_cuda_major():
    assert "cuda-toolkit-12-x" in problem(READY._replace(nvcc=None), TE)
    assert "nvidia-cudnn-cu13" in problem(READY._replace(torch_cuda="13.0", nvcc_cuda=(13, 0), cudnn_include=None),
                                          TE)


def test_online_steps_follow_torchs_cuda_major():
    core, build = steps(READY, TE, jobs=8, python="py")
    assert core.argv[:4] == ["py", "-m", "pip", "install"] and f"transformer_engine[core_cu12]=={TE}" in core.argv
    assert {"wheel", "packaging", "setuptools", "ninja"} <= set(core.argv)
    assert build.argv[-1] == f"transformer_engine_torch=={TE}"
    assert {"--no-build-isolation", "--no-cache-dir"} <= set(build.argv)
    assert build.env["NVTE_FRAMEWORK"] == "pytorch" and build.env["NVTE_PYTORCH_FORCE_BUILD"] == "TRUE"
    assert build.env["MAX_JOBS"] == "8" and build.env["NVTE_CUDA_ARCHS"] == "90"
    assert build.env["CPATH"].split(":")[:2] == ["/venv/nvidia/cudnn/include", "/venv/nvidia/cublas/include"]
    cu13 = READY._replace(torch_cuda="13.0", nvcc_cuda=(13, 0))
    assert f"transformer_engine[core_cu13]=={TE}" in steps(cu13, TE, archs="90;100")[0].argv
    assert steps(cu13, TE, archs="90;100")[1].env["NVTE_CUDA_ARCHS"] == "90;100"


def test_offline_checks_the_wheelhouse_and_builds_the_sdist_alone(tmp_path):
    line = problem(READY, TE, tmp_path)
    assert f"holds no transformer_engine-{TE}-*.whl, transformer_engine_cu12-{TE}-*.whl, " \
           f"transformer_engine_torch-{TE}.tar.gz" in line and "TE_CUDA=cu12" in line
    for name in (f"transformer_engine-{TE}-py3-none-any.whl", f"transformer_engine_cu12-{TE}-py3-none-manylinux.whl",
                 f"transformer_engine_torch-{TE}.tar.gz", "wheel-0.48.0-py3-none-any.whl",
                 "packaging-26.3-py3-none-any.whl", "setuptools-84.2.1-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    assert problem(READY, TE, tmp_path) is None
    (only,) = steps(READY, TE, tmp_path)
    assert {"--no-index", "--no-deps", "--no-build-isolation"} <= set(only.argv)
    assert only.argv[-1] == str(tmp_path / f"transformer_engine_torch-{TE}.tar.gz")


def test_wheelhouse_defaults_follow_this_checkout():
    pinned = next(line.split("==")[1].strip() for line in (ROOT / "requirements-fp8.txt").read_text().splitlines()
                  if line.startswith("torchao=="))
    assert wheelhouse.pinned_torchao() == pinned == "0.18.0"  # the torchao built for torch 2.13
    cuda = torch.version.cuda
    assert wheelhouse.local_te_cuda() == (f"cu{cuda.split('.')[0]}" if cuda else "cu13")


@no_gpu_mark()
def test_make_setup_fp8_without_a_cuda_torch_is_one_line_and_installs_nothing():
    r = subprocess.run(["make", "setup-fp8", f"PYTHON={sys.executable}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin"})
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]
    assert r.returncode == 2 and r.stdout == "" and len(ours) == 1, r.stderr
    assert ours[0] == (f"setup-fp8: error: TransformerEngine needs a CUDA build of torch, and torch {torch.__version__} "
                       "is a CPU build (`make doctor` names the build that fits this machine); TE= installs torchao "
                       "alone")


def test_cli_check_matches_problem(monkeypatch, capsys):
    monkeypatch.setattr(te_install, "gather", lambda: READY)
    assert te_install.main(["check"]) == 0
    assert te_install.main(["install", "--dry-run", "--max-jobs", "4"]) == 0
    out = capsys.readouterr().out
    assert "MAX_JOBS=4" in out and f"transformer_engine_torch=={TE}" in out
    monkeypatch.setattr(te_install, "gather", lambda: READY._replace(cxx=None))
    assert te_install.main(["install"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
