"""The training-health part of REPORT.md: alerts, recovery actions, PNG copies of the dashboard.

Reads a result folder's steps.csv, layers.csv, fp8.csv and events.csv (nothing else) and, for a
run with injected faults, compares it with the clean run of the same name, model and seed in a
sibling folder (the cpu preset's), so "the run survived" is a number, not a claim.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from common.plotting import describe_runs, new_figure, save
from health.panels import BY_ID, EVENT_STYLE, MPL_MARKERS, PANELS, ROLE_COLORS
from reporting import story
from reporting.tables import read



def _read(path: Path) -> pd.DataFrame:
    """A result file, checked (tables.py); an empty frame where the folder has none."""
    df = read(path)
    return pd.DataFrame() if df is None else df


def _rel(p: Path, root: Path) -> str:
    return os.path.relpath(p, root)


def has_faults(steps: pd.DataFrame) -> bool:
    return "injected" in steps.columns and steps["injected"].notna().any()


def alert_counts(steps: pd.DataFrame, events: pd.DataFrame) -> list[str]:
    kinds = sorted(events["kind"].unique()) if len(events) else []
    if not kinds and int(steps["nan_steps"].max()) == 0 and int(steps["skipped_steps"].max()) == 0:
        return [f"No NaN step, no skipped step and no alert in {', '.join(steps['run'].unique())}."]
    out = ["| " + " | ".join(["run", "NaN steps", "skipped steps", *kinds]) + " |", "|---" * (3 + len(kinds)) + "|"]
    for run, g in steps.groupby("run", sort=False):
        e = events[events["run"] == run] if len(events) else events
        counts = [str(int((e["kind"] == k).sum())) if len(e) else "0" for k in kinds]
        out.append("| " + " | ".join([str(run), str(int(g["nan_steps"].max())), str(int(g["skipped_steps"].max())),
                                      *counts]) + " |")
    return out

def plot_health(d: Path, run: str, steps: pd.DataFrame, events: pd.DataFrame, fp8: pd.DataFrame,
                layers: pd.DataFrame, clean: pd.DataFrame | None, bf16: pd.DataFrame | None = None) -> Path:
    """A PNG copy of the dashboard's `png` panels (health/panels.py) for one run; the HTML has them all.

    clean: the same run without faults; bf16: BF16 runs of the same model (one per seed), drawn as the
    seed band under the loss."""
    s = steps[steps["run"] == run].sort_values("step")
    e = events[events["run"] == run] if len(events) else events
    shown = [p for p in PANELS if p.png]
    fig, axes = new_figure(2, (len(shown) + 1) // 2, figsize=(13, 6.8))
    ax = {p.id: a for p, a in zip(shown, axes.flat)}
    for p, a in zip(shown, axes.flat):
        a.set(xlabel="step", yscale="log" if p.log else "linear")
        a.set_title(p.title, fontsize=8)
    if bf16 is not None and bf16["run"].nunique() >= 2:
        band = bf16.pivot_table(index="step", columns="run", values="loss")
        ax["p-loss"].fill_between(band.index, band.min(axis=1), band.max(axis=1), color="0.85",
                                  label=f"BF16 band ({band.shape[1]} seeds)")
    if clean is not None:
        ax["p-loss"].plot(clean["step"], clean["loss"], color="0.45", lw=0.8, label="clean run")
    ax["p-loss"].plot(s["step"], s["loss"], lw=0.9, label=run)
    v = s.dropna(subset=["val_loss"])
    ax["p-loss"].plot(v["step"], v["val_loss"], "o--", ms=3, label="val")
    ax["p-loss"].legend()
    ax["p-grad"].plot(s["step"], s["grad_norm"], lw=0.9)
    ax["p-update"].plot(s["step"], s["update_ratio"].where(s["update_ratio"] > 0), lw=1.4)
    per_layer = layers[(layers["run"] == run) & (layers["update_ratio"] > 0)] if len(layers) else layers
    for layer, g in (per_layer.groupby("layer") if len(per_layer) else []):
        ax["p-update"].plot(g["step"], g["update_ratio"], lw=0.5, alpha=0.4, color="0.4")
    f = fp8[fp8["run"] == run] if len(fp8) else fp8
    for (module, role), g in (f.groupby(["module", "role"]) if len(f) else []):
        ax["p-scale"].plot(g["step"], g["scale"], color=ROLE_COLORS.get(role, "0.5"), lw=0.7, alpha=0.6)
    for role, c in ROLE_COLORS.items():
        ax["p-scale"].plot([], [], color=c, label=role)
    ax["p-scale"].legend(fontsize=6)
    lay = layers[(layers["run"] == run) & layers["act_amax"].notna()] if len(layers) else layers
    for layer, g in (lay.groupby("layer") if len(lay) else []):
        ax["p-act"].plot(g["step"], g["act_amax"], marker=".", lw=0.9, label=layer)
    if len(lay):
        ax["p-act"].legend(fontsize=6)
    kinds = list(EVENT_STYLE)
    for k, (c, shape) in EVENT_STYLE.items():
        ek = e[e["kind"] == k] if len(e) else e
        if len(ek):
            ax["p-events"].scatter(ek["step"], [kinds.index(k)] * len(ek), color=c, marker=MPL_MARKERS[shape], s=40)
            if k in ("grad_spike", "nonfinite"):
                y = s.set_index("step")["grad_norm"].reindex(ek["step"]).fillna(s["grad_norm"].max())
                ax["p-grad"].scatter(ek["step"], y, color=c, marker=MPL_MARKERS[shape], s=40, zorder=3)
    ax["p-events"].set(yticks=range(len(kinds)), yticklabels=kinds, xlim=ax["p-loss"].get_xlim(),
                       ylabel=BY_ID["p-events"].ylabel)
    for p in shown:
        if p.id != "p-events":
            ax[p.id].set_ylabel(p.ylabel)
    return save(fig, d / f"health_{run}.png", describe_runs(steps))

def section(d: Path, root: Path) -> list[str]:
    steps, events = _read(d / "steps.csv"), _read(d / "events.csv")
    if not len(steps) or "nan_steps" not in steps.columns:
        return []
    lines = [f"### `{d.name}`", ""]
    dash = d / "dashboard.html" if (d / "dashboard.html").exists() else None
    runs = list(steps["run"].unique())
    per_run = [d / "dashboards" / f"{r}.html" for r in runs if (d / "dashboards" / f"{r}.html").exists()]
    others = sorted(p for p in d.glob("*.html") if p.name != "dashboard.html")  # e.g. the demo's overlay
    links = ([f"[all runs overlaid]({_rel(dash, root)})"] if dash else []) + \
        [f"[{p.stem}]({_rel(p, root)})" for p in others + per_run]
    if links:
        lines += ["Dashboards (self-contained HTML, open from disk): " + ", ".join(links) + ".", ""]
    lines += alert_counts(steps, events) + [""]
    if not has_faults(steps):
        return lines
    fp8, layers = _read(d / "fp8.csv"), _read(d / "layers.csv")
    for run in runs:
        s = steps[steps["run"] == run]
        inj = s.dropna(subset=["injected"])
        clean, bf16 = _clean_counterpart(d, run, s)
        png = plot_health(d, run, steps, events, fp8, layers, clean, bf16)
        lines += [f"Run `{run}` with injected faults " + ", ".join(inj["injected"]) + ". What it did at each "
                  "non-finite step:", ""] + story.nan_lines(s, d.name) + [""]
        final = s["val_loss"].dropna()
        if clean is not None and len(final):
            ref = clean["val_loss"].dropna().iloc[-1]
            commits, ran = ("/".join(sorted({str(c) for c in x["git_commit"]})) for x in (clean, s))
            lines += [f"Final val loss {final.iloc[-1]:.4f} against {ref:.4f} for the same run without faults "
                      f"({final.iloc[-1] - ref:+.4f}; the clean run is `{clean['folder'].iloc[0]}`'s, commit "
                      f"{commits}, the demo ran at commit {ran}).", ""]
        lines += [f"![health]({_rel(png, root)})", "", "| step | alert | action | what it saw |", "|---|---|---|---|"]
        e = events[events["run"] == run]
        for r in e.head(25).itertuples():
            act = "" if pd.isna(r.action) else r.action
            lines.append(f"| {r.step} | {r.kind} | {act} | {str(r.message).split(':')[0]} |")
        if len(e) > 25:
            lines.append(f"| ... | {len(e) - 25} more in events.csv | | |")
        lines.append("")
    return lines


def _clean_counterpart(d: Path, run: str, s: pd.DataFrame) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(the same run without faults, that folder's BF16 runs of one seed each) from a sibling folder."""
    for other in sorted(p for p in d.parent.iterdir() if p.is_dir() and p != d and not p.name.startswith(".")):
        o = _read(other / "steps.csv")
        if not len(o) or (has_faults(o)):
            continue
        same = o[o["run"] == run]
        if len(same) and len(same) == len(s) and all(same[c].iloc[0] == s[c].iloc[0]
                                                     for c in ("d_model", "n_layers", "seq_len", "batch")):
            bf16 = o[o["precision"] == "bf16"].drop_duplicates(subset=["seed", "step"])
            return same.sort_values("step").assign(folder=other.name), bf16
    return None, None

def monitor_lines(d: Path) -> list[str]:
    m = _read(d / "bench_monitor.csv")
    if not len(m):
        return []
    out = ["Monitoring overhead (bench.py: every health feature on vs off, interleaved, mean per step):", "",
           "| run | d_model | off ms | on ms | overhead | target | met |", "|---|---|---|---|---|---|---|"]
    for r in m.itertuples():
        met = "yes" if str(r.meets_target).lower() == "true" else "**no**"
        out.append(f"| {r.run} | {r.d_model} | {r.step_time_off_s * 1e3:.1f} | {r.step_time_on_s * 1e3:.1f} | "
                   f"{r.overhead_pct:+.1f}% | < {r.target_pct:g}% | {met} |")
    return out + [""]
