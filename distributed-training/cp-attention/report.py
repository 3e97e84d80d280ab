"""REPORT.md and its plots, from the committed CSVs alone (results/correctness_*, bench_*, public_api_*).

    make cp-attention-report
    PYTHONPATH=distributed-training python distributed-training/cp-attention/report.py      # the same

The skeleton is report_template.md, the sentences findings_template.md (picked by findings.py from what the
CSVs show); this fills the skeleton's {{sections}}: the answer first, the plots, the tables, then the audit
(provenance, the correctness grid, every row). One block per benchmark file (cpu_ws4, h200_ws1, ...), each
labelled with its hardware and versions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common import measured_on
from common.config import parse_config
from common.csvread import Schema, guard_report, report_path, results_folder, sweep_results, tables_by_tag
from common.findings import block, cores, fill, measured_line, oversubscribed, sci, spread
from common.markdown import frame
from common.plotting import describe_runs, new_figure, save
import findings
from findings import OURS, S, TORCH, heads_label, normalise

LAB = Path(__file__).resolve().parent
RUN_IT = "run `make cp-attention-run`"  # what a missing result says
MIB = 2**20
_PROVENANCE = {"hardware": str, "world_size": int, "backend": str, "torch_version": str, "cuda_version": str,
               "nccl_version": str, "git_commit": str, "timestamp_utc": str}
CORRECTNESS = Schema("cp-attention correctness", {
    **_PROVENANCE, "case": str, "impl": str, "kernel": str, "cp": int, "dtype": str, "err_output": float,
    "err_dq": float, "err_dk": float, "err_dv": float, "tolerance": float, "fwd_sent_bytes": int,
    "bwd_sent_bytes": int, "formula_fwd_bytes": int, "formula_bwd_bytes": int, "bytes_ok": bool, "pass": bool})
BENCH = Schema("cp-attention benchmark", {
    **_PROVENANCE, "impl": str, "cp": int, "seq_len": int, "n_heads": int, "n_kv_heads": int, "head_dim": int,
    "batch": int, "dtype": str, "time_ms": float, "time_min_ms": float, "time_max_ms": float, "fwd_sent_bytes": int,
    "bwd_sent_bytes": int,
    "formula_fwd_bytes": int, "formula_bwd_bytes": int, "saved_bytes": int, "peak_mem_bytes": float,
    "max_rel_err": float, "iters": int})
PUBLIC = Schema("cp-attention public API", {**_PROVENANCE, "api": str, "device": str, "runs": bool, "error": str})


@dataclass(frozen=True)
class ReportConfig:
    results: str = field(default=str(LAB / "results"), metadata={"help": "folder holding the CSVs"})
    out: str = field(default=str(LAB / "REPORT.md"), metadata={"help": "the report to write (plots: plots/ beside it)"})


def correctness_section(c: pd.DataFrame, tag: str) -> list[str]:
    c = normalise(c)
    err = c[["err_output", "err_dq", "err_dk", "err_dv"]].max(axis=1)
    order = {i: k for k, i in enumerate((*OURS, *TORCH))}
    g = c.assign(err=err, rank=c["impl"].map(order)).groupby(["rank", "impl", "kernel", "dtype", "cp"], sort=True)
    vs_fp32 = g["err_vs_fp32"].max().map(lambda x: sci(x) if pd.notna(x) else "-") if "err_vs_fp32" in c else "-"
    table = pd.DataFrame({
        "cases": g["case"].apply(lambda s: ", ".join(sorted(set(s)))),
        "worst error (out, dQ, dK, dV)": g["err"].max().map(sci),
        "tolerance": g["tolerance"].max().map(sci),
        "vs fp32": vs_fp32,
        "forward calls": g["fwd_calls"].apply(lambda s: " / ".join(sorted(set(s)))) if "fwd_calls" in c else "-",
        "backward calls": g["bwd_calls"].apply(lambda s: " / ".join(sorted(set(s)))) if "bwd_calls" in c else "-",
        "bytes = formula": g["bytes_ok"].all().map({True: "yes", False: "**NO**"}),
        "pass": g["pass"].all().map({True: "yes", False: "**NO**"})}).reset_index().drop(columns="rank")
    return [f"#### `{tag}`", "", S("correct.lead", provenance=measured_line(c), n=len(c), failed=int((~c["pass"]).sum())),
            "", frame(table.rename(columns={"cp": "N"})), ""]


STYLES = {"ring": ("-o", "tab:blue", 1.0), "allgather": ("-s", "tab:purple", 0.93),
          "ulysses": ("-D", "tab:red", 1.07), TORCH[0]: ("--v", "tab:orange", 0.97), TORCH[1]: (":^", "tab:green", 1.03)}


def _plot(b: pd.DataFrame, tag: str, out: Path) -> str:
    """Time (with the iterations' spread) against N, MHA at the longest sequence; bytes against N for every head
    count (MHA solid, GQA dashed), the formulas as x."""
    b = normalise(b)
    big = b[b["seq_len"] == b["seq_len"].max()]
    mha = big[big["n_heads"] == big["n_kv_heads"]] if (big["n_heads"] == big["n_kv_heads"]).any() else big
    first = mha[["n_heads", "n_kv_heads"]].iloc[0]
    mha = mha[(mha["n_heads"] == first["n_heads"]) & (mha["n_kv_heads"] == first["n_kv_heads"])]
    fig, (a1, a2) = new_figure(1, 2)
    for impl, d in mha.groupby("impl"):
        d = d.sort_values("cp")
        if impl == "sdpa":  # one point (N = 1): a reference line, not a series
            a1.axhline(d["time_ms"].iloc[0], color="k", ls=":", label="single-device SDPA")
            continue
        style, color, dodge = STYLES[impl]  # side by side on the log axis, so no bar hides another
        a1.errorbar(d["cp"] * dodge, d["time_ms"], yerr=[d["time_ms"] - d["time_min_ms"], d["time_max_ms"] - d["time_ms"]],
                    fmt=style, color=color, capsize=3, label=impl)
    drawn = set()  # PyTorch repeats K/V to the query heads: its bytes are one line whatever the K/V heads
    for (h, kv), heads in big[big["impl"] != "sdpa"].groupby(["n_heads", "n_kv_heads"], sort=False):
        for impl, d in heads.groupby("impl"):
            if impl == "allgather" or (impl == TORCH[1] and (heads["impl"] == TORCH[0]).any()):
                continue  # the ring's and PyTorch's allgather's lines: the same bytes
            d = d.sort_values("cp")
            line = (impl, tuple(findings.sent(d)))
            if line in drawn:
                continue
            drawn.add(line)
            style, color, _ = STYLES[impl]
            label = {"ring": f"ring = allgather, {heads_label(h, kv)}", TORCH[0]: "PyTorch, both rotations, any K/V"
                     }.get(impl, f"{impl}, {heads_label(h, kv)}")
            a2.plot(d["cp"], findings.sent(d) / MIB, "-" if h == kv or impl in TORCH else "--", marker=style[-1],
                    color=color, label=label)
            a2.plot(d["cp"], (d["formula_fwd_bytes"] + d["formula_bwd_bytes"]) / MIB, "kx", ms=5)
    s = int(big["seq_len"].iloc[0])
    a1.set(xscale="log", xlabel="CP degree N", ylabel="forward + backward (ms)",
           title=f"one attention layer, {heads_label(int(first['n_heads']), int(first['n_kv_heads']))}, s = {s}")
    a2.set(xscale="log", xlabel="CP degree N", ylabel="MiB sent per rank per step", title=f"bytes, s = {s} (x: formula)")
    for ax in (a1, a2):
        ax.set_xticks(sorted(big["cp"].unique()), [str(c) for c in sorted(big["cp"].unique())])
        ax.minorticks_off()
        ax.legend(fontsize=6)
    name = f"cp_{tag}.png"
    save(fig, out / name, footer=describe_runs(b, held={"s": s, "dtype": b["dtype"].iloc[0]}))
    return f"![time and bytes vs N, {tag}](plots/{name})\n\n" + findings.plot_caption(b, tag)


def bench_section(b: pd.DataFrame, tag: str) -> list[str]:
    b = normalise(b)
    spreads, rows = findings.time_spreads(b), []
    impls = [i for i in (*OURS, *TORCH) if i in set(b["impl"])]
    for (n, s, h, kv), d in b.groupby(["cp", "seq_len", "n_heads", "n_kv_heads"], sort=True):
        d = d.set_index("impl")
        cells = {"N": n, "s": s, "heads": f"{h}/{kv}", "ring ms": f"{d.loc['ring', 'time_ms']:.1f}"}
        for i in impls[1:]:
            cells[f"{i} / ring"] = findings.ratio(spreads[(n, s, h, kv, i)]) if (n, s, h, kv, i) in spreads else "-"
        cells["SDPA ms"] = f"{d.loc['sdpa', 'time_ms']:.1f}" if "sdpa" in d.index else "-"
        cells["MiB sent: " + " / ".join(impls)] = " / ".join(
            f"{findings.sent(d.loc[i]) / MIB:.2f}" if i in d.index else "-" for i in impls)
        saved = f"{d.loc[TORCH[0], 'saved_bytes'] / MIB:.2f}" if TORCH[0] in d.index else None
        cells["MiB saved: ring / PyTorch"] = f"{d.loc['ring', 'saved_bytes'] / MIB:.2f} / {saved}" if saved else "-"
        if d["peak_mem_bytes"].notna().any():
            cells["peak MiB: ring / PyTorch"] = (f"{d.loc['ring', 'peak_mem_bytes'] / MIB:.1f} / "
                                                 f"{d.loc[TORCH[0], 'peak_mem_bytes'] / MIB:.1f}")
        rows.append(cells)
    r0 = b.iloc[0]
    ok = b["verified"].dropna().astype(bool).all() if "verified" in b else True
    exact = ((b["fwd_sent_bytes"] == b["formula_fwd_bytes"]) & (b["bwd_sent_bytes"] == b["formula_bwd_bytes"])).all()
    note = S("bench.shared", ranks=int(b["world_size"].max()), cores=cores(r0["hardware"])) \
        if oversubscribed(b) else ""
    load = spread(list(b["load_1m"]), "{:.1f}") if "load_1m" in b and b["load_1m"].notna().any() else "not recorded"
    return [f"### `{tag}`", "", S("bench.lead", provenance=measured_line(b), batch=r0["batch"], dim=r0["head_dim"],
                                   dtype=r0["dtype"], iters=r0["iters"], load=load,
                                   verified="all passed" if ok else "SOME FAILED",
                                   exact="every row" if exact else "NOT every row", shared=" " + note if note else ""),
            "", frame(pd.DataFrame(rows)), ""]


@guard_report
def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(ReportConfig, argv, description=__doc__, prog="report.py")
    results, out = results_folder(cfg.results, RUN_IT), report_path(cfg.out)
    corrs, benches = sweep_results(results, CORRECTNESS, BENCH, RUN_IT)
    publics = tables_by_tag(results, "public_api", PUBLIC)
    text = fill(LAB / "report_template.md",
                findings=block(findings.opening(benches, corrs), one_screen=True),
                measured_on=measured_on.paragraph(results, ["correctness_*.csv", "bench_*.csv"],
                                                  "`make cp-attention-gpu` (one GPU: N = 1; a node: N up to its GPUs)"),
                plots=[_plot(b, tag, out.parent / "plots") for tag, b in benches.items() if b["cp"].max() > 1],
                correctness=[line for tag, c in corrs.items() for line in correctness_section(c, tag)],
                public_api=findings.public_line(pd.concat(publics.values()) if publics else None),
                bench=[line for tag, b in benches.items() for line in bench_section(b, tag)],
                bf16=findings.bf16_sentence(benches, corrs),
                predicted=S("predicted"))
    out.write_text(text)
    print(f"wrote {out.name} from {len(corrs) + len(benches) + len(publics)} CSVs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
