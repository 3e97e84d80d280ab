"""The host's cost per unit of the framework's work, measured on your node: the floor's published costs replaced.

floor.py counts the host work a stack issues per layer and micro-batch (aten ops, DTensor ops, optimizer ops,
FSDP2's unshard events, collective calls) and prices each unit at a published cost. parallel-3d's ranking calibration
(`make parallel-3d-ranking`, its first minute: results/ranking_calibration_<hw>.csv) measures those costs on the
machine that runs it, on one thread: a tiny GPT block's forward and backward per aten op it dispatches (op_us), the
same block under DTensor TP per DTensor op (dtensor_op_us), AdamW's step per op (optimizer_op_us), FSDP2's hooks on one
ZeRO-3 unit per micro-batch (fsdp_unit_us: two unshards), one c10d call (collective_call_us). Run it on the host of
your GPU node (it needs no GPU) and pass the CSV to --calibrate: the plan's host time is then your host's.

    make plan ARGS="--params 1B --gpus 8 --calibrate distributed-training/parallel-3d/results/ranking_calibration_cpu.csv"
"""

from __future__ import annotations

from dataclasses import replace

from common.csvread import BadResults, Schema, has_columns, read_rows
from planner.model.cluster import Cluster
from planner.model.floor import FSDP_EVENTS, HostCosts

SCHEMA = Schema("parallel-3d ranking calibration", {"quantity": str, "world": int, "value": float, "hardware": str})
QUANTITIES = ("op_us", "dtensor_op_us", "optimizer_op_us", "fsdp_unit_us", "collective_call_us")


def is_host_csv(path: str) -> bool:
    """True for a ranking calibration CSV (by its header)."""
    return has_columns(path, {"quantity", "world", "value", "unit", "method"})


def host_costs(path: str) -> HostCosts:
    """The HostCosts a calibration CSV measured; ValueError (one line) if it lacks one of them."""
    try:
        rows = read_rows(path, SCHEMA)
    except BadResults as e:
        raise ValueError(f"--calibrate: {e}") from None
    found = {r["quantity"]: float(r["value"]) for r in rows if int(r["world"]) == 1}
    missing = [q for q in QUANTITIES if q not in found]
    if missing:
        raise ValueError(f"--calibrate {path}: no {', '.join(missing)} (an older calibration): rerun "
                         "make parallel-3d-ranking")
    us = 1e-6
    return HostCosts(found["op_us"] * us, found["dtensor_op_us"] * us, found["optimizer_op_us"] * us,
                     found["fsdp_unit_us"] * us / FSDP_EVENTS[3], found["collective_call_us"] * us,
                     f"measured on {rows[0]['hardware']} ({path})")


def calibrate_from_host(cl: Cluster, paths: list[str]) -> Cluster:
    """The cluster with its host costs measured (the last file wins), and a note saying so."""
    costs = host_costs(paths[-1])
    note = (f"host costs {costs.source}: an op {costs.op_s * 1e6:.1f} us, a DTensor op {costs.dtensor_op_s * 1e6:.0f} "
            f"us, an FSDP2 unshard {costs.fsdp_event_s * 1e6:.0f} us, a c10d call {costs.collective_s * 1e6:.1f} us")
    return replace(cl, host_costs=costs, notes=(*cl.notes, note))
