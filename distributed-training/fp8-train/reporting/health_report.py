"""The training-health part of REPORT.md: every run's alerts and NaN steps, the recovery actions, a PNG copy of the
dashboard for a run with injected faults (the words: findings_template.md's [health.*], [nan.*], [demo.*]).

Reads each result folder's steps.csv, layers.csv, fp8.csv and events.csv (nothing else) and, for a run with
injected faults, compares it with the clean run of the same name, model and seed in a sibling folder (the cpu
preset's), so "the run survived" is a number, not a claim.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

from common.findings import listing, spread
from common.markdown import table as md_table
from reporting.evidence import Facts
from reporting.findings import S, short_gpu, then
from reporting.plots import plot_health
from reporting.tables import read

ROLLBACK = re.compile(r"rolled back to the checkpoint taken after step (\d+)")
RISE = re.compile(r"above ([0-9.]+)x its (\d+)-step min ([0-9.e+-]+)")


def _read(path: Path) -> pd.DataFrame:
    """A result file, checked (tables.py); an empty frame where the folder has none."""
    df = read(path)
    return pd.DataFrame() if df is None else df


def has_faults(steps: pd.DataFrame) -> bool:
    return "injected" in steps.columns and steps["injected"].notna().any()


def alerts_cell(e: pd.DataFrame) -> str:
    """'12 scale_rise (step 36), 4 scale_drop (steps 52-71)' or 'none'."""
    parts = []
    for kind, g in (e.groupby("kind", sort=True) if len(e) else []):
        steps = sorted(set(g["step"].astype(int)))
        parts.append(f"{len(g)} {kind} (step{'s' if len(steps) > 1 else ''} {spread(steps, '{}', '-')})")
    return ", ".join(parts) or "none"


def runs_table(dirs: list[Path], root: Path) -> list[str]:
    """Every run with a NaN step, a skipped step or an alert, one row each; the quiet runs in one line."""
    rows, quiet, overlays = [], [], []
    for d in dirs:
        steps, events = _read(d / "steps.csv"), _read(d / "events.csv")
        if not len(steps) or "nan_steps" not in steps.columns:
            continue
        overlays += [f"[`{d.name}`]({os.path.relpath(p, root)})" for p in sorted(d.glob("*.html"))]
        for run, g in steps.groupby("run", sort=False):
            e = events[events["run"] == run] if len(events) else events
            nan, skipped = int(g["nan_steps"].max()), int(g["skipped_steps"].max())
            if not (nan or skipped or len(e)):
                quiet.append(f"{run} (`{d.name}`)")
                continue
            dash = d / "dashboards" / f"{run}.html"
            rows.append([f"`{d.name}`", run, nan, skipped, alerts_cell(e),
                         f"[html]({os.path.relpath(dash, root)})" if dash.exists() else "-"])
    out = [S("health.lead"), "", md_table(["folder", "run", "NaN steps", "skipped", "alerts", "dashboard"], rows),
           ""] if rows else []
    out += [S("health.quiet", runs=listing(quiet)), ""] if quiet else []
    return out + ([S("health.overlays", links=", ".join(overlays)), ""] if overlays else [])


def rise_factors(alerts: pd.DataFrame) -> list[float]:
    """How far each scale alert's scale moved against its window's extreme (from the alert's own message)."""
    out = []
    for value, message in zip(alerts["value"], alerts["message"]):
        m = RISE.search(str(message))
        if m and float(m.group(3)) > 0:
            out.append(float(value) / float(m.group(3)))
    return out


def first_judged_lines(facts: list[Facts]) -> list[str]:
    """Models whose every scale_rise fired at the detector's first judged step: a climb, not an instability."""
    out = []
    for f in facts:
        rises = f.alerts[f.alerts["kind"] == "scale_rise"] if len(f.alerts) else f.alerts
        if len(rises) and f.first_judged is not None and set(rises["step"].astype(int)) == {f.first_judged}:
            factors = rise_factors(rises)
            out += [S("health.first_judged", gpu=short_gpu(f.key.hardware), step=f.first_judged,
                      factors=spread(factors, "{:.0f}", "-") if factors else "more than the threshold"), ""]
    return out


def nan_lines(steps: pd.DataFrame, folder: str) -> list[str]:
    """Every non-finite step and the action taken, named as it happened (skip, reduce-lr, rollback, stop)."""
    out = []
    for r in steps[steps["nonfinite"].astype(str).str.lower() == "true"].itertuples():
        action = "" if pd.isna(getattr(r, "action", None)) else str(r.action)
        injected = getattr(r, "injected", None)
        cause = S("nan.injected", fault=injected) if isinstance(injected, str) else S("nan.not_injected")
        if m := ROLLBACK.search(action):
            kept = int(m.group(1))
            what = S("nan.rollback", kept=kept, lost=int(r.step) - kept - 1, first=kept + 1, last=int(r.step) - 1,
                     nan=int(r.nan_steps), skipped=int(r.skipped_steps))
        elif action.startswith("skipped"):
            what = S("nan.skip", action=action)
        else:
            what = S("nan.stop") if action.startswith("stopped") else S("nan.other", action=action or "none recorded")
        out.append(f"- `{folder}` {r.run}, step {int(r.step)} ({cause}): {what}.")
    return out


def demo_lines(d: Path, root: Path) -> list[str]:
    """A folder with injected faults: each fault and the alerts within three steps, each NaN's action, the final
    loss against the clean run, and the dashboard's PNG."""
    steps, events = _read(d / "steps.csv"), _read(d / "events.csv")
    fp8, layers = _read(d / "fp8.csv"), _read(d / "layers.csv")
    out = []
    for run in steps["run"].unique():
        s = steps[steps["run"] == run]
        faults = []
        for r in s.dropna(subset=["injected"]).itertuples():
            near = events[(events["run"] == run) & events["step"].between(r.step, r.step + 3)] if len(events) else \
                pd.DataFrame(columns=["kind"])
            kinds = listing([f"{n} {k}" for k, n in near["kind"].value_counts().sort_index().items()])
            faults.append(f"{r.injected} -> " + (S("fault.seen", kinds=kinds) if kinds else S("fault.unseen")))
        out += [S("demo.lead", folder=d.name, run=run, faults="; ".join(faults)), ""] + nan_lines(s, d.name) + [""]
        clean, bf16 = _clean_counterpart(d, run, s)
        final = s["val_loss"].dropna()
        if clean is not None and len(final):
            ref = clean["val_loss"].dropna().iloc[-1]
            commits, ran = ("/".join(sorted({str(c) for c in x["git_commit"]})) for x in (clean, s))
            out += [S("demo.final", final=final.iloc[-1], ref=ref, diff=final.iloc[-1] - ref,
                      clean=clean["folder"].iloc[0], commits=commits, ran=ran), ""]
        png = plot_health(d, run, steps, events, fp8, layers, clean, bf16)
        seeds = bf16["run"].nunique() if bf16 is not None else 0
        out += [f"![health dashboard of {run}]({os.path.relpath(png, root)})", "",
                S("demo.caption", folder=d.name, run=run,
                  band=then("demo.caption.band", n=seeds) if seeds >= 2 else ""), ""]
    return out


def section(dirs: list[Path], root: Path, facts: list[Facts]) -> list[str]:
    out = runs_table(dirs, root) + first_judged_lines(facts)
    kinds = {k for d in dirs for k in _read(d / "events.csv").get("kind", [])}
    if kinds:
        out += [S("health.kinds") + " " + " ".join(f"**{k}**: {S(f'kind.{k}')}" for k in sorted(kinds)
                                                   if f"kind.{k}" in S), ""]
    return out + [line for d in dirs if has_faults(_read(d / "steps.csv")) for line in demo_lines(d, root)]


def _clean_counterpart(d: Path, run: str, s: pd.DataFrame) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(the same run without faults, that folder's BF16 runs of one seed each) from a sibling folder."""
    for other in sorted(p for p in d.parent.iterdir() if p.is_dir() and p != d and not p.name.startswith(".")):
        o = _read(other / "steps.csv")
        if not len(o) or has_faults(o):
            continue
        same = o[o["run"] == run]
        if len(same) and len(same) == len(s) and all(same[c].iloc[0] == s[c].iloc[0]
                                                     for c in ("d_model", "n_layers", "seq_len", "batch")):
            bf16 = o[o["precision"] == "bf16"].drop_duplicates(subset=["seed", "step"])
            return same.sort_values("step").assign(folder=other.name), bf16
    return None, None
