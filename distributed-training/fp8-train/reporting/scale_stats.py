"""Every low-precision run's per-tensor scales and amaxes, role by role, for the report: no silent cell.

fp8.csv has one row per FP8 tensor every --stats-every steps (amax, the scale cast with, and every
--fractions-every steps the share of values that underflowed to zero or saturated). What a backend
lets the lab see differs, so a quantity a run did not record is a cell that says so and why:

    grad_output of torchao, compiled    torchao scales dynamically and keeps no state; the lab's
                                        backward hooks break torch.compile graphs, so they are off
    grad_output of TE current scaling   no amax history to read, and the backward hook on te.Linear
                                        did not fire in these runs
    underflow / saturation              counted only in the lab's own FP8 layer; TE and torchao cast
                                        inside their kernels; block formats have a scale per block
    a run with no rows at all           its backend exposed no per-tensor state to the lab
"""

from __future__ import annotations

import math

import pandas as pd

from precision import backends
from reporting.comparison import Folder, Run, _md

ROLES = ("input", "weight", "grad_output")


def why_missing(r: Run, role: str, quantity: str, kind: str) -> str:
    """'not recorded: <why>' for a quantity a run wrote no value of."""
    if quantity == "fractions":
        if r.precision != "fp8":
            return "not computed: block formats (one scale per block)"
        be = backends.lookup(r.backend)
        if be is None or not be.own_layer:
            return f"not recorded: {r.backend} casts inside its own kernels (counted in the lab's FP8 layer only)"
        return "not recorded: no --fractions-every step in this run"
    be = backends.lookup(r.backend)
    if role == "grad_output" and be is not None and be.dynamic_only and r.compiled:
        return (f"not recorded: {r.backend} keeps no scale state (dynamic scaling) and the lab's backward hooks are "
                "off under torch.compile")
    if role == "grad_output" and be is not None and be.library_state is not None and kind == "current":
        return ("not recorded: TE current scaling keeps no amax history and the lab's backward hook on te.Linear "
                "did not fire in this run")
    if role == "grad_output" and r.compiled:
        return f"not recorded: backward hooks are off under torch.compile ({r.backend})"
    return f"not recorded: {r.backend} exposed no {role} {quantity} to the lab in this run"


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def rows_for(r: Run, fp8: pd.DataFrame | None) -> list[list[str]]:
    g = fp8[fp8["run"] == r.name] if fp8 is not None and len(fp8) else pd.DataFrame()
    where = f"{r.name} ({r.folder})"
    if g.empty:
        why = f"not recorded: no fp8.csv rows for this run ({r.backend} exposed no per-tensor state to the lab)"
        return [[where, role, "", "", why, why, why] for role in ROLES]
    out = []
    for role in ROLES:
        h = g[g["role"] == role]
        kind = str(h["scale_kind"].iloc[0]) if len(h) and "scale_kind" in h else ""
        fmt = str(h["format"].iloc[0]) if len(h) else ""
        sc, am = (h[c].dropna() if c in h else pd.Series(dtype=float) for c in ("scale", "amax"))
        u, s = (h[c].dropna() for c in ("underflow_frac", "saturation_frac"))
        scale = (f"{_fmt(sc.median())} (min {_fmt(sc.min())})" if len(sc)
                 else why_missing(r, role, "scale", kind))
        amax = (f"{_fmt(am.median())} (max {_fmt(am.max())})" if len(am)
                else why_missing(r, role, "amax", kind))
        frac = (f"{u.mean():.2%} / {u.max():.2%} / {s.max():.2%}" if len(u) and len(s)
                else why_missing(r, role, "fractions", kind))
        out.append([where, role, fmt, kind, scale, amax, frac])
    return out


def table(runs: list[Run], folders: dict[str, Folder]) -> list[str]:
    rows = [row for r in runs if r.fp8 for row in rows_for(r, folders[r.folder].fp8)]
    if not rows:
        return []
    return _md(["run", "role", "format", "scaling", "scale: median (min)", "amax: median (max)",
                "underflow mean / max, saturation max"], rows)


def missing_roles(r: Run, fp8: pd.DataFrame | None) -> list[str]:
    """Roles of a run with no scale recorded (the scales plot says so in the run's panel)."""
    g = fp8[fp8["run"] == r.name] if fp8 is not None and len(fp8) else pd.DataFrame()
    return [role for role in ROLES if g.empty or g.loc[g["role"] == role, "scale"].dropna().empty
            or math.isnan(g.loc[g["role"] == role, "scale"].median())]
