"""fp8-train's FP8 record (fp8.csv), judged from the CSV alone: is a run's scale record whole, and which code wrote it.

Read by provision's slot planner (what a GPU slot re-measures), by fp8-train's tests (every backend that runs
on CPU, eager and compiled) and by any report that must say which runs are affected. No lab is imported: the
rules are over the rows.

A run's scale record is damaged when any of these holds for its rows of fp8.csv:
    a scale of exactly 0.0 or +-inf      no cast uses such a scale (the rule never yields one: 1 before the first
                                         update, fmt_max / amax after, fp32 max when that overflows): the recorder
                                         read a value the backend never wrote. An empty or nan scale is one the
                                         backend does not expose (torchao's grad_output), not damage;
    a module role missing at a step      a recorded step holds fewer (module, role) pairs than the run records
                                         over all its steps;
    part of a step's underflow           underflow_frac is set for some of a step's (module, role) pairs and empty
                                         for others (fractions are counted for every tensor of a counting step, or
                                         for none).
The H200 native rows at cd873fd hold all three (126 scales of 0.0 at step 0; underflow for layer 0 only at steps
0, 50, 100 and 150). Their rows between those steps look whole, so "damaged" is said of the run, not of steps.

Which code wrote a record: the lab's own FP8 layer (fp8-train/precision/fp8_linear.py, backends native and
emulated) names its version in `precision_backend_version` ("torch 2.13.0+cpu, fp8_linear 2"); rows without it
were written by version 1, whose record a compiled run could lose (see fp8_linear.py's docstring).
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

LAYER = "fp8_linear"  # the token the lab's own layer writes into precision_backend_version
_TAG = re.compile(rf"\b{LAYER} (\d+)\b")
INF = float("inf")


def layer_tag(version: int) -> str:
    """What a row of the lab's own layer at `version` carries in precision_backend_version."""
    return f"{LAYER} {version}"


def layer_version(backend_version: str) -> int:
    """The lab layer's version named in a precision_backend_version cell; 1 where none is named (the rows
    written before the layer named its version)."""
    m = _TAG.search(backend_version or "")
    return int(m.group(1)) if m else 1


def damage(rows: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Per run, what its scale record lacks (the module docstring's three rules), one line each; whole runs
    are absent. Rows are fp8.csv's as text (csv.DictReader, common.csvread.read_rows): run, step, module,
    role, scale, underflow_frac."""
    steps: dict[str, dict[int, list[Mapping[str, str]]]] = {}
    for row in rows:
        steps.setdefault(row["run"], {}).setdefault(int(row["step"]), []).append(row)
    out = {}
    for run, by_step in steps.items():
        problems = []
        bad = [r for rs in by_step.values() for r in rs if r["scale"] and float(r["scale"]) in (0.0, INF, -INF)]
        if bad:
            problems.append(f"fp8.csv: {len(bad)} scales of exactly 0.0 or infinite (first at step "
                            f"{min(int(r['step']) for r in bad)})")
        roles = {(r["module"], r["role"]) for rs in by_step.values() for r in rs}
        short = [(s, len({(r["module"], r["role"]) for r in rs})) for s, rs in sorted(by_step.items())
                 if len({(r["module"], r["role"]) for r in rs}) < len(roles)]
        if short:
            problems.append(f"fp8.csv: step {short[0][0]} records {short[0][1]} of {len(roles)} module roles")
        counted = [(s, sum(r["underflow_frac"] != "" for r in rs)) for s, rs in sorted(by_step.items())]
        partial = [(s, n) for s, n in counted if 0 < n < len(roles)]
        if partial:
            problems.append(f"fp8.csv: underflow recorded for {partial[0][1]} of {len(roles)} module roles at step "
                            f"{partial[0][0]} ({len(partial)} recorded steps alike)")
        if problems:
            out[run] = "; ".join(problems)
    return out
