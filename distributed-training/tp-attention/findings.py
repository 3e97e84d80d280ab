"""tp-attention's answer, from its CSVs: does the hand-rolled Megatron block compute exactly what one device does,
with the collectives and bytes the paper counts, and what does it cost against PyTorch's DTensor? The wording is
findings_template.md's, picked by what the rows show (common.findings); report.py puts these lines first.

    lines = opening(corrs, benches)    # {file stem: correctness rows}, {file stem: benchmark rows}
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.findings import Finding, Sentences, gaps_sentence, listing

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")


def _where(df: pd.DataFrame) -> str:
    r = df.iloc[0]
    return f"{r['hardware']}, {int(df['world_size'].max())} {r['backend']} rank" + (
        "s" if df["world_size"].max() > 1 else "")


def correctness_sentence(corrs: dict[str, pd.DataFrame], benches: dict[str, pd.DataFrame]) -> str:
    if not corrs:
        return S("correct.none")
    every = pd.concat(corrs.values(), ignore_index=True)
    fails = int((~every["pass"]).sum())
    degrees = listing([str(t) for t in sorted(set(every["tp"]))])
    b = pd.concat(benches.values(), ignore_index=True) if benches else pd.DataFrame()
    multi = b[b["tp"] > 1] if len(b) else b
    exact = int((multi["comm_bytes_ours"] == multi["comm_bytes_analytic"]).sum()) if len(multi) else 0
    key = "correct.ok" if fails == 0 else "correct.failed"
    text = S(key, n=len(every), fails=fails, degrees=degrees, where=listing([_where(c) for c in corrs.values()]))
    if len(multi):
        text += " " + S("bytes", exact=exact, rows=len(multi))
    return text


def dtensor_sentence(benches: dict[str, pd.DataFrame]) -> str:
    parts = [S("dtensor.one", where=_where(b), median=b["ours_over_dtensor"].median(), lo=b["ours_over_dtensor"].min(),
               hi=b["ours_over_dtensor"].max()) for b in benches.values()]
    return S("dtensor", parts=listing(parts)) if parts else S("dtensor.none")


def share_sentence(benches: dict[str, pd.DataFrame]) -> str:
    multi = {k: b for k, b in benches.items() if (b["tp"] > 1).any()}
    if not multi:
        return S("share.none")
    name, b = max(multi.items(), key=lambda kv: kv[1]["tp"].max())
    t = int(b["tp"].max())
    seq = int(b["seq_len"].mode().iloc[0])
    d = b[(b["tp"] == t) & ~b["sp"] & (b["seq_len"] == seq)].sort_values("d_model")
    falls = d["comm_share"].is_monotonic_decreasing
    return S("share.cpu" if (b["backend"] == "gloo").all() else "share.gpu", where=_where(b), t=t,
             lo=d["comm_share"].min(), hi=d["comm_share"].max(), h_lo=int(d["d_model"].min()),
             h_hi=int(d["d_model"].max()), trend=S("share.falls") if falls else S("share.noisy"))


def overhead_sentence(benches: dict[str, pd.DataFrame]) -> str:
    gpu = [b for b in benches.values() if (b["backend"] == "nccl").all()]
    if not gpu:
        return S("overhead.cpu_only")
    b = gpu[0]
    t1 = b[(b["tp"] == 1) & b["ref_ms"].notna()]
    if t1.empty:
        return S("overhead.none")
    return S("overhead.gpu", where=_where(b), median=t1["ours_over_ref"].median(), lo=t1["ours_over_ref"].min(),
             hi=t1["ours_over_ref"].max(), n=len(t1))


def missing_sentence(benches: dict[str, pd.DataFrame]) -> str:
    every = pd.concat(benches.values(), ignore_index=True) if benches else pd.DataFrame(columns=["backend", "tp"])
    gpu = every[every["backend"] == "nccl"]
    gaps = []
    if gpu.empty:
        gaps.append(S("missing.gpu"))
    if gpu.empty or gpu["tp"].max() < 2:
        gaps.append(S("missing.multi_gpu"))
    gaps.append(S("missing.nodes"))
    return gaps_sentence(S, gaps)


def opening(corrs: dict[str, pd.DataFrame], benches: dict[str, pd.DataFrame]) -> list[Finding]:
    return [Finding("Question", S("question")), Finding("Answer", correctness_sentence(corrs, benches)),
            Finding("Against DTensor", dtensor_sentence(benches)), Finding("Communication", share_sentence(benches)),
            Finding("One GPU", overhead_sentence(benches)), Finding("What it means", S("meaning")),
            Finding("Not measured yet", missing_sentence(benches))]
