"""Calibration from parallel-3d's measured training runs (../parallel-3d/results/runs_<gpu>.csv).

Each row of such a file is a real step time of one configuration on one GPU type, with the planner's own
prediction for that configuration (planner_step_s, priced with the uncalibrated table figures when the run
was made). The ratio predicted / measured says how much faster the planner thought the GPUs were; the
median over the rows of this cluster's GPU scales the achievable matmul rate (and the bf16 rate used for
attention). This is one lumped factor: it folds whatever the model misses (kernel efficiency, launch and
Python overhead, exposed communication) into the compute rate, which is where the planner is most
optimistic (PLANNER_VALIDATION.md section 4). Rows from another GPU, or from the CPU preset (no prediction),
are not used; a file with none for this cluster is an error, not a silent no-op.

    make plan ARGS="--params 8B --gpus 64 --calibrate distributed-training/parallel-3d/results/runs_h100.csv"
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from common.csvread import has_columns
from planner.model.cluster import Cluster

COLUMNS = {"step_time_ms", "planner_step_s", "preset"}
KEY = ("variant", "tp", "pp", "dp", "cp", "world_size", "nnodes")  # a row per run, as parallel-3d's train.py writes


def is_runs_csv(path: str) -> bool:
    """True for a parallel-3d runs CSV (by its header); False for anything else, missing files included."""
    return has_columns(path, COLUMNS)


def ratios(cluster: Cluster, paths: list[str]) -> list[float]:
    from common.csvread import BadResults, Schema, read_rows
    schema = Schema("parallel-3d runs", {"step_time_ms": float, "planner_step_s": float, "preset": str}, key=KEY)
    out = []
    for path in paths:
        try:
            rows = read_rows(path, schema)  # a cut, damaged or mistyped file: one line naming it
        except BadResults as e:
            raise ValueError(f"--calibrate: {e}") from None
        for row in rows:
            predicted, measured = float(row["planner_step_s"] or "nan"), float(row["step_time_ms"] or "nan") / 1e3
            if row["preset"] == cluster.gpu and predicted > 0 and measured > 0:
                out.append(predicted / measured)
    return out


def gpus(paths: list[str]) -> set[str]:
    """The GPU presets of the runs with a planner prediction in these files."""
    from common.csvread import read_rows
    from common.csvread import Schema
    schema = Schema("parallel-3d runs", {"planner_step_s": float, "preset": str}, key=KEY)
    return {r["preset"] for path in paths for r in read_rows(path, schema) if r["planner_step_s"]}


def calibrate_from_runs(cluster: Cluster, paths: list[str]) -> Cluster:
    found = ratios(cluster, paths)
    if not found:
        raise ValueError(f"--calibrate: no parallel-3d runs on {cluster.gpu} with a planner prediction in "
                         f"{', '.join(paths)} (CPU rows cannot calibrate a GPU cluster)")
    r = statistics.median(found)
    note = (f"matmul rate x {r:.3f}: median predicted/measured step time of {len(found)} parallel-3d run(s) on "
            f"{cluster.gpu}")
    return replace(cluster, matmul_tflops=cluster.matmul_tflops * r, bf16_matmul_tflops=cluster.bf16_matmul_tflops * r,
                   notes=(*cluster.notes, note))
