"""Every low-precision run's per-tensor scales and amaxes, one row per run, for the report: no silent cell.

fp8.csv has one row per FP8 tensor every --stats-every steps (amax, the scale cast with, and every
--fractions-every steps the share of values that underflowed to zero or saturated). What a backend lets the lab
see differs (torchao and TE current scaling keep no grad_output state; only the lab's own layer counts
underflow; block formats have a scale per block), so a cell a run did not record says why in a note
(findings_template.md's [why.*]); a damaged record (evidence.damage) is named and its numbers left out.
"""

from __future__ import annotations

import math

import pandas as pd

from precision import backends
from reporting.comparison import Folder, Run, _md
from reporting.findings import S

ROLES = ("input", "weight", "grad_output")


def why_missing(r: Run, role: str, quantity: str, kind: str) -> str:
    """Why a run wrote no value of a quantity."""
    be = backends.lookup(r.backend)
    if quantity == "fractions":
        why = "block" if r.precision != "fp8" else "kernels" if be is None or not be.own_layer else "no_fractions"
    elif role == "grad_output" and be is not None and be.dynamic_only and r.compiled:
        why = "dynamic"
    elif role == "grad_output" and be is not None and be.library_state is not None and kind == "current":
        why = "te_current"
    else:
        why = "compiled" if role == "grad_output" and r.compiled else "other"
    return S(f"why.{why}", backend=r.backend, role=role, quantity=quantity)


def _g(x: float) -> str:
    return f"{x:.3g}"


def row_for(r: Run, fp8: pd.DataFrame | None, note) -> list[str]:
    """One run's cells; note(why) returns the marker of a reason, numbered once per table."""
    g = fp8[fp8["run"] == r.name] if fp8 is not None and len(fp8) else pd.DataFrame()
    if g.empty:
        why = note(S("why.no_rows", backend=r.backend))
        return [f"{r.name} (`{r.folder}`)", r.recipe, why, why, why]
    kind = str(g["scale_kind"].dropna().iloc[0]) if "scale_kind" in g and g["scale_kind"].notna().any() else ""
    fmts = "/".join(dict.fromkeys(str(g.loc[g["role"] == role, "format"].iloc[0]) for role in ROLES
                                  if (g["role"] == role).any()))
    scales, fracs = [], []
    for role in ROLES:
        h = g[g["role"] == role]
        sc = h["scale"].dropna() if "scale" in h else pd.Series(dtype=float)
        scales.append(f"{_g(sc.median())} ({_g(sc.min())})" if len(sc) else note(why_missing(r, role, "scale", kind)))
        u = h["underflow_frac"].dropna()
        fracs.append(f"{u.max():.1%}" if len(u) else None)
    go = g[g["role"] == "grad_output"]["amax"].dropna() if "amax" in g else pd.Series(dtype=float)
    amax = f"{_g(go.median())} ({_g(go.max())})" if len(go) else note(why_missing(r, "grad_output", "amax", kind))
    sat = g["saturation_frac"].dropna()
    under = (" / ".join(fracs) + f" ({sat.max():.2%})") if all(fracs) and len(sat) else \
        note(why_missing(r, "input", "fractions", kind))
    return [f"{r.name} (`{r.folder}`)", f"{kind or r.recipe}, {fmts}", " / ".join(scales), amax, under]


def table(runs: list[Run], folders: dict[str, Folder], damaged: dict[tuple[str, str], str]) -> list[str]:
    """The runs' rows, then the reasons of every cell not recorded; damaged: (folder, run) -> what is wrong."""
    notes: list[str] = []

    def note(why: str) -> str:
        if why not in notes:
            notes.append(why)
        return f"not recorded ({notes.index(why) + 1})"

    rows = []
    for r in (r for r in runs if r.fp8):
        if (r.folder, r.name) in damaged:
            rows.append([f"{r.name} (`{r.folder}`)", r.recipe] + [note(damaged[(r.folder, r.name)])] * 3)
        else:
            rows.append(row_for(r, folders[r.folder].fp8, note))
    if not rows:
        return []
    return _md(["run", "scaling, formats", "scale: input / weight / grad_output, median (min)",
                "grad_output amax, median (max)", "underflow max: input / weight / grad_output (saturation max)"],
               rows) + (["Not recorded: " + "; ".join(f"({i}) {why}" for i, why in enumerate(notes, 1)) + ".", ""]
                        if notes else [])


def missing_roles(r: Run, fp8: pd.DataFrame | None) -> list[str]:
    """Roles of a run with no scale recorded (the scales plot says so in the run's panel)."""
    g = fp8[fp8["run"] == r.name] if fp8 is not None and len(fp8) else pd.DataFrame()
    return [role for role in ROLES if g.empty or g.loc[g["role"] == role, "scale"].dropna().empty
            or math.isnan(g.loc[g["role"] == role, "scale"].median())]
