"""REPORT.md and its plots, from the committed CSVs alone (results/correctness_*.csv, results/bench_*.csv).

    make tp-attention-report
    PYTHONPATH=distributed-training python distributed-training/tp-attention/report.py      # the same

Every figure and table names the run it came from (hardware, ranks, backend, versions: the CSVs'
provenance columns). One section per benchmark CSV, so a CPU run and GPU runs sit side by side,
each labelled; the only numbers not read from a CSV are in the closing projection, which says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from comm_count import tp_bytes_per_layer
from common import measured_on
from common.config import parse_config
from common.csvread import BadResults, Schema, guard_report, read_table, results_folder
from common.findings import block
from common.hardware import PRESETS
from common.markdown import frame
from common.plotting import describe_runs, new_figure, save
import findings
from planner.evidence import vs_measured

LAB = Path(__file__).resolve().parent


_PROVENANCE = {"hardware": str, "world_size": int, "backend": str, "torch_version": str, "cuda_version": str,
               "nccl_version": str, "git_commit": str, "timestamp_utc": str}
# What the report reads from each kind of file (common.csvread checks it before pandas does).
CORRECTNESS = Schema("tp-attention correctness", {
    **_PROVENANCE, "case": str, "impl": str, "tp": int, "sp": bool, "dtype": str, "err_output": float,
    "err_params_max": float, "tolerance": float, "fwd_collectives": str, "bwd_collectives": str,
    "comm_bytes_measured": float, "comm_bytes_analytic": float, "pass": bool}, finite=True)
BENCH = Schema("tp-attention benchmark", {
    **_PROVENANCE, "tp": int, "sp": bool, "seq_len": int, "d_model": int, "batch": int, "dtype": str,
    "ref_ms": float, "ours_ms": float, "ours_compute_ms": float, "comm_share": float, "dtensor_ms": float,
    "ours_over_dtensor": float, "ours_over_ref": float, "ours_max_rel_err": float, "dtensor_max_rel_err": float,
    "verified": bool, "comm_bytes_ours": float, "comm_bytes_dtensor": float, "comm_bytes_analytic": float,
    "iters": int}, finite=True)


@dataclass(frozen=True)
class ReportConfig:
    results: str = field(default=str(LAB / "results"), metadata={"help": "folder holding the CSVs"})
    out: str = field(default=str(LAB / "REPORT.md"), metadata={"help": "the report to write (plots: plots/ beside it)"})


def _sci(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def _provenance(df: pd.DataFrame) -> str:
    r = df.iloc[0]
    return (f"{r['hardware']}, {r['world_size']} ranks, {r['backend']}, torch {r['torch_version']}, "
            f"CUDA {r['cuda_version']}, NCCL {r['nccl_version']}, commit {r['git_commit']}, {r['timestamp_utc'][:10]}")


def correctness_section(corr: pd.DataFrame) -> list[str]:
    corr = corr.assign(impl=pd.Categorical(corr["impl"], ["ours", "dtensor", "dtensor-naive"], ordered=True),
                       sp=corr["sp"].map({True: "on", False: "off"}))
    g = corr.groupby(["impl", "tp", "sp", "dtype"], sort=True, observed=True)
    table = pd.DataFrame({
        "cases": g["case"].apply(lambda c: ", ".join(sorted(set(c)))),
        "output err": g["err_output"].max().map(_sci),
        "worst grad err": g["err_params_max"].max().map(_sci),
        "tolerance": g["tolerance"].max().map(_sci),
        "fwd collectives": g["fwd_collectives"].apply(lambda c: " / ".join(sorted(set(c)))),
        "bwd collectives": g["bwd_collectives"].apply(lambda c: " / ".join(sorted(set(c)))),
        "bytes / analytic": (g["comm_bytes_measured"].sum() / g["comm_bytes_analytic"].sum()).map(
            lambda r: "-" if pd.isna(r) else f"{r:.2f}"),
        "pass": g["pass"].all().map(lambda ok: "yes" if ok else "**NO**"),
    }).reset_index()
    n_fail = int((~corr["pass"]).sum())
    return [
        "Max relative error = max|TP - ref| / max|ref| over the whole tensor (a bias: over its layer's [dW db]), "
        "max over ranks and over the cases in the row; `worst grad err` is over every parameter gradient of the "
        "single-device module. Tolerance: 1e-5 in fp32; in bf16 twice the single-device bf16 module's own "
        "distance from fp32 on the same input (verify.py explains why). Collectives are counted at the dispatcher "
        "for one block (attention + MLP). `dtensor-naive` is DTensor without PrepareModuleInput.", "",
        frame(table.rename(columns={"impl": "impl", "tp": "t", "sp": "SP"})), "",
        f"{len(corr)} checks, {n_fail} failed. Cases: mha (8 heads, d 64), gqa (16 query / 8 K/V heads, d 128), "
        "gqa-fused (one QKV weight sharded per head group), odd-bias (head_dim 7, d_ff 104, batch 3, sequence 13, "
        "biases), gqa-bf16.", ""]


def _plot_time_vs_tp(base: pd.DataFrame, tag: str, out: Path, footer: str) -> str | None:
    """Time per block against t: only where two or more t were measured, and SP only where it was."""
    stale = out / f"time_vs_tp_{tag}.png"
    if base["tp"].nunique() < 2:
        stale.unlink(missing_ok=True)
        return None
    fig, ax = new_figure()
    with_sp = (base["sp"] & (base["tp"] > 1)).any()
    for impl, col in (("ours", "ours_ms"), ("DTensor", "dtensor_ms")):
        for sp, style in ((False, "-o"), (True, "--s")) if with_sp else ((False, "-o"),):
            d = base[(base["sp"] == sp) | (base["tp"] == 1)].sort_values("tp")  # SP at t = 1 is no SP
            ax.plot(d["tp"], d[col], style, label=f"{impl}{' + SP' if sp else ''}")
    ref = base["ref_ms"].dropna()
    if len(ref):
        ax.plot([1], [ref.iloc[0]], "k*", markersize=9, label="plain Block (t = 1)")
    s, dm = base["seq_len"].iloc[0], base["d_model"].iloc[0]
    ax.set(xscale="log", xlabel="TP degree t", ylabel="forward+backward per block (ms)",
           title=f"One block vs t (b={base['batch'].iloc[0]}, s={s}, h={dm}, {base['dtype'].iloc[0]})")
    ax.set_xticks(sorted(base["tp"].unique()), [str(t) for t in sorted(base["tp"].unique())])
    ax.minorticks_off()
    ax.legend()
    name = f"time_vs_tp_{tag}.png"
    save(fig, out / name, footer=footer)
    return f"{out.name}/{name}"


def _plot_sweeps(b: pd.DataFrame, seq: int, dm: int, tag: str, out: Path, footer: str) -> str:
    fig, (a1, a2) = new_figure(1, 2)
    for t in sorted(b["tp"].unique()):
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
    return f"{out.name}/{name}"


def _plot_comm(b: pd.DataFrame, seq: int, tag: str, out: Path, footer: str) -> str:
    fig, (a1, a2) = new_figure(1, 2)
    multi = b[b["tp"] > 1]
    for (t, sp), d in multi[multi["seq_len"] == seq].groupby(["tp", "sp"]):
        d = d.sort_values("d_model")
        a1.plot(d["d_model"], d["comm_share"] * 100, "--s" if sp else "-o", label=f"t = {t}{' + SP' if sp else ''}")
    a1.set(xlabel="hidden size h", ylabel="communication share of fwd+bwd (%)",
           title=f"1 - compute-only / total (ours, s = {seq})", ylim=(0, None))
    a1.legend()
    a2.plot(multi["comm_bytes_analytic"] / 2**20, multi["comm_bytes_ours"] / 2**20, "o", label="ours")
    a2.plot(multi["comm_bytes_analytic"] / 2**20, multi["comm_bytes_dtensor"] / 2**20, "x", label="DTensor")
    top = multi["comm_bytes_analytic"].max() / 2**20
    a2.plot([0, top], [0, top], "k:", label="measured = 8bsh(t-1)/t")
    a2.set(xlabel="analytic MiB per rank per block", ylabel="measured MiB (ring model)", title="bytes per step")
    a2.legend()
    name = f"comm_{tag}.png"
    save(fig, out / name, footer=footer)
    return f"{out.name}/{name}"


def _share_trend(b: pd.DataFrame, seq: int) -> str:
    """The communication share at the largest t (no SP) across the hidden sizes, and whether it falls with h."""
    t = b["tp"].max()
    d = b[(b["tp"] == t) & ~b["sp"] & (b["seq_len"] == seq)].sort_values("d_model")
    shares = ", ".join(f"{s:.0%} at h = {h}" for h, s in zip(d["d_model"], d["comm_share"]))
    falls = d["comm_share"].is_monotonic_decreasing
    return (f"{shares} (t = {t}, s = {seq}). Per layer the bytes grow as h and the matmul FLOPs as h^2, so the "
            f"share should fall as h grows; " + ("in this run it does" if falls else
                                                 "in this run it does not: the timing noise is larger than the trend"))


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
    return [f"Forward+backward of one block at b = {b['batch'].iloc[0]}, s = {seq}, h = {dm} ({b['dtype'].iloc[0]}), "
            f"median of {b['iters'].iloc[0]} iterations of the max over ranks, implementations interleaved "
            f"({_provenance(b)}):", "", frame(table), ""]


def time_plot(b: pd.DataFrame, tag: str, out: Path) -> list[str]:
    footer = describe_runs(b, held={"dtype": b["dtype"].iloc[0], "batch": b["batch"].iloc[0]})
    png = _plot_time_vs_tp(base_shape(b)[2], tag, out, footer)
    if png is None:
        return []
    return [f"![time vs t]({png})", "",
            "*What to see:* one block's forward+backward time as the TP degree t grows, ours against DTensor (and "
            "the plain block at t = 1): compute shrinks as 1/t, the collectives do not, so the curve flattens where "
            "communication takes over." + (" On CPU the ranks share the cores: read the shape, not the ms."
                                            if (b["backend"] == "gloo").all() else ""), ""]


def bench_section(b: pd.DataFrame, tag: str, out: Path, shown: bool) -> list[str]:
    """One benchmark file: its table (unless it is the report's main table), plots and sentences."""
    footer = describe_runs(b, held={"dtype": b["dtype"].iloc[0], "batch": b["batch"].iloc[0]})
    seq, dm, _ = base_shape(b)
    t1 = b[b["tp"] == 1].sort_values(["seq_len", "d_model"])
    lines = [f"### Benchmark `{tag}`", ""]
    lines += ["Its table is at the top of this report.", ""] if shown else main_table(b) + time_plot(b, tag, out)
    lines += [f"![time vs shape]({_plot_sweeps(b, seq, dm, tag, out, footer)})", "",
              "*What to see:* ours (no SP) against sequence length at the common h (left) and against h at the common "
              "s (right), one line per t.", ""]
    if (b["tp"] > 1).any():
        lines += [f"![communication]({_plot_comm(b, seq, tag, out, footer)})", "",
                  "*What to see:* left, the share of the block's time spent in collectives per t and h; right, the "
                  "bytes each rank sent against 8bsh(t-1)/t (on the dotted line: exact).", "",
                  f"Communication share, measured: {_share_trend(b, seq)}.", "",
                  f"Bytes: measured = the collectives' tensors counted at the dispatcher during one step, times the "
                  f"ring factors; it equals the analytic 8bsh(t-1)/t in "
                  f"{int((b['comm_bytes_ours'] == b['comm_bytes_analytic']).sum())} of {len(b)} rows for ours and "
                  f"{int((b['comm_bytes_dtensor'] == b['comm_bytes_analytic']).sum())} of {len(b)} for DTensor "
                  f"(t = 1 rows move nothing). Every row was verified against the plain Block first: "
                  f"{'all passed' if b['verified'].all() else 'SOME FAILED'} (worst error "
                  f"{_sci(max(b['ours_max_rel_err'].max(), b['dtensor_max_rel_err'].max()))}).", ""]
    ratio = b["ours_over_dtensor"]
    lines += [f"Ours / DTensor time: {ratio.median():.2f} in the median row (range {ratio.min():.2f} to "
              f"{ratio.max():.2f})."]
    if len(t1) and t1["ref_ms"].notna().any():
        over = t1["ours_over_ref"]
        lines[-1] += (f" Ours / plain Block at t = 1, where every operator returns its input untouched: median "
                      f"{over.median():.2f} over {len(t1)} shapes (range {over.min():.2f} to {over.max():.2f})"
                      + (", timing noise on this shared CPU." if (b["backend"] == "gloo").all() else "."))
    return lines + [""]


def meaning_section() -> list[str]:
    """What the numbers mean at cluster scale; the projection uses the preset table, labelled as such."""
    h100 = PRESETS["h100"]
    b, s, h, t = 1, 4096, 8192, 8
    comm = tp_bytes_per_layer(b, s, h, t, 2)
    flops = 6 * 12 * h * h * b * s / t  # training FLOPs of one layer's matmuls per rank (6 N per token, N = 12h^2)
    nvlink_ms, net_ms = comm / (h100.nvlink_gbps * 1e9) * 1e3, comm / (h100.net_gbits / 8 * 1e9) * 1e3
    compute_ms = flops / (h100.bf16_tflops * 1e12) * 1e3
    return [
        "## What it means", "",
        "Tensor parallelism moves activations, not weights: 8·b·s·h·(t-1)/t elements per layer per rank per "
        "step (Narayanan et al., SC21, arXiv 2104.04473, section 3.2), while each rank's compute shrinks as "
        "1/t. The bytes do not shrink with t, and they sit on the critical path: each of the four collectives "
        "per layer produces the tensor the next operation consumes (Megatron-LM 2019, section 3; sequence "
        "parallelism changes their kind, not their bytes, Korthikanti et al. 2022, section 4.2.2). Production "
        "stacks hide part of it: Megatron-Core overlaps the backward all-reduce with the weight-gradient GEMM, "
        "torchtitan's async TP splits the matmuls to overlap them with the collectives. This lab overlaps "
        "nothing, so its communication share is the exposed cost.", "",
        f"*Projection, not a measurement* (formula above and the preset table in common/hardware.py): one layer "
        f"at h = {h}, s = {s}, b = {b}, bf16, t = {t} sends {comm / 2**20:.0f} MiB per rank per step. Over "
        f"NVLink ({h100.nvlink_gbps:.0f} GB/s per direction on H100) that is {nvlink_ms:.1f} ms; over the "
        f"{h100.net_gbits:.0f} Gbit/s network link per GPU it is {net_ms:.1f} ms, against {compute_ms:.1f} ms "
        f"of matmuls per rank even at the {h100.bf16_tflops:.0f} TFLOP/s peak. Inside the NVLink domain "
        f"communication is a fraction of compute; across nodes it is several times compute.", "",
        "Hence SC21's Takeaway #1: \"tensor model parallelism should generally be used up to degree g when "
        "using g-GPU servers, and then pipeline model parallelism can be used to scale up to larger models "
        "across servers\"; their 162B-parameter sweep on 64 A100s peaks at t = 8, the GPUs of one node (Fig. 13). "
        "Megatron-LM 2019 kept 77% of linear scaling at 8-way TP inside one DGX-2H (section 5.1), and lost more "
        "with more heads (smaller matmuls; Table 7). That is the other limit: at a fixed h a larger t leaves "
        "each rank thinner matmuls for the same bytes, so the communication share grows with t and shrinks "
        "with h.", ""]


CPU_CAVEAT = ("**CPU / gloo.** Every rank is a process sharing a few cores and gloo runs over loopback TCP: the "
              "times measure core contention and gloo's latency, not tensor-parallel speedups, and t = 1 runs a full "
              "block on every rank at once. gloo implements reduce-scatter as an all-reduce plus a local chunk "
              "(pytorch/pytorch#118911), so the sequence-parallel reduce-scatters move twice the ring's bytes there. "
              "Read the shapes of the curves and the counts, not the milliseconds.")


@guard_report
def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(ReportConfig, argv, description=__doc__, prog="report.py")
    results, out = results_folder(cfg.results, "run `make tp-attention-run`"), Path(cfg.out)
    if not out.parent.is_dir():
        raise BadResults(f"--out {out}: the folder {out.parent} does not exist")
    corr_files, bench_files = sorted(results.glob("correctness_*.csv")), sorted(results.glob("bench_*.csv"))
    if not bench_files and not corr_files:
        raise BadResults(f"no correctness_*.csv or bench_*.csv in {cfg.results}; run `make tp-attention-run`")
    corrs = {p.stem.removeprefix("correctness_"): read_table(p, CORRECTNESS) for p in corr_files}  # checked first
    benches = {p.stem.removeprefix("bench_"): read_table(p, BENCH) for p in bench_files}
    plots = out.parent / "plots"
    lines = ["# tp-attention: hand-rolled Megatron tensor parallelism, verified and measured", ""]
    lines += block(findings.opening(corrs, benches))
    main_tag = max(benches, key=lambda k: (benches[k]["tp"].nunique(), k)) if benches else None
    if main_tag:
        lines += time_plot(benches[main_tag], main_tag, plots) + main_table(benches[main_tag])
    lines += ["## Benchmarks", ""]
    for tag, b in benches.items():
        lines += bench_section(b, tag, plots, shown=tag == main_tag)
    lines += meaning_section()
    lines += ["## Appendix: the audit behind the answer", "", "### Provenance", "",
              "Generated by report.py from the CSVs in results/ (do not edit); the runbook is README.md; the opening "
              "lines' wording is `findings_template.md`, picked by `findings.py` from what the CSVs show.", "",
              *measured_on.paragraph(results, ["correctness_*.csv", "bench_*.csv"],
                                     "`make tp-attention-gpu` (one GPU: wrapper overhead) or `make tp-attention-run` "
                                     "(t up to the GPUs per node)")]
    if any((b["backend"] == "gloo").all() for b in benches.values()):
        lines += ["### CPU caveats", "", CPU_CAVEAT, ""]
    for tag, corr in corrs.items():
        lines += [f"### Correctness `{tag}`", "", f"Measured on {_provenance(corr)}.", "", *correctness_section(corr)]
    lines += [vs_measured.section("tp-attention", results, "###"), ""]  # the planner's prediction beside every GPU row
    out.write_text("\n".join(lines).rstrip() + "\n")
    print(f"wrote {out.name} from {len(corr_files) + len(bench_files)} CSVs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
