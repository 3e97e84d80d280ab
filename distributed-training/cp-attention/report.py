"""REPORT.md and its plots, from the committed CSVs alone (results/correctness_*, bench_*, public_api_*).

    make cp-attention-report
    PYTHONPATH=distributed-training python distributed-training/cp-attention/report.py      # the same

The prose is report_template.md; this fills its {{sections}}: the answer first (findings.py, worded by
findings_template.md from what the CSVs show), the plots, the tables, then the audit in an appendix (provenance,
the correctness grid, every row). One block per benchmark
file (cpu_ws4, h100_ws8, ...), each labelled with its hardware and versions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common import measured_on
from common.config import parse_config
from common.csvread import Schema, guard_report, report_path, results_folder, sweep_results, tables_by_tag
from common.findings import block
from common.markdown import frame
from common.plotting import describe_runs, new_figure, save
import findings

LAB = Path(__file__).resolve().parent
RUN_IT = "run `make cp-attention-run`"  # what a missing result says
MIB = 2**20
TORCH = ("torch-allgather", "torch-alltoall")
_PROVENANCE = {"hardware": str, "world_size": int, "backend": str, "torch_version": str, "cuda_version": str,
               "nccl_version": str, "git_commit": str, "timestamp_utc": str}
CORRECTNESS = Schema("cp-attention correctness", {
    **_PROVENANCE, "case": str, "impl": str, "kernel": str, "cp": int, "dtype": str, "err_output": float,
    "err_dq": float, "err_dk": float, "err_dv": float, "tolerance": float, "fwd_sent_bytes": int,
    "bwd_sent_bytes": int, "formula_fwd_bytes": int, "formula_bwd_bytes": int, "bytes_ok": bool, "pass": bool})
BENCH = Schema("cp-attention benchmark", {
    **_PROVENANCE, "impl": str, "cp": int, "seq_len": int, "n_heads": int, "n_kv_heads": int, "head_dim": int,
    "batch": int, "dtype": str, "time_ms": float, "fwd_sent_bytes": int, "bwd_sent_bytes": int,
    "formula_fwd_bytes": int, "formula_bwd_bytes": int, "saved_bytes": int, "peak_mem_bytes": float,
    "max_rel_err": float, "iters": int})
PUBLIC = Schema("cp-attention public API", {**_PROVENANCE, "api": str, "device": str, "runs": bool, "error": str})


@dataclass(frozen=True)
class ReportConfig:
    results: str = field(default=str(LAB / "results"), metadata={"help": "folder holding the CSVs"})
    out: str = field(default=str(LAB / "REPORT.md"), metadata={"help": "the report to write (plots: plots/ beside it)"})


def _provenance(df: pd.DataFrame) -> str:
    r = df.iloc[0]
    return (f"{r['hardware']}, {r['world_size']} ranks, {r['backend']}, torch {r['torch_version']}, "
            f"CUDA {r['cuda_version']}, commit {r['git_commit']}, {r['timestamp_utc'][:10]}")


def _sci(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def _sent(b: pd.DataFrame) -> pd.Series:
    return b["fwd_sent_bytes"] + b["bwd_sent_bytes"]


def correctness_section(c: pd.DataFrame, tag: str) -> list[str]:
    err = c[["err_output", "err_dq", "err_dk", "err_dv"]].max(axis=1)
    g = c.assign(err=err).groupby(["impl", "kernel", "dtype", "cp"], sort=True)
    table = pd.DataFrame({
        "cases": g["case"].apply(lambda s: ", ".join(sorted(set(s)))),
        "worst error (out, dQ, dK, dV)": g["err"].max().map(_sci), "tolerance": g["tolerance"].max().map(_sci),
        "forward calls": g["fwd_calls"].apply(lambda s: " / ".join(sorted(set(s)))) if "fwd_calls" in c else "-",
        "backward calls": g["bwd_calls"].apply(lambda s: " / ".join(sorted(set(s)))) if "bwd_calls" in c else "-",
        "bytes = formula": g["bytes_ok"].all().map({True: "yes", False: "**NO**"}),
        "pass": g["pass"].all().map({True: "yes", False: "**NO**"})}).reset_index()
    return [f"#### `{tag}`", "", f"Measured on {_provenance(c)}. {len(c)} checks, {int((~c['pass']).sum())} failed. "
            "Cases: mha (4 heads of 16), gqa (8 query heads over 2 K/V heads), odd (6 over 3 heads of 12, batch 3, "
            "chunks of 7 tokens), gqa-fp64.", "", frame(table.rename(columns={"cp": "N"})), ""]


def _largest(b: pd.DataFrame) -> pd.DataFrame:
    return b[b["seq_len"] == b["seq_len"].max()]


def _plot(b: pd.DataFrame, tag: str, out: Path) -> str:
    big = _largest(b)
    fig, (a1, a2) = new_figure(1, 2)
    for impl, d in big.groupby("impl"):
        d = d.sort_values("cp")
        if impl == "sdpa":  # one point (N = 1): a reference line, not a series
            a1.axhline(d["time_ms"].iloc[0], color="k", ls=":", label="single-device SDPA")
            continue
        a1.plot(d["cp"], d["time_ms"], "-o", label=impl)
        a2.plot(d["cp"], _sent(d) / MIB, "-o", label=f"{impl} (counted)")
        a2.plot(d["cp"], (d["formula_fwd_bytes"] + d["formula_bwd_bytes"]) / MIB, "kx", ms=4)
    s = int(big["seq_len"].iloc[0])
    a1.set(xscale="log", xlabel="CP degree N", ylabel="forward + backward (ms)", title=f"one attention layer, s = {s}")
    a2.set(xscale="log", xlabel="CP degree N", ylabel="MiB sent per rank per step", title="bytes (x: the formula)")
    for ax in (a1, a2):
        ax.set_xticks(sorted(big["cp"].unique()), [str(c) for c in sorted(big["cp"].unique())])
        ax.minorticks_off()
        ax.legend(fontsize=7)
    name = f"cp_{tag}.png"
    save(fig, out / name, footer=describe_runs(b, held={"s": s, "dtype": b["dtype"].iloc[0]}))
    return (f"![time and bytes vs N, {tag}](plots/{name})\n\n*What to see:* left, one attention layer's forward + "
            "backward time per implementation as the CP degree N grows (dotted: single-device SDPA); right, the MiB "
            "each rank sent per step, counted, against the formula (x). On CPU the ranks share the cores: read the "
            "bytes, not the milliseconds.")


def bench_section(b: pd.DataFrame, tag: str) -> list[str]:
    rows = []
    for (n, s), d in b.groupby(["cp", "seq_len"], sort=True):
        d = d.set_index("impl")
        o = d.loc["ours"]
        cells = {"N": n, "s": s, "ours ms": f"{o['time_ms']:.1f}"}
        for t in TORCH:
            if t in d.index:
                cells[f"{t.removeprefix('torch-')} ms"] = f"{d.loc[t, 'time_ms']:.1f}"
                cells[f"ours / {t.removeprefix('torch-')}"] = f"{o['time_ms'] / d.loc[t, 'time_ms']:.2f}"
        cells["SDPA ms"] = f"{d.loc['sdpa', 'time_ms']:.1f}" if "sdpa" in d.index else "-"
        cells["MiB sent: ours / allgather / alltoall"] = " / ".join(
            f"{(d.loc[i, 'fwd_sent_bytes'] + d.loc[i, 'bwd_sent_bytes']) / MIB:.2f}" for i in ("ours", *TORCH)
            if i in d.index)
        cells["MiB saved: ours / PyTorch"] = (f"{o['saved_bytes'] / MIB:.2f} / "
                                              f"{d.loc[TORCH[0], 'saved_bytes'] / MIB:.2f}" if TORCH[0] in d.index else "-")
        if d["peak_mem_bytes"].notna().any():
            cells["peak MiB: ours / PyTorch"] = (f"{o['peak_mem_bytes'] / MIB:.1f} / "
                                                 f"{d.loc[TORCH[0], 'peak_mem_bytes'] / MIB:.1f}")
        rows.append(cells)
    r0 = b.iloc[0]
    ok = b["verified"].dropna().astype(bool).all() if "verified" in b else True
    exact = ((b["fwd_sent_bytes"] == b["formula_fwd_bytes"]) & (b["bwd_sent_bytes"] == b["formula_bwd_bytes"])).all()
    return [f"### `{tag}`", "", f"Measured on {_provenance(b)}; b = {r0['batch']}, {r0['n_heads']} query heads over "
            f"{r0['n_kv_heads']} K/V heads of {r0['head_dim']}, {r0['dtype']}, {r0['iters']} timed iterations. Every "
            f"row was verified first ({'all passed' if ok else 'SOME FAILED'}); counted bytes equal the formulas in "
            f"{'every row' if exact else 'NOT every row'}.", "", frame(pd.DataFrame(rows)), ""]


@guard_report
def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(ReportConfig, argv, description=__doc__, prog="report.py")
    results, out = results_folder(cfg.results, RUN_IT), report_path(cfg.out)
    corrs, benches = sweep_results(results, CORRECTNESS, BENCH, RUN_IT)
    publics = tables_by_tag(results, "public_api", PUBLIC)
    public = pd.concat(publics.values()) if publics else None
    plots = out.parent / "plots"
    public_line = "-" if public is None else "; ".join(
        f"{r['api']} on {r['device']}: " + ("runs" if r["runs"] else f"refuses, `{r['error']}`")
        for _, r in public.iterrows())
    appendix = ["### Every benchmark row", ""]
    for tag, b in benches.items():
        cols = ["impl", "cp", "seq_len", "time_ms", "time_min_ms", "time_max_ms", "fwd_calls", "fwd_sent_bytes",
                "bwd_calls", "bwd_sent_bytes", "saved_bytes", "peak_mem_bytes", "max_rel_err"]
        appendix += [f"`{tag}`", "", frame(b[[c for c in cols if c in b]]), ""]
    sections = {
        "findings": block(findings.opening(benches, corrs, public)),
        "measured_on": measured_on.paragraph(results, ["correctness_*.csv", "bench_*.csv"],
                                             "`make cp-attention-gpu` (one GPU: N = 1; a node: N up to its GPUs)"),
        "plots": [_plot(b, tag, plots) for tag, b in benches.items() if b["cp"].max() > 1],
        "correctness": [line for tag, c in corrs.items() for line in correctness_section(c, tag)],
        "public_api": [f"- {public_line}"],
        "bench": [line for tag, b in benches.items() for line in bench_section(b, tag)],
        "appendix": appendix}
    text = (LAB / "report_template.md").read_text()
    out.write_text(re.sub(r"\{\{(\w+)\}\}", lambda m: "\n".join(sections[m.group(1)]).rstrip(), text))
    print(f"wrote {out.name} from {len(corrs) + len(benches) + len(publics)} CSVs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
