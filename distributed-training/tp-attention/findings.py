"""tp-attention's sentences, picked by what the CSVs show (the words: findings_template.md).

    opening(corrs, benches)    # {file stem: correctness rows}, {file stem: benchmark rows}: the first lines
    noise_band(b)              # the spread of ours / plain block at t = 1 (identical work) in one file
    share_sentence(b)          # the communication share across h, and what this run can say about its trend

The benchmark CSVs keep one median per row, no spread over the iterations; the yardstick for a time ratio is
therefore the spread that identical work shows in the same run (ours / plain block at t = 1, where every
operator returns its input untouched): a ratio inside it is no difference. Times of more ranks than cores
are compared with nothing.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.findings import (Finding, Sentences, cores, first_sets, gaps_sentence, listing, oversubscribed,
                             short_hardware)

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")


def where(df: pd.DataFrame) -> str:
    r = df.iloc[0]
    ranks = int(df["world_size"].max())
    return short_hardware(r["hardware"]) + (f", {ranks} {r['backend']} ranks" if ranks > 1 else "")


def noise_band(b: pd.DataFrame) -> tuple[float, float] | None:
    t1 = b[(b["tp"] == 1) & b["ref_ms"].notna()]["ours_over_ref"]
    return (float(t1.min()), float(t1.max())) if len(t1) else None


def correctness_sentence(corrs: dict[str, pd.DataFrame], benches: dict[str, pd.DataFrame]) -> str:
    if not corrs:
        return S("correct.none")
    every = pd.concat(corrs.values(), ignore_index=True)
    fails = int((~every["pass"]).sum())
    b = pd.concat(benches.values(), ignore_index=True) if benches else pd.DataFrame(columns=["tp"])
    multi = b[b["tp"] > 1]
    exact = S("bytes", exact=int((multi["comm_bytes_ours"] == multi["comm_bytes_analytic"]).sum()),
              rows=len(multi)) if len(multi) else ""
    return S("correct.ok" if fails == 0 else "correct.failed", n=len(every), fails=fails,
             degrees=listing([str(t) for t in sorted(set(every["tp"]))]),
             where=first_sets([where(c) for c in corrs.values()], shown=2), exact=" " + exact if exact else "")


def dtensor_verdict(b: pd.DataFrame) -> str:
    """Ours / DTensor per row against the spread identical work shows in the same file."""
    band = noise_band(b)
    if band is None:
        return S("dtensor.no_band")
    r = b["ours_over_dtensor"]
    faster, slower = int((r < band[0]).sum()), int((r > band[1]).sum())
    kw = dict(band_lo=band[0], band_hi=band[1], n=len(r))
    if faster == len(r):
        return S("dtensor.faster", k=faster, **kw)
    if slower == len(r):
        return S("dtensor.slower", k=slower, **kw)
    if faster == slower == 0:
        return S("dtensor.same", **kw)
    return S("dtensor.mixed", faster=faster, slower=slower, same=len(r) - faster - slower, **kw)


def dtensor_sentence(benches: dict[str, pd.DataFrame]) -> str:
    parts = []
    for b in sorted(benches.values(), key=lambda b: -int(b["world_size"].max())):  # the most GPUs first
        if b["backend"].iloc[0] != "nccl" or oversubscribed(b):
            continue
        r = b["ours_over_dtensor"]
        parts.append(S("dtensor.gpu", hardware=short_hardware(b["hardware"].iloc[0]), median=r.median(), lo=r.min(),
                       hi=r.max(), n=len(r),
                       verdict=dtensor_verdict(b)))
    text = first_sets(parts) if parts else S("dtensor.none")
    cpu = [b for b in benches.values() if oversubscribed(b)]
    if cpu:
        text += S("dtensor.shared", ranks=int(cpu[0]["world_size"].max()), cores=cores(cpu[0]["hardware"].iloc[0]))
    return text + "."


def share_sentence(b: pd.DataFrame, seq: int) -> str:
    t = int(b["tp"].max())
    d = b[(b["tp"] == t) & ~b["sp"] & (b["seq_len"] == seq)].sort_values("d_model")
    shares = ", ".join(f"{s:.0%} at h = {h}" for h, s in zip(d["d_model"], d["comm_share"]))
    if oversubscribed(b):
        trend = S("share.shared", ranks=int(b["world_size"].max()), cores=cores(b["hardware"].iloc[0]))
    else:
        trend = S("share.falls") if d["comm_share"].is_monotonic_decreasing else S("share.not")
    return S("share", t=t, seq=seq, shares=shares, trend=trend)


def missing_sentence(benches: dict[str, pd.DataFrame]) -> str:
    every = pd.concat(benches.values(), ignore_index=True) if benches else pd.DataFrame(columns=["backend", "tp"])
    gpu = every[every["backend"] == "nccl"]
    gaps = [S("missing.multi_gpu")] if gpu.empty or gpu["tp"].max() < 2 else []
    return gaps_sentence(S, gaps + [S("missing.nodes"), S("missing.repeats")])


def opening(corrs: dict[str, pd.DataFrame], benches: dict[str, pd.DataFrame]) -> list[Finding]:
    return [Finding("Answer", correctness_sentence(corrs, benches)),
            Finding("Against DTensor", dtensor_sentence(benches)), Finding("What it means", S("meaning")),
            Finding("Not measured yet", missing_sentence(benches))]
