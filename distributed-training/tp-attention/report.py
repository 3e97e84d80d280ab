"""REPORT.md and its plots, from the committed CSVs alone (results/correctness_*.csv, results/bench_*.csv).

    make tp-attention-report
    PYTHONPATH=distributed-training python distributed-training/tp-attention/report.py      # the same

Every figure and table names the run it came from (hardware, ranks, backend, versions: the CSVs'
provenance columns). One section per benchmark CSV, so a CPU run and GPU runs sit side by side,
each labelled; the only numbers not read from a CSV are in the closing projection, which says so.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from comm_count import tp_bytes_per_layer
from common import measured_on
from common.csvread import Schema
from common.findings import block, cores, fill, measured_line, oversubscribed, sci
from common.hardware import PRESETS
from common.markdown import frame
from common.plotting import describe_runs, new_figure, save
from common.sweep_report import SweepReport, SweepTables, report_main
import findings
from findings import S

LAB = Path(__file__).resolve().parent
RUN_IT = "run `make tp-attention-run`"  # what a missing result says


_PROVENANCE = {"hardware": str, "world_size": int, "backend": str, "torch_version": str, "cuda_version": str,
               "nccl_version": str, "git_commit": str, "timestamp_utc": str}
# What the report reads from each kind of file (common.csvread checks it before pandas does).
CORRECTNESS = Schema("tp-attention correctness", {
    **_PROVENANCE, "case": str, "impl": str, "tp": int, "sp": bool, "dtype": str, "err_output": float,
    "err_params_max": float, "tolerance": float, "fwd_collectives": str, "bwd_collectives": str,
    "comm_bytes_measured": float, "comm_bytes_analytic": float, "pass": bool}, finite=True,
    key=("case", "impl", "tp", "sp", "dtype"))  # one row per check, as bench.py writes them
BENCH = Schema("tp-attention benchmark", {
    **_PROVENANCE, "tp": int, "sp": bool, "seq_len": int, "d_model": int, "batch": int, "dtype": str,
    "ref_ms": float, "ours_ms": float, "ours_compute_ms": float, "comm_share": float, "dtensor_ms": float,
    "ours_over_dtensor": float, "ours_over_ref": float, "ours_max_rel_err": float, "dtensor_max_rel_err": float,
    "verified": bool, "comm_bytes_ours": float, "comm_bytes_dtensor": float, "comm_bytes_analytic": float,
    "iters": int}, finite=True, key=("tp", "sp", "seq_len", "d_model"))  # one row per timed shape (bench.py)


def correctness_table(corr: pd.DataFrame, tag: str) -> list[str]:
    corr = corr.assign(impl=pd.Categorical(corr["impl"], ["ours", "dtensor", "dtensor-naive"], ordered=True),
                       sp=corr["sp"].map({True: "on", False: "off"}))
    g = corr.groupby(["impl", "tp", "sp", "dtype"], sort=True, observed=True)
    table = pd.DataFrame({
        "cases": g["case"].apply(lambda c: ", ".join(sorted(set(c)))),
        "output err": g["err_output"].max().map(sci),
        "worst grad err": g["err_params_max"].max().map(sci),
        "tolerance": g["tolerance"].max().map(sci),
        "fwd collectives": g["fwd_collectives"].apply(lambda c: " / ".join(sorted(set(c)))),
        "bwd collectives": g["bwd_collectives"].apply(lambda c: " / ".join(sorted(set(c)))),
        "bytes / analytic": (g["comm_bytes_measured"].sum() / g["comm_bytes_analytic"].sum()).map(
            lambda r: "-" if pd.isna(r) else f"{r:.2f}"),
        "pass": g["pass"].all().map(lambda ok: "yes" if ok else "**NO**"),
    }).reset_index()
    return [f"#### `{tag}`", "",
            S("correct.file", provenance=measured_line(corr), n=len(corr), failed=int((~corr["pass"]).sum())), "",
            frame(table.rename(columns={"tp": "t", "sp": "SP"})), ""]


def _plot_time_vs_tp(base: pd.DataFrame, tag: str, out: Path, footer: str) -> list[str]:
    """Time per block against t: only where two or more t were measured, and SP only where it was."""
    path = out / f"time_vs_tp_{tag}.png"
    if base["tp"].nunique() < 2:
        path.unlink(missing_ok=True)
        return []
    fig, ax = new_figure()
    with_sp = bool((base["sp"] & (base["tp"] > 1)).any())
    for impl, col in (("ours", "ours_ms"), ("DTensor", "dtensor_ms")):
        for sp, style in ((False, "-o"), (True, "--s")) if with_sp else ((False, "-o"),):
            d = base[(base["sp"] == sp) | (base["tp"] == 1)].sort_values("tp")  # SP at t = 1 is no SP
            ax.plot(d["tp"], d[col], style, label=f"{impl}{' + SP' if sp else ''}")
    ref = base["ref_ms"].dropna()
    if len(ref):
        ax.plot([1], [ref.iloc[0]], "k*", markersize=9, label="plain Block (t = 1)")
    ax.set(xscale="log", xlabel="TP degree t", ylabel="forward+backward per block (ms)",
           title=f"One block vs t (b={base['batch'].iloc[0]}, s={base['seq_len'].iloc[0]}, "
                 f"h={base['d_model'].iloc[0]}, {base['dtype'].iloc[0]})")
    ax.set_xticks(sorted(base["tp"].unique()), [str(t) for t in sorted(base["tp"].unique())])
    ax.minorticks_off()
    ax.legend()
    save(fig, path, footer=footer)
    return [f"![time vs t, {tag}]({out.name}/{path.name})", "",
            S("time_vs_tp.caption", tag=tag, sp=S("time_vs_tp.sp") if with_sp else ""), ""]


def _plot_sweeps(b: pd.DataFrame, seq: int, dm: int, tag: str, out: Path, footer: str) -> list[str]:
    fig, (a1, a2) = new_figure(1, 2)
    degrees = sorted(b["tp"].unique())
    for t in degrees:
        ours = b[(b["tp"] == t) & ~b["sp"]]
        by_s, by_d = ours[ours["d_model"] == dm].sort_values("seq_len"), ours[ours["seq_len"] == seq].sort_values(
            "d_model")
        a1.plot(by_s["seq_len"], by_s["ours_ms"], "-o", label=f"t = {t}")
        a2.plot(by_d["d_model"], by_d["ours_ms"], "-o", label=f"t = {t}")
    a1.set(xlabel="sequence length s", ylabel="ms per block (ours, no SP)", title=f"h = {dm}")
    a2.set(xlabel="hidden size h", title=f"s = {seq}")
    a1.legend()
    name = f"time_vs_shape_{tag}.png"
    save(fig, out / name, footer=footer)
    lines = "one line per t" if len(degrees) > 1 else f"t = {degrees[0]} only"
    return [f"![time vs shape, {tag}]({out.name}/{name})", "",
            S("shape.caption", tag=tag, dm=dm, seq=seq, lines=lines), ""]


def _plot_comm(b: pd.DataFrame, seq: int, tag: str, out: Path, footer: str) -> list[str]:
    fig, (a1, a2) = new_figure(1, 2)
    multi = b[b["tp"] > 1]
    for (t, sp), d in multi[multi["seq_len"] == seq].groupby(["tp", "sp"]):
        d = d.sort_values("d_model")
        a1.plot(d["d_model"], d["comm_share"] * 100, "--s" if sp else "-o", label=f"t = {t}{' + SP' if sp else ''}")
    a1.set(xlabel="hidden size h", ylabel="communication share of fwd+bwd (%)",
           title=f"1 - compute-only / total (ours, s = {seq})", ylim=(0, None))
    a1.legend()
    a2.plot(multi["comm_bytes_analytic"] / 2**20, multi["comm_bytes_ours"] / 2**20, "o", mfc="none", ms=8,
            label="ours")
    a2.plot(multi["comm_bytes_analytic"] / 2**20, multi["comm_bytes_dtensor"] / 2**20, "x", label="DTensor")
    top = multi["comm_bytes_analytic"].max() / 2**20
    a2.plot([0, top], [0, top], "k:", label="measured = 8bsh(t-1)/t")
    a2.set(xlabel="analytic MiB per rank per block", ylabel="measured MiB (ring model)", title="bytes per step")
    a2.legend()
    name = f"comm_{tag}.png"
    save(fig, out / name, footer=footer)
    off = int((multi["comm_bytes_ours"] != multi["comm_bytes_analytic"]).sum()
              + (multi["comm_bytes_dtensor"] != multi["comm_bytes_analytic"]).sum())
    exact = S("comm.exact") if off == 0 else S("comm.off", off=off, n=2 * len(multi))
    return [f"![communication, {tag}]({out.name}/{name})", "", S("comm.caption", tag=tag, exact=exact), ""]


def base_shape(b: pd.DataFrame) -> tuple[int, int, pd.DataFrame]:
    """The shape both sweeps share (s, h) and the rows at it, one per (t, SP)."""
    seq = int(b["seq_len"].mode().iloc[0])
    dm = int(b["d_model"].mode().iloc[0])
    return seq, dm, b[(b["seq_len"] == seq) & (b["d_model"] == dm)].sort_values(["tp", "sp"])


def main_table(b: pd.DataFrame) -> list[str]:
    seq, dm, base = base_shape(b)
    ref_ms = base["ref_ms"].dropna()
    speedup = (lambda ms: f"{ref_ms.iloc[0] / ms:.2f}") if len(ref_ms) else (lambda ms: "-")
    table = pd.DataFrame({
        "t": base["tp"], "SP": base["sp"].map({True: "on", False: "off"}),
        "ours ms": base["ours_ms"].map("{:.1f}".format),
        "compute-only ms": base["ours_compute_ms"].map("{:.1f}".format),
        "comm share": base["comm_share"].map("{:.0%}".format), "DTensor ms": base["dtensor_ms"].map("{:.1f}".format),
        "ours / DTensor": base["ours_over_dtensor"].map("{:.2f}".format),
        "plain Block / ours": base["ours_ms"].map(speedup),
        "MiB sent: ours / DTensor / 8bsh(t-1)/t": [f"{o / 2**20:.2f} / {d / 2**20:.2f} / {a / 2**20:.2f}" for o, d, a in
                                                   zip(base["comm_bytes_ours"], base["comm_bytes_dtensor"],
                                                       base["comm_bytes_analytic"])],
    })
    return [S("bench.lead", batch=b["batch"].iloc[0], seq=seq, dm=dm, dtype=b["dtype"].iloc[0],
              iters=b["iters"].iloc[0], provenance=measured_line(b)), "", frame(table), ""]


def bench_section(b: pd.DataFrame, tag: str, out: Path) -> list[str]:
    """One benchmark file: its table, plots and the sentences its rows carry."""
    footer = describe_runs(b, held={"dtype": b["dtype"].iloc[0], "batch": b["batch"].iloc[0]})
    seq, dm, base = base_shape(b)
    lines = [f"### Benchmark `{tag}`", ""]
    if oversubscribed(b):
        lines += [S("bench.shared", ranks=int(b["world_size"].max()), cores=cores(b["hardware"].iloc[0])), ""]
    lines += main_table(b) + _plot_time_vs_tp(base, tag, out, footer) + _plot_sweeps(b, seq, dm, tag, out, footer)
    if (b["tp"] > 1).any():
        lines += _plot_comm(b, seq, tag, out, footer) + [findings.share_sentence(b, seq), "", S(
            "bytes.body", ours=int((b["comm_bytes_ours"] == b["comm_bytes_analytic"]).sum()), n=len(b),
            dtensor=int((b["comm_bytes_dtensor"] == b["comm_bytes_analytic"]).sum()),
            verified="all passed" if b["verified"].all() else "SOME FAILED",
            worst=sci(max(b["ours_max_rel_err"].max(), b["dtensor_max_rel_err"].max()))), ""]
    ratio, t1 = b["ours_over_dtensor"], b[(b["tp"] == 1) & b["ref_ms"].notna()]["ours_over_ref"]
    if len(t1):
        lines += [S("ratios.body", median=ratio.median(), lo=ratio.min(), hi=ratio.max(), t1_median=t1.median(),
                    t1_lo=t1.min(), t1_hi=t1.max(), n=len(t1)), ""]
    return lines


def projection() -> str:
    """What the numbers mean at cluster scale; the projection uses the preset table, labelled as such."""
    h100 = PRESETS["h100"]
    b, s, h, t = 1, 4096, 8192, 8
    comm = tp_bytes_per_layer(b, s, h, t, 2)
    flops = 6 * 12 * h * h * b * s / t  # training FLOPs of one layer's matmuls per rank (6 N per token, N = 12h^2)
    nvlink_ms, net_ms = comm / (h100.nvlink_gbps * 1e9) * 1e3, comm / (h100.net_gbits / 8 * 1e9) * 1e3
    compute_ms = flops / (h100.bf16_tflops * 1e12) * 1e3
    return S("projection", h=h, s=s, b=b, t=t, mib=comm / 2**20, nvlink=h100.nvlink_gbps, nvlink_ms=nvlink_ms,
             net=h100.net_gbits, net_ms=net_ms, compute_ms=compute_ms, tflops=h100.bf16_tflops,
             inside=nvlink_ms / compute_ms, across=net_ms / compute_ms)


REPORT = SweepReport(LAB, CORRECTNESS, BENCH, RUN_IT)


def render(t: SweepTables) -> str:
    plots = t.out.parent / "plots"
    return fill(LAB / "report_template.md",
                findings=block(findings.opening(t.corrs, t.benches), one_screen=True),
                benchmarks=[line for tag, b in t.benches.items() for line in bench_section(b, tag, plots)],
                projection=projection(),
                provenance=[S("provenance"), "", *measured_on.paragraph(
                    t.results, ["correctness_*.csv", "bench_*.csv"], "`make tp-attention-gpu` (one GPU: wrapper "
                    "overhead) or `make tp-attention-run` (t up to the GPUs per node)")],
                caveats=["### CPU caveats", "", S("caveat.cpu")] if any(
                    (b["backend"] == "gloo").all() for b in t.benches.values()) else [],
                correctness=[S("correct.lead"), ""] + [line for tag, c in t.corrs.items()
                                                       for line in correctness_table(c, tag)],
                predicted=S("predicted"))


main = report_main(REPORT, render, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
