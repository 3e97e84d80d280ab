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


# ---- a GPU-shaped results set beside the committed ones (reports take any results set: issue 44) ----------------

GPUS = {"h100": ("NVIDIA H100 80GB HBM3", H100_PROVENANCE),
        "h200": ("NVIDIA H200", {**H100_PROVENANCE, "driver_version": "570.133.20", "cuda_version": "12.8"})}


def _relabelled(raw: str, gpu: str) -> str:
    """A CSV's rows with their provenance columns an H100's (or H200's): hardware `<world>x <name>`, backend nccl,
    CUDA, NCCL, driver and torch versions. Only those cells change (csv module, not pandas: no number is
    reformatted)."""
    import csv
    import io
    name, provenance = GPUS[gpu]
    rows = list(csv.reader(io.StringIO(raw, newline="")))
    if not rows:
        return raw
    header = rows[0]
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        cell = dict(zip(header, row))
        for column, value in {**provenance, "hardware": f"{cell.get('world_size') or 1}x {name}"}.items():
            if column in cell:
                row[header.index(column)] = value
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def gpu_shaped_results(results, dest, gpus=("h100", "h200")):
    """`results` copied to `dest`, plus, for each CPU set in it (a file or folder whose name says `cpu`), a copy per
    GPU of `gpus`, renamed (`cpu` -> `h100`) and relabelled as that GPU's run (_relabelled): several GPUs, each at the
    CPU sets' worlds, beside the committed GPU sets. Where the new name is a committed set's (fp8-train's h100_ws1),
    the copy is `<name>-rerun`: the same configuration measured again. Never written anywhere but a test's temporary
    folder. Returns `dest`."""
    import shutil
    results, dest = Path(results), Path(dest)
    shutil.copytree(results, dest, ignore=shutil.ignore_patterns("*.png", "__pycache__"))
    for entry in sorted(results.iterdir()):
        if "cpu" not in entry.name or entry.suffix not in (".csv", ".json", ""):
            continue
        for gpu in gpus:
            name = entry.name.replace("cpu", gpu)
            if (results / name).exists():
                stem, dot, ext = name.partition(".")
                name = f"{stem}-rerun{dot}{ext}"
            target = dest / name
            if entry.is_dir():
                shutil.copytree(entry, target, ignore=shutil.ignore_patterns("*.png", "*.html", "dashboards"))
            else:
                shutil.copy(entry, target)
            for csv_file in ([target] if target.is_file() else sorted(target.rglob("*.csv"))):
                if csv_file.suffix == ".csv":
                    csv_file.write_text(_relabelled(csv_file.read_text(), gpu))
    return dest
