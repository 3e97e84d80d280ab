"""REPORT.md and its plots, from the committed CSVs alone (results/correctness_*, bench_*, public_api_*).

    make cp-attention-report
    PYTHONPATH=distributed-training python distributed-training/cp-attention/report.py      # the same

The prose is report_template.md; this fills its {{sections}}: the answer first (sentences whose numbers
come from the CSVs), the plots, the tables, then the full rows in an appendix. One block per benchmark
file (cpu_ws4, h100_ws8, ...), each labelled with its hardware and versions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common import measured_on
from common.config import parse_config
from common.csvread import BadResults, Schema, guard_report, read_table, results_folder
from common.markdown import frame
from common.plotting import describe_runs, new_figure, save

LAB = Path(__file__).resolve().parent
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
    return [f"### `{tag}`", "", f"Measured on {_provenance(c)}. {len(c)} checks, {int((~c['pass']).sum())} failed. "
            "Cases: mha (4 heads of 16), gqa (8 query heads over 2 K/V heads), odd (6 over 3 heads of 12, batch 3, "
            "chunks of 7 tokens), gqa-fp64.", "", frame(table.rename(columns={"cp": "N"})), ""]


def _largest(b: pd.DataFrame) -> pd.DataFrame:
    return b[b["seq_len"] == b["seq_len"].max()]


def answer(benches: dict[str, pd.DataFrame], corrs: dict[str, pd.DataFrame], public: pd.DataFrame | None) -> list[str]:
    """The findings in a few sentences, every number from the CSVs."""
    out = []
    if corrs:
        c = pd.concat(corrs.values())
        ours = c[c["impl"] == "ours"]
        err = ours[["err_output", "err_dq", "err_dk", "err_dv"]].max(axis=1)
        fp32 = err[ours["dtype"] == "float32"]
        out.append(f"- **Correct.** The hand-rolled ring matched single-device causal attention in "
                   f"{int(ours['pass'].sum())} of {len(ours)} checks at N = {', '.join(map(str, sorted(ours['cp'].unique())))} "
                   f"(forward and the three gradients; worst fp32 error {_sci(fp32.max()) if len(fp32) else '-'}, "
                   f"worst fp64 {_sci(err[ours['dtype'] == 'float64'].max()) if (ours['dtype'] == 'float64').any() else '-'}), "
                   f"with grouped-query attention, and every rank sent exactly the formula's bytes in "
                   f"{int(ours['bytes_ok'].sum())} of {len(ours)}. PyTorch's ring passed "
                   f"{int(c[c['impl'].isin(TORCH)]['pass'].sum())} of {int(c['impl'].isin(TORCH).sum())} of the same checks.")
    for tag, b in benches.items():
        big = _largest(b)
        n = big["cp"].max()
        row = big[big["cp"] == n].set_index("impl")
        if n == 1 and {"ours", "sdpa", TORCH[0]} <= set(row.index):
            out.append(one_rank_line(tag, b, row))
        if n < 2 or "ours" not in row.index:
            continue
        o = row.loc["ours"]
        parts = [f"{t.removeprefix('torch-')} {o['time_ms'] / row.loc[t, 'time_ms']:.2f}" for t in TORCH if t in row.index]
        sent = {i: row.loc[i, "fwd_sent_bytes"] + row.loc[i, "bwd_sent_bytes"] for i in row.index}
        bytes_ = [f"{sent['ours'] / sent[t]:.2f} of {t.removeprefix('torch-')}'s" for t in TORCH if t in sent]
        saved = [f"{o['saved_bytes'] / row.loc[t, 'saved_bytes']:.2f}" for t in TORCH if t in row.index]
        where = "GPU" if (b["backend"] == "nccl").all() else "CPU, gloo: contention, not speed"
        out.append(f"- **Ours vs PyTorch, `{tag}`** ({where}), N = {n}, s = {int(o['seq_len'])}, {int(o['n_heads'])} "
                   f"query / {int(o['n_kv_heads'])} K/V heads: time ours / PyTorch's = {', '.join(parts)}; ours sends "
                   f"{' and '.join(bytes_)} bytes (it carries the K/V heads, not repeated ones, and N-1 dK/dV hops, "
                   f"not N); it saves {' / '.join(saved)} of PyTorch's bytes for backward.")
    if public is not None and len(public):
        cpu = public[public["device"] == "cpu"]
        if len(cpu) and not cpu["runs"].iloc[0]:
            out.append(f"- **PyTorch's public `context_parallel` does not run on CPU** (torch "
                       f"{cpu['torch_version'].iloc[0]}): `{cpu['error'].iloc[0]}`; the CPU rows compare with its ring "
                       "core instead.")
    if not any((b["backend"] == "nccl").any() for b in benches.values()):
        out.append("- **GPU: not measured yet.** `make cp-attention-gpu GPU=h100` (one GPU: N = 1; a node: N up to its "
                   "GPUs) writes the rows that compare time, peak memory and bytes with the public API under NCCL.")
    return out


def one_rank_line(tag: str, b: pd.DataFrame, row: pd.DataFrame) -> str:
    """N = 1 (one GPU): the wrappers' costs, the kernel held equal, and what each keeps in memory."""
    o, t, s = row.loc["ours"], row.loc[TORCH[0]], row.loc["sdpa"]
    peak = (f"; peak memory above the inputs ours / PyTorch's {o['peak_mem_bytes'] / t['peak_mem_bytes']:.2f}"
            if pd.notna(o["peak_mem_bytes"]) else "")
    return (f"- **One rank, `{tag}`** ({b['hardware'].iloc[0]}, torch {b['torch_version'].iloc[0]}), s = "
            f"{int(o['seq_len'])}, N = 1, every implementation on the same kernel: time ours / SDPA "
            f"{o['time_ms'] / s['time_ms']:.2f}, ours / PyTorch's CP {o['time_ms'] / t['time_ms']:.2f} (what the "
            f"wrappers cost around the kernel: nothing is sent at one rank); bytes saved for backward ours / PyTorch's "
            f"{o['saved_bytes'] / t['saved_bytes']:.2f} (its repeated K/V heads){peak}. Multi-GPU rows (N > 1, where "
            "the ring communicates): not measured yet, `make cp-attention-gpu` on a node of several GPUs.")


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
    return f"![time and bytes vs N, {tag}](plots/{name})"


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
    results, out = results_folder(cfg.results, "run `make cp-attention-run`"), Path(cfg.out)
    if not out.parent.is_dir():
        raise BadResults(f"--out {out}: the folder {out.parent} does not exist")
    files = {k: sorted(results.glob(f"{k}_*.csv")) for k in ("correctness", "bench", "public_api")}
    if not files["bench"] and not files["correctness"]:
        raise BadResults(f"no correctness_*.csv or bench_*.csv in {cfg.results}; run `make cp-attention-run`")
    corrs = {p.stem.removeprefix("correctness_"): read_table(p, CORRECTNESS) for p in files["correctness"]}
    benches = {p.stem.removeprefix("bench_"): read_table(p, BENCH) for p in files["bench"]}
    publics = [read_table(p, PUBLIC) for p in files["public_api"]]
    public = pd.concat(publics) if publics else None
    plots = out.parent / "plots"
    public_line = "-" if public is None else "; ".join(
        f"{r['api']} on {r['device']}: " + ("runs" if r["runs"] else f"refuses, `{r['error']}`")
        for _, r in public.iterrows())
    appendix = ["## Appendix: every benchmark row", ""]
    for tag, b in benches.items():
        cols = ["impl", "cp", "seq_len", "time_ms", "time_min_ms", "time_max_ms", "fwd_calls", "fwd_sent_bytes",
                "bwd_calls", "bwd_sent_bytes", "saved_bytes", "peak_mem_bytes", "max_rel_err"]
        appendix += [f"`{tag}`", "", frame(b[[c for c in cols if c in b]]), ""]
    sections = {
        "answer": answer(benches, corrs, public),
        "measured_on": measured_on.paragraph(results, ["correctness_*.csv", "bench_*.csv"],
                                             "`make cp-attention-gpu` (one GPU: N = 1; a node: N up to its GPUs)"),
        "plots": [_plot(b, tag, plots) for tag, b in benches.items() if b["cp"].max() > 1],
        "correctness": [line for tag, c in corrs.items() for line in correctness_section(c, tag)],
        "public_api": [f"- {public_line}"],
        "bench": [line for tag, b in benches.items() for line in bench_section(b, tag)],
        "appendix": appendix}
    text = (LAB / "report_template.md").read_text()
    out.write_text(re.sub(r"\{\{(\w+)\}\}", lambda m: "\n".join(sections[m.group(1)]).rstrip(), text))
    print(f"wrote {out.name} from {sum(map(len, files.values()))} CSVs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
