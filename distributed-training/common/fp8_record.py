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
from typing import Iterable, Mapping, NamedTuple

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


class Damage(NamedTuple):
    """One of the three rules a run's scale record breaks, and the numbers a report says of it."""

    rule: str  # "scale" (a scale of 0.0 or +-inf), "missing" (a module role missing), "partial" (underflow for some)
    steps: tuple[int, ...]  # the recorded steps it holds at, in order
    recorded: int  # the run's recorded steps
    found: int  # scale: such scales (all steps); missing / partial: module roles recorded / with underflow at steps[0]
    roles: int  # the (module, role) pairs the run records over all its steps
    modules: int  # missing / partial: the modules among `found`'s roles
    of_modules: int  # the modules the run records
    infinite: int = 0  # scale: of `found`, the scales of +-inf (the rest are 0.0)


def _number(value) -> float | None:
    """A cell as fp8.csv's text (csv.DictReader) or as pandas reads it: None where empty (a value not exposed)."""
    if value is None or value == "":
        return None
    x = float(value)
    return None if x != x else x  # nan: what pandas makes of an empty cell


def judge(rows: Iterable[Mapping]) -> dict[str, list[Damage]]:
    """Per run, every rule of the module docstring its scale record breaks, in that order; whole runs are absent.
    Rows are fp8.csv's (run, step, module, role, scale, underflow_frac), as text (csv.DictReader,
    common.csvread.read_rows) or as pandas reads them (DataFrame.to_dict("records"): numbers, nan for empty)."""
    steps: dict[str, dict[int, list[Mapping]]] = {}
    for row in rows:
        steps.setdefault(row["run"], {}).setdefault(int(row["step"]), []).append(row)
    out = {}
    for run, by_step in steps.items():
        by_step = dict(sorted(by_step.items()))
        roles = {(r["module"], r["role"]) for rs in by_step.values() for r in rs}
        modules = {m for m, _ in roles}

        def broken(rule: str, at: list[int], found: int, mods: int = 0, infinite: int = 0) -> Damage:
            return Damage(rule, tuple(at), len(by_step), found, len(roles), mods, len(modules), infinite)

        found = []
        bad = [(s, x) for s, rs in by_step.items() for r in rs if (x := _number(r["scale"])) in (0.0, INF, -INF)]
        if bad:
            found.append(broken("scale", sorted({s for s, _ in bad}), len(bad), infinite=sum(x != 0.0 for _, x in bad)))
        held = {s: {(r["module"], r["role"]) for r in rs} for s, rs in by_step.items()}
        short = [s for s, h in held.items() if len(h) < len(roles)]
        if short:
            found.append(broken("missing", short, len(held[short[0]]), len({m for m, _ in held[short[0]]})))
        counted = {s: {(r["module"], r["role"]) for r in rs if _number(r["underflow_frac"]) is not None}
                   for s, rs in by_step.items()}
        partial = [s for s, c in counted.items() if 0 < len(c) < len(roles)]
        if partial:
            first = counted[partial[0]]
            found.append(broken("partial", partial, len(first), len({m for m, _ in first})))
        if found:
            out[run] = found
    return out


def damage(rows: Iterable[Mapping]) -> dict[str, str]:
    """Per run, what its scale record lacks (judge's rules), one line each; whole runs are absent."""
    def line(d: Damage) -> str:
        if d.rule == "scale":
            return f"fp8.csv: {d.found} scales of exactly 0.0 or infinite (first at step {d.steps[0]})"
        if d.rule == "missing":
            return f"fp8.csv: step {d.steps[0]} records {d.found} of {d.roles} module roles"
        return (f"fp8.csv: underflow recorded for {d.found} of {d.roles} module roles at step {d.steps[0]} "
                f"({len(d.steps)} recorded steps alike)")
    return {run: "; ".join(line(d) for d in found) for run, found in judge(rows).items()}
