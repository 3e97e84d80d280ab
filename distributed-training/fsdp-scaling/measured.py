"""Section 3 of fsdp-scaling's REPORT.md: the measured sweeps, one result set at a time (scaling_*.csv).

Per set: throughput, scaling efficiency E(N) = T(N) / (N T(1)) and peak memory per rank, the efficiency plot,
and for a sweep of one rank what one rank can and cannot show (each wrapper's own cost, judged against the
spread of the timed steps). The words are findings_template.md's; the judgements findings.py's.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import findings
import report_plots
from common.findings import cores, shares_cores
from common.hardware import parse_run_tag
from common.markdown import frame, number
from findings import ORDER, S

MiB = 2**20


def table(df: pd.DataFrame, spec: str = ".3g") -> str:
    return frame(df, fmt=lambda v: number(v, spec))


def efficiency(s: pd.DataFrame) -> pd.DataFrame:
    """E(N) per (hardware file, strategy, mode) against the same strategy's world-size-1 row."""
    base = s[s["world_size"] == 1].set_index(["hardware", "strategy", "mode"])["tokens_per_s"]
    s = s.join(base.rename("t1"), on=["hardware", "strategy", "mode"])
    return s.assign(efficiency=s["tokens_per_s"] / (s["world_size"] * s["t1"]))


def section_measured(s: pd.DataFrame, results: Path) -> list[str]:
    """One subsection per result set (a sweep: hardware, its world sizes, its nodes): rows of a tiny CPU model
    and a GPU model, or of a sweep to 1 GPU and one to 8, never share a table or an average."""
    out = []
    for name, g in s.groupby("set", sort=False):
        tag = parse_run_tag(name)
        worlds = ", ".join(str(n) for n in sorted(set(g["world_size"])))
        nodes = f" on {tag.nnodes} nodes" if tag and tag.nnodes > 1 else ""
        cpu = " (CPU: contention, not scaling)" if (g["backend"] == "gloo").all() else ""
        out += [f"### {g['hardware'].iloc[0]}: world size {worlds}{nodes}{cpu} — `{name}.csv`", ""]
        out += measured_one(g, name, results)
    return out


def measured_one(s: pd.DataFrame, name: str, results: Path) -> list[str]:
    s = efficiency(s)
    names = {"tokens_per_s": "tok/s", "efficiency": "E", "peak": "peak MiB", "mfu": "MFU"}
    values = [v for v in names if v != "mfu" or s["mfu"].notna().any()]  # MFU: GPU rows only
    piv = s.assign(peak=s["peak_mem_bytes"] / MiB).pivot_table(index=["mode", "strategy"], columns="world_size",
                                                               values=values)
    piv = piv.reindex(sorted(piv.index, key=lambda k: (k[0], ORDER.index(k[1]))))
    piv = piv[[c for m in values for c in piv.columns if c[0] == m and (m, c[1]) != ("efficiency", 1)]]
    piv.columns = [f"{names[m]} N={n}" for m, n in piv.columns]
    out = [S("set.table", method=s["mem_method"].iloc[0], model=s["model"].iloc[0], batches=_batches(s),
             accum=int(s["grad_accum"].iloc[0]), losses=findings.losses(s)), "", table(piv.reset_index()), ""]
    one = s[s["world_size"] == 1]
    if set(s["world_size"]) == {1}:  # E(1) = 1 by definition: a plot of it carries no information
        return out + one_rank(one)
    if "single" in set(one["strategy"]):
        above, same = findings.judged(findings.step_spreads(one), top=10)
        out += [S("wrappers", above=above, same=f"no difference: {', '.join(same)}." if same else ""), ""]
    return out + [plot_or_why(s, name, results), ""]


def plot_or_why(s: pd.DataFrame, name: str, results: Path) -> str:
    """The efficiency plot; a set without world-size-1 rows (one launch across nodes) has no T(1) to divide by."""
    if not s["efficiency"].notna().any():
        return S("scaling.no_base")
    png = report_plots.scaling(s[s["strategy"] != "single"],
                               results / f"scaling_measured_{name.removeprefix('scaling_')}.png")
    hw, top = s["hardware"].iloc[0], int(s["world_size"].max())
    shared = S("scaling.shared", cores=cores(hw)) if shares_cores(hw, top) else ""
    return f"![measured scaling, {name}](results/{png.name})\n\n" + S("scaling.caption", name=name, shared=shared)


def one_rank(one: pd.DataFrame) -> list[str]:
    """What a sweep of one rank can and cannot show, and each wrapper's cost against plain training and DDP."""
    vs = {ref: findings.step_spreads(one, ref) for ref in ("single", "ddp") if ref in set(one["strategy"])}
    rows = []
    for r in sorted(one.itertuples(), key=lambda r: (r.mode, ORDER.index(r.strategy))):
        cells = [vs[ref][(r.mode, r.strategy)].pct() if (r.mode, r.strategy) in vs.get(ref, {}) else "–"
                 for ref in ("single", "ddp")]
        rows.append([r.mode, r.strategy, f"{r.step_time_ms:.1f} ({r.step_time_min_ms:.1f}-{r.step_time_max_ms:.1f})",
                     *cells, f"{r.peak_mem_bytes / MiB:,.0f}"])
    out = [S("one_rank"), "", table(pd.DataFrame(rows, columns=[
        "mode", "strategy", "step ms median (min-max)", "vs single (spread)", "vs DDP (spread)", "peak MiB"])), ""]
    if "single" in vs:
        above, same = findings.judged(vs["single"], top=10)
        out += [S("one_rank.costs", above=above, same=", ".join(same) or "none") + " " + findings.per_step(one), ""]
    return out


def _batches(s: pd.DataFrame) -> str:
    """The batch of each scaling mode the sweep ran (a sweep may run one mode only)."""
    parts = []
    if (s["mode"] == "strong").any():
        parts.append(f"strong = {int(s[s['mode'] == 'strong']['effective_batch'].iloc[0])} sequences per step in all")
    if (s["mode"] == "weak").any():
        parts.append(f"weak = {int(s[s['mode'] == 'weak']['effective_batch'].min())} per rank")
    return ", ".join(parts)
