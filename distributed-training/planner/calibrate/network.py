"""The network, measured: calibration from allreduce-bench's all_reduce sweeps.

The cost model prices every collective with the network of its Cluster (common/collective_cost.py): the
hardware table's achieved NVLink bus rate and latencies, and the per-GPU NIC rate. A sweep of all_reduce sizes
measured on your cluster replaces them with the alpha-beta fit of common/collective_fit.py, the same rule
fsdp-scaling's projection applies: the in-domain bus bandwidth and latency from the single-node rows, the
per-GPU NIC rate from the multi-node ones. Each replaced figure adds a note to the cluster.

    make plan ARGS="--params 8B --gpus 64 --calibrate distributed-training/allreduce-bench/results/sweep_*.csv"
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from common.collective_fit import calibrate as fit_network
from common.csvread import BadResults, Schema, read_table
from planner.model.cluster import Cluster

SCHEMA = Schema("allreduce-bench sweep", {"collective": str, "world_size": int, "nnodes": int, "size_bytes": int,
                                          "time_us": float},
                key=("collective", "dtype", "size_bytes", "world_size", "nnodes"))


def calibrate_from_sweeps(cluster: Cluster, paths: list[str]) -> Cluster:
    """The cluster with its network calibrated from allreduce-bench sweep CSVs (common/collective_fit.py).
    Each file is checked first (common/csvread.py): an empty, cut, binary or foreign one is one line, and so is a
    sweep whose `preset` column names another GPU (a CPU gloo sweep would give an H100 0.9 GB/s of "NVLink")."""
    frames = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"--calibrate: no such file {path}")
        try:
            frame = read_table(path, SCHEMA)
        except BadResults as e:
            raise ValueError(f"--calibrate: {e}") from None
        measured_on = sorted({str(p) for p in frame.get("preset", [])} - {"", "nan"})
        if measured_on and cluster.gpu not in measured_on:  # a gloo sweep is no NVLink: refuse it, as a CPU GEMM file
            raise ValueError(f"--calibrate: {path} was measured on {', '.join(measured_on)}, not {cluster.gpu}: a "
                             f"calibration must come from the GPU it plans for")
        frames.append(frame)
    try:
        net, notes = fit_network(cluster.net, pd.concat(frames, ignore_index=True))
    except (ValueError, TypeError) as e:
        raise ValueError(f"--calibrate: {', '.join(paths)}: {e}") from None
    return replace(cluster, net=net, notes=cluster.notes + tuple(notes))
