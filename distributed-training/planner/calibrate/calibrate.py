"""--calibrate: replace the hardware table's figures with what the labs measured on your cluster.

Four kinds of CSV, told apart by their header, each replacing what it measures:

    allreduce-bench sweep_*.csv      the network: in-domain bus bandwidth and latency, per-GPU NIC rate
                                     (network.py: the alpha-beta fit of common/collective_fit.py)
    fp8-train */bench_gemm.csv       the sustained matmul rate of the GPU (gemm_rates.py)
    parallel-3d runs_*.csv           a lumped factor: the median predicted / measured step time of the
                                     GPU's runs scales the matmul rate (measured_runs.py)
    parallel-3d ranking_calibration_*.csv   the host's cost per unit of the framework's counted work (host_costs.py)

`calibrated(cluster, paths)` applies them in that order; `sources(paths)` is the list of files found,
`gpu_of(paths)` the GPU their compute rows were measured on (a calibrated guide is written for it).
Each replaced figure adds a note to the cluster (printed with the plan, listed in a calibrated guide);
a file that is not of a known kind is read as a sweep and refused with one line if it is not one.
"""

from __future__ import annotations

import csv
import glob
import os
from dataclasses import replace
from pathlib import Path

from planner.model.cluster import Cluster

from . import gemm_rates, host_costs, measured_runs
from .network import calibrate_from_sweeps


def expand(patterns: str) -> list[str]:
    """Comma-separated paths or globs -> sorted unique paths (a pattern matching nothing is kept, to be refused)."""
    return sorted({p for pat in patterns.split(",") if pat.strip()
                   for p in (glob.glob(pat.strip()) or [pat.strip()])})


def split_kinds(paths: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(allreduce-bench sweeps, GEMM benchmarks, parallel-3d runs) among `paths` (host-cost CSVs: host_files)."""
    runs = [p for p in paths if measured_runs.is_runs_csv(p)]
    hosts = host_files(paths)
    gemms = [p for p in paths if p not in runs and p not in hosts and gemm_rates.is_gemm_csv(p)]
    sweeps = [p for p in paths if p not in runs and p not in gemms and p not in hosts]
    return sweeps, gemms, runs


def host_files(paths: list[str]) -> list[str]:
    """The host-cost calibrations among `paths` (parallel-3d's ranking_calibration_*.csv)."""
    return [p for p in paths if host_costs.is_host_csv(p)]


def calibrated(cl: Cluster, paths: list[str], strict: bool = True) -> Cluster:
    """The cluster with every figure the files measure replaced (module docstring); ValueError for a bad file.
    strict=False (every lab result present, CALIBRATE=results) skips a file that cannot calibrate this cluster
    (a sweep of one rank, runs or GEMMs of another GPU), with a note."""
    sweeps, gemms, runs = split_kinds(paths)
    if not strict:  # every lab result: only the sweeps measured on this cluster's GPU
        sweeps = [p for p in sweeps if cl.gpu in sweep_presets(p)]
    steps = ((sweeps, calibrate_from_sweeps), (gemms, gemm_rates.calibrate_from_gemms),
             (runs, measured_runs.calibrate_from_runs), (host_files(paths), host_costs.calibrate_from_host))
    for files, apply in steps:
        if not strict:
            usable = []
            for path in files:
                try:
                    apply(cl, [path])
                    usable.append(path)
                except ValueError as e:
                    cl = replace(cl, notes=(*cl.notes, "not used: " + str(e).replace("--calibrate: ", "")))
            files = usable
        if files:
            cl = apply(cl, files)
    return cl


def sweep_presets(path: str) -> set[str]:
    """The presets an allreduce-bench sweep was measured on (its `preset` column; empty if it has none)."""
    try:
        with open(path, newline="") as f:
            return {row.get("preset", "") for row in csv.DictReader(f)}
    except (OSError, UnicodeDecodeError, csv.Error):
        return set()


def gpu_of(paths: list[str]) -> str | None:
    """The GPU preset the files' compute rows were measured on (GEMM benchmarks first, then parallel-3d runs)."""
    _, gemms, runs = split_kinds(paths)
    found = sorted(gemm_rates.gpu_rows(gemms)) if gemms else []
    if not found and runs:
        found = sorted(measured_runs.gpus(runs))
    return found[0] if found else None


def lab_results() -> list[str]:
    """Every calibration file the labs' results folders hold (CALIBRATE=results)."""
    labs = Path(__file__).resolve().parents[2]
    patterns = ("allreduce-bench/results/sweep_*.csv", "fp8-train/results/*/bench_gemm.csv",
                "parallel-3d/results/runs_*.csv")
    return sorted(os.path.relpath(p) for pat in patterns for p in labs.glob(pat))
