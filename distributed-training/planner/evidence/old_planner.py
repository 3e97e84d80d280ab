"""The planner of an older commit, asked through the interface it had: runs inside that commit's tree, never here.

before_after.py and regimes_before_after.py copy this file into a tree exported from git history
(common/at_commit.py) and run it there; it reads published runs as JSON on stdin, prices each with that tree's
planner and prints JSON:

    python -m old_planner issue15 < cases.json   # 2fbc6b4: the planner as scripts (cluster.py, search.py, shapes.py
                                                 # on PYTHONPATH); Workload(shape, batch, four flags); its own rules
    python -m old_planner issue29 < cases.json   # 22e175f on: the planner package; Workload(shape, batch, **flags),
                                                 # make_cluster(..., gpus_per_node=), search(..., rules=False)
    python -m old_planner rooms < cases.json     # efaebb5 on: the same interface in the planner's rooms
                                                 # (planner.model.cluster, planner.search.search, planner.model.shapes)

The older planner's modules are imported by name when this runs (importlib): they are that tree's, so no import
of this file names a module of this tree's planner, and importing it here loads nothing of theirs.
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import fields

from common.hardware import get_preset

MODULES = ("cluster", "search", "shapes")


ROOMS = ("planner.model.cluster", "planner.search.search", "planner.model.shapes")


def old_planner(package: bool, rooms: bool = False) -> tuple:
    """The older tree's cluster, search and shapes modules: planner.<name> where the planner is a package, in its
    rooms from efaebb5 on."""
    if rooms:
        return tuple(importlib.import_module(name) for name in ROOMS)
    return tuple(importlib.import_module(f"planner.{name}" if package else name) for name in MODULES)


def issue15(cases: list[dict]) -> list:
    """Per case {metric, tp, pp} of the plan 2fbc6b4 chose under the case's pins, or None where it plans nothing."""
    cluster, search, shapes = old_planner(package=False)
    out = []
    for c in cases:
        w = search.Workload(shapes.Shape(*c["shape"]), c["batch"], grad_bytes=c["grad_bytes"],
                            sequence_parallel=c["sp"], flash_attention=c["flash"], dropout=c["dropout"])
        cl = cluster.make_cluster(get_preset(c["gpu"]), c["gpus"], memory_gb=c["memory_gb"],
                                  inter_node_gbps=c["net"])
        try:
            best = search.search(w, cl, search.Pins(**c["pins"]), top=1, max_rejected=0).best
        except Exception:  # the old planner refuses what it cannot plan (uneven stages, a DP not dividing the batch)
            best = None
        out.append(None if best is None else {k: best[k] for k in (c["metric"], "tp", "pp")})
    return out


def issue29(cases: list[dict], rooms: bool = False) -> dict:
    """{"results": per case [metric value, TP] of the fastest plan (no rules), or None; "dropped": the stack flags
    of today's cases that the older Workload lacks, priced without them}."""
    cluster, search, shapes = old_planner(package=True, rooms=rooms)
    known = {f.name for f in fields(search.Workload)}
    out, dropped = [], set()
    for c in cases:
        dropped |= set(c["software"]) - known
        w = search.Workload(shapes.Shape(*c["shape"]), c["batch"],
                            **{k: v for k, v in c["software"].items() if k in known})
        cl = cluster.make_cluster(get_preset(c["gpu"]), c["gpus"], memory_gb=c["memory_gb"],
                                  inter_node_gbps=c["net"], gpus_per_node=c["domain"])
        best = search.search(w, cl, search.Pins(**c["pins"]), top=1, max_rejected=0, rules=False).best
        if best is not None and rooms:  # a typed Plan record from efaebb5 on
            best = {c["metric"]: getattr(best, c["metric"]), "tp": best.tp}
        out.append(None if best is None else [best[c["metric"]], best["tp"]])
    return {"results": out, "dropped": sorted(dropped)}


STUDIES = {"issue15": issue15, "issue29": issue29, "rooms": lambda cases: issue29(cases, rooms=True)}

if __name__ == "__main__":
    print(json.dumps(STUDIES[sys.argv[1]](json.load(sys.stdin))))
