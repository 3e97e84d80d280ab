"""cp-attention's sentences, picked by what the CSVs show (the words: findings_template.md).

    opening(benches, corrs)    # {tag: benchmark rows}, {tag: correctness rows}: the report's first lines
    time_spreads(b)            # ours / each other implementation per (N, s), with the iterations' spread
    plot_caption(b, tag)       # the plot's caption, saying what the milliseconds can carry

Times are compared only by the noise rule (common.findings.Spread): a ratio whose spread over the timed
iterations holds 1 is no difference, and times of more ranks than cores are compared with nothing.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.findings import Finding, Sentences, Spread, cores, gaps_sentence, listing, oversubscribed, sci, spread

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")
TORCH = ("torch-allgather", "torch-alltoall")


def timing(r: pd.Series) -> Spread:
    return Spread(r["time_ms"], r["time_min_ms"], r["time_max_ms"])


def time_spreads(b: pd.DataFrame) -> dict[tuple[int, int, str], Spread]:
    """ours / every other implementation at each (N, s), with the spread the timed iterations allow."""
    out = {}
    for (n, s), d in b.groupby(["cp", "seq_len"], sort=True):
        d = d.set_index("impl")
        if "ours" in d.index:
            out.update({(n, s, i): timing(d.loc["ours"]).over(timing(d.loc[i])) for i in d.index if i != "ours"})
    return out


def sent(row: pd.Series) -> float:
    return row["fwd_sent_bytes"] + row["bwd_sent_bytes"]


def correctness_sentence(corrs: dict[str, pd.DataFrame]) -> str:
    if not corrs:
        return S("correct.none")
    c = pd.concat(corrs.values())
    ours = c[c["impl"] == "ours"]
    err = ours[["err_output", "err_dq", "err_dk", "err_dv"]].max(axis=1)
    fp32, fp64 = err[ours["dtype"] == "float32"], err[ours["dtype"] == "float64"]
    theirs = c[c["impl"].isin(TORCH)]
    key = "correct.ok" if ours["pass"].all() and ours["bytes_ok"].all() else "correct.failed"
    degrees = listing([str(n) for n in sorted(ours["cp"].unique())])
    return S(key, ok=int(ours["pass"].sum()), n=len(ours), degrees=degrees,
             fp32=sci(fp32.max()) if len(fp32) else "-", fp64=sci(fp64.max()) if len(fp64) else "-",
             exact=int(ours["bytes_ok"].sum()), theirs_ok=int(theirs["pass"].sum()), theirs_n=len(theirs))


def bytes_sentence(benches: dict[str, pd.DataFrame]) -> str:
    """What ours sends and keeps against PyTorch's, at the largest N and sequence measured (exact: no noise)."""
    with_n = [b for b in benches.values() if b["cp"].max() > 1]
    if not with_n:
        return S("bytes.none")
    b = max(with_n, key=lambda b: (b["cp"].max(), b["seq_len"].max()))
    row = b[(b["cp"] == b["cp"].max()) & (b["seq_len"] == b["seq_len"].max())].set_index("impl")
    o, theirs = row.loc["ours"], [t for t in TORCH if t in row.index]
    ratios = lambda f: listing(list(dict.fromkeys(f"{f(o) / f(row.loc[t]):.2f}" for t in theirs)))  # noqa: E731
    return S("bytes", n=int(o["cp"]), s=int(o["seq_len"]), heads=int(o["n_heads"]), kv=int(o["n_kv_heads"]),
             sent=ratios(sent), saved=ratios(lambda r: r["saved_bytes"]))


def time_sentence(benches: dict[str, pd.DataFrame]) -> str:
    """On each GPU file: at which lengths ours differs from PyTorch's CP beyond the iterations' spread."""
    parts = []
    for b in benches.values():
        if b["backend"].iloc[0] != "nccl" or oversubscribed(b):
            continue
        n = int(b["cp"].max())
        by_length: dict[int, list[Spread]] = {}
        for (m, s, impl), r in sorted(time_spreads(b).items()):
            if m == n and impl in TORCH:
                by_length.setdefault(s, []).append(r)
        same = [str(s) for s, rs in by_length.items() if not any(r.differs for r in rs)]
        apart = [S("time.differs", length=s, change=spread([r.mid - 1 for r in rs if r.differs], "{:+.1%}"))
                 for s, rs in by_length.items() if any(r.differs for r in rs)]
        verdict = ", ".join(([S("time.same", lengths=listing(same))] if same else []) + apart)
        parts.append(S("time.gpu", hardware=b["hardware"].iloc[0], n=n, verdict=verdict))
    text = "; ".join(parts) if parts else S("time.none")
    cpu = [b for b in benches.values() if oversubscribed(b)]
    if cpu:
        b = cpu[0]
        text += S("time.shared", ranks=int(b["world_size"].max()), cores=cores(b["hardware"].iloc[0]))
    return text + "."


def missing_sentence(benches: dict[str, pd.DataFrame]) -> str:
    gpu = [b for b in benches.values() if b["backend"].iloc[0] == "nccl"]
    gaps = [] if any(b["cp"].max() > 1 for b in gpu) else [S("missing.multi_gpu")]
    return gaps_sentence(S, gaps + [S("missing.repeats")])


def torch_bytes_equal(b: pd.DataFrame) -> bool:
    """Do PyTorch's two rotations send the same bytes at every N of the longest sequence (one line, not two)?"""
    big = b[b["seq_len"] == b["seq_len"].max()]
    sends = [tuple(sent(r) for _, r in big[big["impl"] == t].sort_values("cp").iterrows()) for t in TORCH]
    return sends[0] == sends[1]


def plot_caption(b: pd.DataFrame, tag: str) -> str:
    note = S("plot.shared", tag=tag, ranks=int(b["world_size"].max()), cores=cores(b["hardware"].iloc[0])) \
        if oversubscribed(b) else ""
    return S("plot.caption", equal=S("plot.equal") if torch_bytes_equal(b) else "",
             shared=" " + note if note else "")


def public_line(public: pd.DataFrame | None) -> str:
    if public is None or not len(public):
        return ""
    return "; ".join(S("public", dev=r["device"].upper(), verdict=S("public.runs") if r["runs"] else S(
        "public.refuses", torch=r["torch_version"], error=r["error"], device=r["device"].upper()))
        for _, r in public.iterrows()) + "."


def opening(benches: dict[str, pd.DataFrame], corrs: dict[str, pd.DataFrame]) -> list[Finding]:
    return [Finding("Answer", correctness_sentence(corrs)), Finding("Bytes", bytes_sentence(benches)),
            Finding("Time", time_sentence(benches)), Finding("What it means", S("meaning")),
            Finding("Not measured yet", missing_sentence(benches))]
