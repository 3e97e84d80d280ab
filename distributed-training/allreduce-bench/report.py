"""REPORT.md, its plots and TOPOLOGY.md, from results/ alone: sweep_*.csv, nccl_tests_*.csv, topology_*.md.

    make allreduce-bench-report          # or: python report.py [--results DIR] [--out REPORT.md]

Runs on different hardware, rank counts, node counts or dtypes are drawn side by side. Per run and
collective: peak busbw, the alpha-beta fit (common/collective_fit.py), the peak as a fraction of the link's
per-direction rate from common.hardware's table (single-node GPU runs), and the published figures
for the same hardware and rank count (published.py) where one exists.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from common import measured_on
from common.collective_cost import COLLECTIVES
from common.collective_fit import PLATEAU, fit_alpha_beta, wire_factor
from common.config import parse_config
from common.csvread import Schema, check_configs, guard_report, read_tables, read_text, report_path, results_folder
from common.findings import block, fill
from common.hardware import PRESETS
from common.markdown import number, table
from common.plotting import describe_runs, log2_size_axis, new_figure, save
import collectives as C
import findings
from findings import S, size_str
from topology import without_colours
from published import matching

LAB_DIR = Path(__file__).resolve().parent
RUN = ["preset", "hardware", "world_size", "nnodes", "backend", "dtype"]
_RUN_KINDS = {"preset": str, "hardware": str, "world_size": int, "nnodes": int, "backend": str, "dtype": str}
# What this report reads from each kind of file (common.csvread checks it before pandas does).
SWEEP = Schema("allreduce-bench sweep", {**_RUN_KINDS, "collective": str, "size_bytes": int, "count": int,
                                         "time_us": float, "time_min_us": float, "time_max_us": float,
                                         "algbw_GBps": float, "busbw_GBps": float, "wrong": int, "timing": str,
                                         "torch_version": str, "nccl_version": str, "cuda_version": str,
                                         "git_commit": str, "timestamp_utc": str}, finite=True,
               key=("collective", "dtype", "size_bytes", "world_size", "nnodes"))
NCCL_TESTS = Schema("nccl-tests", {**_RUN_KINDS, "collective": str, "size_bytes": int, "placement": str,
                                   "busbw_GBps": float}, finite=True,
                    key=("collective", "dtype", "size_bytes", "placement", "world_size", "nnodes"))
OVERHEAD = Schema("allreduce-bench overhead", {**_RUN_KINDS, "collective": str, "size_bytes": int, "ratio": float,
                                               "ratio_min": float, "ratio_max": float}, finite=True,
                  key=("collective", "dtype", "size_bytes", "world_size", "nnodes"))


@dataclass(frozen=True)
class Config:
    results: str = field(default=str(LAB_DIR / "results"), metadata={"help": "folder with sweep_*.csv"})
    out: str = field(default=str(LAB_DIR / "REPORT.md"), metadata={"help": "report to write (plots beside the CSVs)"})


def num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def load(results: Path, pattern: str = "sweep_*.csv", schema: Schema = SWEEP, required: bool = False) -> pd.DataFrame:
    df = read_tables(results, pattern, schema, required=required,
                     hint="run `make allreduce-bench-run` (or restore the committed results with git)")
    if df.empty:
        return df
    # A row that moved no data (one rank, in place) has a time but no bandwidth; files without the column
    # (older sweeps, overhead.py) get it from the collective and the world size.
    df["moves_data"] = [C.moves_data(c, int(n)) for c, n in zip(df["collective"], df["world_size"])]
    df["run"] = [f"{r.preset} {r.world_size} rank{'s' if r.world_size > 1 else ''}"
                 + (f" on {r.nnodes} nodes" if r.nnodes > 1 else "") + f", {r.backend}, {r.dtype}"
                 for r in df[RUN].itertuples()]
    return df


def link_fraction(preset: str, backend: str, ws: int, nnodes: int, peak: float) -> str:
    p = PRESETS.get(preset)
    if backend != "nccl" or ws < 2 or p is None:
        return "n/a"
    if nnodes > 1:
        return "n/a (across nodes)"
    if p.nvlink_gbps is None:
        return "unknown link rate"
    return f"{peak / p.nvlink_gbps:.0%} of {p.nvlink_gbps:.0f}"


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, collective): peak bandwidth and the alpha-beta fit."""
    out = []
    for (run, coll), g in df[df["moves_data"]].groupby(["run", "collective"], sort=False):
        g = g.sort_values("size_bytes")
        r = g.iloc[0]
        bw = g["busbw_GBps"] if r.world_size > 1 else g["algbw_GBps"]
        peak = g.loc[bw.idxmax()]
        fit = fit_alpha_beta(coll, int(r.world_size), g["size_bytes"], g["time_us"] * 1e-6) if len(g) > 1 else None
        out.append({"run": run, "collective": coll, "kind": "busbw" if r.world_size > 1 else "algbw",
                    "peak": float(bw.max()), "peak_at": size_str(peak.size_bytes),
                    "link": link_fraction(r.preset, r.backend, int(r.world_size), int(r.nnodes), float(bw.max())),
                    "fit": fit, "wrong": int(g["wrong"].sum()), "rows": len(g), "preset": r.preset,
                    "ws": int(r.world_size), "nnodes": int(r.nnodes)})
    return pd.DataFrame(out)


def _per_collective(df: pd.DataFrame, path: Path, ylabel: str, draw, footer: str, log_y: bool = False) -> None:
    """One panel per collective (2 x 3), size on a log2 axis; draw(ax, collective, run, rows) plots one run.
    One legend for the figure, naming every run drawn in any panel."""
    colls = [c for c in COLLECTIVES if c in set(df.collective)]
    fig, axes = new_figure(2, 3, sharex=True)
    for ax, coll in zip(axes.flat, colls):
        for run, g in df[(df.collective == coll) & df.moves_data].groupby("run", sort=False):  # one-rank no-ops out
            draw(ax, coll, run, g.sort_values("size_bytes"))
        ax.set_title(coll)
        if log_y:
            ax.set_yscale("log")
        log2_size_axis(ax, sorted(set(df.size_bytes))[::4])  # a tick every 16x keeps 3 columns legible
        ax.set_ylabel(ylabel)
    for ax in list(axes.flat)[len(colls):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("message size S")
    handles = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), loc="outside upper center", ncol=min(3, len(handles)), fontsize=8)
    save(fig, path, footer=_footer(df) + footer)


def plot_bandwidth(df: pd.DataFrame, path: Path) -> bool:
    """busbw of the runs with two or more ranks (a one-rank run has no bus: plot_one_rank draws it apart)."""
    multi = df[df.world_size > 1]
    if multi.empty:
        path.unlink(missing_ok=True)
        return False
    _per_collective(multi, path, "busbw (GB/s)", lambda ax, coll, run, g: ax.plot(g.size_bytes, g.busbw_GBps, "-o",
                                                                                  ms=3, label=run), "")
    return True


def plot_one_rank(df: pd.DataFrame, path: Path) -> bool:
    """algbw of one-rank runs: a local copy on the device, on its own axis (never beside a busbw)."""
    one = df[(df.world_size == 1) & df.moves_data]
    if one.empty:
        path.unlink(missing_ok=True)
        return False
    fig, ax = new_figure()
    for (run, coll), g in one.groupby(["run", "collective"], sort=False):
        g = g.sort_values("size_bytes")
        ax.plot(g.size_bytes, g.algbw_GBps, "-o", ms=3, label=f"{coll} ({run})")
    log2_size_axis(ax, sorted(set(one.size_bytes))[::2])
    ax.set(xlabel="message size S", ylabel="algbw = S / t of a local copy (GB/s)",
           title="One rank: no link, a copy in device memory")
    ax.legend(fontsize=8)
    save(fig, path, footer=_footer(one))
    return True


def plot_time_fit(df: pd.DataFrame, summ: pd.DataFrame, path: Path) -> None:
    def draw(ax, coll, run, g):
        err = [g.time_us - g.time_min_us, g.time_max_us - g.time_us]
        line = ax.errorbar(g.size_bytes, g.time_us, yerr=err, fmt="o", ms=3, capsize=0, lw=0.6, label=run)
        fit = summ[(summ.run == run) & (summ.collective == coll)].fit.iloc[0]
        if fit is not None:
            s = np.geomspace(g.size_bytes.min(), g.size_bytes.max(), 60)
            ax.plot(s, fit.predict_s(wire_factor(coll, int(g.world_size.iloc[0]))[0] * s) * 1e6,
                    color=line[0].get_color(), lw=1)
    _per_collective(df[df.world_size > 1], path, "time (us)", draw,
                    "  dots: median, bars: min-max; lines: alpha-beta fit", log_y=True)


def _footer(df: pd.DataFrame) -> str:
    return describe_runs(df, columns=("hardware", "world_size", "nnodes", "backend", "torch_version", "cuda_version",
                                      "nccl_version"))


def nccl_tests_section(df: pd.DataFrame, nt: pd.DataFrame) -> list[str]:
    """all_reduce_perf's in-place busbw beside ours computed with its statistic (loop time / iterations,
    mean over ranks); our own statistic (median of the per-iteration max over ranks) beside both."""
    if nt.empty:
        return [S("nccl_tests.none")]
    keys = ["hardware", "world_size", "dtype", "size_bytes"]
    ours = df[df.collective == "all_reduce"].reindex(columns=keys + ["busbw_loop_GBps", "busbw_GBps"])
    theirs = nt[nt.placement == "in-place"][keys + ["busbw_GBps"]].rename(columns={"busbw_GBps": "theirs"})
    m = ours.merge(theirs, on=keys)
    m = m[m.size_bytes >= 2**20]
    if m.empty:
        return [S("nccl_tests.unmatched")]
    rows = [[r.hardware, r.world_size, r.dtype, size_str(r.size_bytes), r.busbw_loop_GBps, r.theirs,
             r.busbw_loop_GBps / r.theirs if r.theirs else float("nan"), r.busbw_GBps] for r in m.itertuples()]
    return [S("nccl_tests.lead"), "",
            table(["hardware", "ranks", "dtype", "size", "ours, same statistic (GB/s)", "all_reduce_perf (GB/s)",
                   "ours / theirs", "ours, median of max (GB/s)"], rows, fmt=lambda v: number(v, ".3g"))]


def overhead_section(ov: pd.DataFrame) -> list[str]:
    if ov.empty:
        return [S("overhead.none")]
    rows = []
    for (run, coll), g in ov[ov.moves_data].groupby(["run", "collective"], sort=False):
        g = g.sort_values("size_bytes")
        worst = g.loc[g.ratio.idxmin()]
        ok = [s for s in g.size_bytes if (g[g.size_bytes >= s].ratio >= 0.97).all()]
        rows.append([run.rsplit(",", 1)[0], coll, f"{size_str(g.size_bytes.min())}..{size_str(g.size_bytes.max())}",
                     f"{g.ratio.median():.3f}", f"{worst.ratio:.3f} at {size_str(worst.size_bytes)}",
                     size_str(ok[0]) if ok else "never", f"{g.ratio_min.min():.2f}..{g.ratio_max.max():.2f}"])
    return [" ".join(x for x in (S("overhead.lead"), findings.overhead_sentence(ov)) if x), "",
            table(["run", "collective", "sizes", "median ratio", "worst size", ">= 0.97 from", "rounds' spread"], rows),
            "", findings.idle_sentence(ov)]


def fit_row(r) -> list:
    """One row of the fit table: peak, the fit's figures (dashes without a bandwidth regime), flags."""
    f, peak = r.fit, num(r.peak) + ("" if r.kind == "busbw" else " (algbw)")
    if f is None or np.isnan(f.bw_GBps):
        fit = ["-"] * 6
    else:
        fit = [num(f.bw_GBps), num(f.alpha_us), num(f.alpha_step_us), size_str(f.n_half_bytes),
               f"{f.rms_rel_err:.0%}", f.extrapolated.upper() if f.extrapolated else "-"]
    return [r.run, r.collective, peak, r.peak_at, *fit, r.link, r.wrong]


def report(cfg: Config) -> str:
    results, out = results_folder(cfg.results), report_path(cfg.out)
    df = load(results, required=True)
    nccl_tests, overhead = load(results, "nccl_tests_*.csv", NCCL_TESTS), load(results, "overhead_*.csv", OVERHEAD)
    topologies = [read_text(p, "a topology section (topology.py)") for p in sorted(results.glob("topology_*.md"))]
    check_configs(results)  # every input checked before anything is drawn
    summ = summary(df)
    rel = lambda p: Path(os.path.relpath(p.resolve(), out.resolve().parent)).as_posix()  # noqa: E731 (--out anywhere)
    multi = summ[summ.ws > 1] if len(summ) else summ
    busbw, fit = [], ["No run with two or more ranks."]
    if plot_bandwidth(df, results / "busbw.png"):
        busbw = [f"![busbw vs size]({rel(results / 'busbw.png')})", "", findings.busbw_caption(df)]
    if len(multi):
        plot_time_fit(df, summ, results / "time_fit.png")
        fit = [S("fit.lead"), "", table(["run", "collective", "peak busbw (GB/s)", "at size", "B fit (GB/s)",
                                         "alpha (us)", "alpha/step (us)", "n_1/2", "fit err", "beyond the sweep",
                                         "link fraction", "wrong"], [fit_row(r) for r in multi.itertuples()]),
               "", f"![time vs size with the alpha-beta fit]({rel(results / 'time_fit.png')})", "", S("fit.caption")]
    else:
        (results / "time_fit.png").unlink(missing_ok=True)
    one_rank = []
    if plot_one_rank(df, results / "one_rank.png"):
        one_rank = ["## One rank: a local copy, not a link", "", S("one_rank.lead"), "",
                    table(["run", "collective", "peak algbw (GB/s)", "at size"],
                          [[r.run, r.collective, num(r.peak), r.peak_at] for r in summ[summ.ws == 1].itertuples()]),
                    "", f"![one-rank algbw]({rel(results / 'one_rank.png')})", "", S("one_rank.caption")]
    refs = [(r, p) for r in summ.itertuples() for p in matching(r.preset, r.collective, r.ws, r.nnodes)]
    published = [S("published.some"), "", table(
        ["run", "collective", "ours peak (GB/s)", "at size", "published (GB/s)", "setting", "source"],
        [[r.run, r.collective, num(r.peak), r.peak_at, num(p.busbw_GBps), p.setting, p.source] for r, p in refs])] \
        if refs else [S("published.none")]
    runs = [[run, g.hardware.iloc[0], g.timing.iloc[0], g.torch_version.iloc[0], g.nccl_version.iloc[0],
             g.git_commit.iloc[0], str(g.timestamp_utc.min())[:16], len(g), int(g.wrong.sum())]
            for run, g in df.groupby("run", sort=False)]
    text = fill(LAB_DIR / "report_template.md",
                findings=block(findings.opening(df, summ, nccl_tests), one_screen=True), busbw=busbw, fit=fit,
                one_rank=one_rank, published=published, nccl_tests=nccl_tests_section(df, nccl_tests),
                overhead=overhead_section(overhead),
                provenance=[S("provenance"), "", *measured_on.paragraph(
                    results, ["sweep_*.csv", "overhead_*.csv", "nccl_tests_*.csv"],
                    "`make allreduce-bench-gpu` (or `make allreduce-bench`)"),
                    table(["run", "hardware", "timing", "torch", "NCCL", "commit", "measured (UTC)", "rows",
                           "wrong"], runs)],
                definitions=S("definitions", plateau=PLATEAU),
                caveats=["### CPU caveats", "", S("caveat.cpu")] if (df.backend == "gloo").any() else [],
                predicted=S("predicted"))
    out.write_text(text)
    write_topology_index(topologies, out.parent / "TOPOLOGY.md")
    return text


def write_topology_index(topologies: list[str], path: Path) -> None:
    parts = [without_colours(text) for text in topologies]
    head = ["# Topology", "", "Generated by topology.py on rank 0 of each run (node 0 of multi-node runs), one section "
            "per machine kind in results/topology_<hw>.md; `make allreduce-bench-report` gathers them here.", ""]
    path.write_text("\n".join(head) + "\n" + ("\n".join(parts) if parts else "No topology recorded yet.\n"))


@guard_report
def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(Config, argv, description=__doc__, prog="report.py")
    report(cfg)
    print(f"wrote {cfg.out} and its plots", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
