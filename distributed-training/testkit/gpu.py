"""GPU stand-ins for tests on a machine without one: CPU rows relabelled as an H100's (as_gpu_rows), a fake
nvidia-smi of a named driver (fake_nvidia_smi), and the mark of a case that only a GPU-less machine can check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


H100_PROVENANCE = {"hardware": "1x NVIDIA H100 80GB HBM3", "backend": "nccl", "cuda_version": "13.0",
                   "nccl_version": "2.28.9", "driver_version": "580.159.04", "torch_version": "2.11.0+cu130"}


def as_gpu_rows(df, **extra):
    """A copy of CPU result rows relabelled as one H100's, for testing report generators on GPU-shaped
    CSVs beside CPU ones (never written anywhere but a test's temporary folder)."""
    return df.assign(**{**H100_PROVENANCE, **extra})


def no_gpu_mark():
    """Skip a case that checks a refusal only a machine without a GPU gives."""
    return pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")


# (driver version, the CUDA version its nvidia-smi header names): CUDA toolkit release notes, table 3.
DRIVERS = {535: ("535.183.01", "12.2"), 550: ("550.54.15", "12.4"), 570: ("570.133.20", "12.8"),
           580: ("580.82.07", "13.0")}


def fake_nvidia_smi(folder, driver: int | str | None, gpus: int = 8, name: str = "NVIDIA H100 80GB HBM3",
                    compute_cap: str = "9.0"):
    """Write an executable `nvidia-smi` into `folder` (put it first on PATH) answering `nvidia-smi`, `-L` and
    `--query-gpu=name,compute_cap` like the named driver with `gpus` GPUs; driver=None fails like a machine
    whose driver is missing, "hang" never answers (a GPU in a bad state), "garbage" exits 0 with no driver
    in its output. Returns the script's path."""
    path = Path(folder) / "nvidia-smi"
    if driver is None:
        body = ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver. '
                'Make sure that the latest NVIDIA driver is installed and running."; exit 9')
    elif driver == "hang":
        body = "exec sleep 3600"  # exec: a timeout's kill reaches the sleep itself, not only its shell
    elif driver == "garbage":
        body = 'echo "Segmentation fault (core dumped) at 0x0"; echo "GPU ??: ERR!"'
    else:
        version, cuda = DRIVERS[driver]
        header = (f"+{'-' * 89}+\\n| NVIDIA-SMI {version:<22} Driver Version: {version:<14} "
                  f"CUDA Version: {cuda:<9}|\\n+{'-' * 89}+")
        body = (f'case "$1" in\n'
                f'  -L) i=0; while [ $i -lt {gpus} ]; do echo "GPU $i: {name} (UUID: GPU-$i)"; i=$((i+1)); done ;;\n'
                f'  --query-gpu=*) i=0; while [ $i -lt {gpus} ]; do echo "{name}, {compute_cap}"; i=$((i+1)); done ;;\n'
                f'  *) printf "{header}\\n" ;;\n'
                f'esac')
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path
