"""What the runs show, told from the CSVs: FP8 against BF16 seed by seed, memory by backend, why delayed
scaling starts behind (its underflow, role by role), and every alert and NaN with the action taken.

Each paragraph's wording is picked from story_template.md by what the data holds (common.findings); the
report places this section right after its answer (report.py, {{story}}).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from common.findings import Sentences, listing, spread
from common.markdown import table
from reporting.findings import Facts, lag_sentence, run_label, short_gpu

HERE = Path(__file__).resolve().parent
S = Sentences(HERE / "story_template.md")
ROLLBACK = re.compile(r"rolled back to the checkpoint taken after step (\d+)")


def repeat_ratio(diff: float, noise: float | None) -> str:
    """A paired difference in units of the repeat noise (none measured, or an exact repeat, said as such)."""
    if noise is None:
        return "no repeat"
    if noise == 0:
        return "exact repeat (0)"
    return f"{abs(diff) / noise:.1f}x"


def paired_section(f: Facts) -> list[str]:
    if not f.paired:
        return []
    ref = {r.seed: r for r in f.band.seeds}
    rows = []
    for p in f.paired:
        times = repeat_ratio(p.diff, f.noise)
        rows.append([p.run.name, p.run.folder, run_label(p.run), f"{p.run.final_val:.4f}",
                     f"{ref[p.run.seed].final_val:.4f} ({ref[p.run.seed].folder})", f"{p.diff:+.4f}", times])
    repeats = listing([f"{r.name} in `{r.folder}`" for r in f.band.repeats])
    if f.noise is None:
        noise = S("paired.no_noise")
    else:
        noise = S("paired.noise_zero" if f.noise == 0 else "paired.noise", noise=f.noise, runs=repeats)
    return [S("paired.lead", where=short_gpu(f.key.hardware), d=f.key.d_model), "",
            table(["run", "folder", "backend (scaling)", "final val", "same seed's BF16", "difference",
                   "x repeat noise"], rows), "", noise, ""]


def memory_section(f: Facts) -> list[str]:
    if not f.gpu:
        return []
    base = [r.memory for r in f.runs if r.precision == "bf16" and not math.isnan(r.memory)]
    if not base:
        return []
    ref = float(pd.Series(base).median())
    rows = [[r.name, r.folder, run_label(r) if r.fp8 else "bf16", f"{r.memory / 1024:.2f}",
             f"{r.memory / ref - 1:+.1%}"] for r in sorted(f.runs, key=lambda r: r.memory)]
    low = min((r for r in f.runs if r.fp8), key=lambda r: r.memory, default=None)
    out = [S("memory.lead", ref=ref / 1024), "", table(["run", "folder", "backend (scaling)", "peak GiB",
                                                        "vs BF16"], rows), ""]
    if low is not None:
        out += [S("memory.why", best=run_label(low), pct=low.memory / ref - 1), ""]
    return out


def underflow_section(f: Facts, png: str | None) -> list[str]:
    out = [lag_sentence(f), ""]
    u = f.underflow
    if png:
        out += [f"![underflow per role over steps]({png})", "", S("underflow.caption"), ""]
    g = u[u["role"] == "grad_output"] if len(u) else u
    if len(g):
        first = g[g["step"] == g["step"].min()]
        top = first.sort_values("max").iloc[-1]
        fwd = u[(u["role"] != "grad_output") & (u["step"] == g["step"].min())]["max"]
        out += [S("underflow.start", step=int(top["step"]), worst=top["max"], mean=first["mean"].max(),
                  modules=listing(sorted(set(first.loc[first["max"] == top["max"], "worst_module"]))),
                  fwd=fwd.max() if len(fwd) else 0.0), ""]
        late = g[g["step"] >= g["step"].max() / 2]
        worst = late.sort_values("max").iloc[-1]
        steps = spread(sorted(set(late["step"].astype(int))), "{}", "-")
        if worst["max"] < 0.01:
            out += [S("underflow.late_none", steps=steps, worst=worst["max"]), ""]
        else:
            mods = sorted(set(late.loc[late["max"] >= worst["max"] / 2, "worst_module"]))
            out += [S("underflow.late", steps=steps, modules=listing(mods), worst=worst["max"],
                      mean=late["mean"].max(), run=worst["run"]), ""]
    return out


def alert_lines(alerts: pd.DataFrame) -> list[str]:
    """One line per (folder, run, kind): how many, and at which steps."""
    out = []
    for (folder, run, kind), g in alerts.groupby(["folder", "run", "kind"], sort=True):
        steps = sorted(set(g["step"].astype(int)))
        at = f"step {steps[0]}" if len(steps) == 1 else "steps " + listing([str(s) for s in steps[:6]]) + (
            ", ..." if len(steps) > 6 else "")
        out.append(f"- `{folder}` {run}: {len(g)} {kind} at {at}")
    return out


def kind_lines(kinds: set[str]) -> list[str]:
    """What each alert kind that fired means, once."""
    return [S("health.kinds"), ""] + [f"- {k}: {S(f'kind.{k}')}" for k in sorted(kinds) if f"kind.{k}" in S]


def nan_lines(steps: pd.DataFrame, folder: str) -> list[str]:
    """Every non-finite step and the action taken, named as it happened (skip, reduce-lr, rollback, stop)."""
    out = []
    bad = steps[steps["nonfinite"].astype(str).str.lower() == "true"]
    for r in bad.itertuples():
        action = "" if pd.isna(getattr(r, "action", None)) else str(r.action)
        injected = getattr(r, "injected", None)
        cause = S("nan.injected", fault=injected) if isinstance(injected, str) else S("nan.not_injected")
        m = ROLLBACK.search(action)
        if m:
            kept = int(m.group(1))
            lost = int(r.step) - kept - 1
            what = S("nan.rollback", kept=kept, lost=lost, first=kept + 1, last=int(r.step) - 1,
                     nan=int(r.nan_steps), skipped=int(r.skipped_steps))
        elif action.startswith("skipped"):
            what = S("nan.skip", action=action)
        elif action.startswith("stopped"):
            what = S("nan.stop")
        else:
            what = S("nan.other", action=action or "none recorded")
        out.append(f"- `{folder}` {r.run}, step {int(r.step)} ({cause}): {what}.")
    return out


def fault_lines(steps: pd.DataFrame, events: pd.DataFrame | None, folder: str) -> list[str]:
    """Each injected fault and the alerts it raised within the next few steps."""
    if "injected" not in steps:
        return []
    out = []
    for r in steps.dropna(subset=["injected"]).itertuples():
        near = events[(events["run"] == r.run) & (events["step"].between(r.step, r.step + 3))] \
            if events is not None and len(events) else pd.DataFrame(columns=["kind"])
        kinds = listing([f"{n} {k}" for k, n in near["kind"].value_counts().sort_index().items()])
        out.append(f"- `{folder}` {r.run}: {r.injected} -> " + (S("fault.seen", kinds=kinds) if kinds
                                                                   else S("fault.unseen")))
    return out


def health_story(f_all: list[Facts], folders: dict[str, pd.DataFrame], events: dict[str, pd.DataFrame | None],
                 demo: list[str]) -> list[str]:
    alerts = pd.concat([f.alerts for f in f_all], ignore_index=True) if f_all else pd.DataFrame()
    demo_alerts = [e.assign(folder=d) for d in demo if (e := events.get(d)) is not None and len(e)]
    out = [S("health.lead"), ""]
    out += alert_lines(alerts) + [""] if len(alerts) else [S("health.none"), ""]
    nans = [line for name, s in folders.items() for line in nan_lines(s, name)]
    out += [S("nan.lead"), ""] + nans + [""] if nans else [S("nan.none"), ""]
    for d in demo:
        out += [S("demo.lead", folder=d), ""] + fault_lines(folders[d], events.get(d), d) + [""]
    kinds = set(alerts["kind"]) if len(alerts) else set()
    kinds |= {k for e in demo_alerts for k in e["kind"]}
    return out + (kind_lines(kinds) + [""] if kinds else [])


def render(all_facts: list[Facts], pngs: dict[tuple, str | None], folders: dict[str, pd.DataFrame],
           events: dict[str, pd.DataFrame | None], demo: list[str]) -> list[str]:
    """The story section: per model (GPU first) the pairing, memory and scaling; then health over all folders."""
    out = []
    for f in sorted(all_facts, key=lambda f: (not f.gpu, f.key.hardware, f.key.d_model)):
        out += [f"### {short_gpu(f.key.hardware)}, d_model {f.key.d_model}: FP8 against BF16, seed by seed", ""]
        out += paired_section(f) + memory_section(f)
        out += [f"### {short_gpu(f.key.hardware)}, d_model {f.key.d_model}: why delayed scaling starts behind",
                ""] + underflow_section(f, pngs.get((f.key, "underflow")))
    return out + ["### Alerts, NaNs and recovery", ""] + health_story(all_facts, folders, events, demo)
