"""cp-attention's answer, from its CSVs: is the hand-rolled ring exact, what does it send and keep against PyTorch's
context parallelism, and what is not measured yet. The wording is findings_template.md's, picked by what the rows
show (common.findings); report.py puts these lines first.

    lines = opening(benches, corrs, public)    # {tag: benchmark rows}, {tag: correctness rows}, public API rows
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.findings import Finding, Sentences, gaps_sentence, listing

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")
TORCH = ("torch-allgather", "torch-alltoall")


def _sci(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def correctness_sentence(corrs: dict[str, pd.DataFrame]) -> str:
    if not corrs:
        return S("correct.none")
    c = pd.concat(corrs.values())
    ours = c[c["impl"] == "ours"]
    err = ours[["err_output", "err_dq", "err_dk", "err_dv"]].max(axis=1)
    fp32, fp64 = err[ours["dtype"] == "float32"], err[ours["dtype"] == "float64"]
    theirs = c[c["impl"].isin(TORCH)]
    key = "correct.ok" if ours["pass"].all() and ours["bytes_ok"].all() else "correct.failed"
    return S(key, ok=int(ours["pass"].sum()), n=len(ours), degrees=listing([str(n) for n in sorted(ours["cp"].unique())]),
             fp32=_sci(fp32.max()) if len(fp32) else "-", fp64=_sci(fp64.max()) if len(fp64) else "-",
             exact=int(ours["bytes_ok"].sum()), theirs_ok=int(theirs["pass"].sum()), theirs_n=len(theirs))


def _largest(b: pd.DataFrame) -> pd.DataFrame:
    return b[b["seq_len"] == b["seq_len"].max()]


def against_sentence(benches: dict[str, pd.DataFrame]) -> str:
    """Ours against PyTorch's ring at the largest N and sequence of each benchmark with N > 1."""
    parts = []
    for tag, b in benches.items():
        big = _largest(b)
        n = big["cp"].max()
        row = big[big["cp"] == n].set_index("impl")
        if n < 2 or "ours" not in row.index:
            continue
        o = row.loc["ours"]
        sent = {i: row.loc[i, "fwd_sent_bytes"] + row.loc[i, "bwd_sent_bytes"] for i in row.index}
        theirs = [t for t in TORCH if t in row.index]
        key = "against.gpu" if (b["backend"] == "nccl").all() else "against.cpu"
        parts.append(S(key, tag=tag, n=n, s=int(o["seq_len"]), heads=int(o["n_heads"]), kv=int(o["n_kv_heads"]),
                       time=listing([f"{t.removeprefix('torch-')} {o['time_ms'] / row.loc[t, 'time_ms']:.2f}"
                                     for t in theirs]),
                       bytes=listing([f"{sent['ours'] / sent[t]:.2f} of {t.removeprefix('torch-')}'s" for t in theirs]),
                       saved=" / ".join(f"{o['saved_bytes'] / row.loc[t, 'saved_bytes']:.2f}" for t in theirs)))
    return " ".join(parts) if parts else S("against.none")


def one_rank_sentence(benches: dict[str, pd.DataFrame]) -> str:
    for tag, b in benches.items():
        big = _largest(b)
        row = big[big["cp"] == 1].set_index("impl")
        if big["cp"].max() != 1 or not {"ours", "sdpa", TORCH[0]} <= set(row.index):
            continue
        o, t, s = row.loc["ours"], row.loc[TORCH[0]], row.loc["sdpa"]
        return S("one_rank", hardware=b["hardware"].iloc[0], s=int(o["seq_len"]), vs_sdpa=o["time_ms"] / s["time_ms"],
                 vs_torch=o["time_ms"] / t["time_ms"], saved=o["saved_bytes"] / t["saved_bytes"])
    return S("one_rank.none")


def public_sentence(public: pd.DataFrame | None) -> str:
    if public is None or not len(public):
        return ""
    cpu = public[public["device"] == "cpu"]
    if len(cpu) and not cpu["runs"].iloc[0]:
        return S("public.cpu", torch=cpu["torch_version"].iloc[0], error=cpu["error"].iloc[0])
    return ""


def missing_sentence(benches: dict[str, pd.DataFrame]) -> str:
    every = pd.concat(benches.values()) if benches else pd.DataFrame(columns=["backend", "cp"])
    gpu = every[every["backend"] == "nccl"]
    gaps = [S("missing.gpu")] if gpu.empty else []
    if gpu.empty or gpu["cp"].max() < 2:
        gaps.append(S("missing.multi_gpu"))
    gaps.append(S("missing.planner"))
    return gaps_sentence(S, gaps)


def opening(benches: dict[str, pd.DataFrame], corrs: dict[str, pd.DataFrame],
            public: pd.DataFrame | None) -> list[Finding]:
    lines = [Finding("Question", S("question")), Finding("Answer", correctness_sentence(corrs)),
             Finding("Against PyTorch", against_sentence(benches)), Finding("One GPU", one_rank_sentence(benches))]
    if (said := public_sentence(public)):
        lines.append(Finding("PyTorch's public API", said))
    return lines + [Finding("What it means", S("meaning")), Finding("Not measured yet", missing_sentence(benches))]
