"""cp-attention's sentences, picked by what the CSVs show (the words: findings_template.md).

    opening(benches, corrs)    # {tag: benchmark rows}, {tag: correctness rows}: the report's first lines
    byte_winners(b)            # the design that sends least per (N, heads) at the longest sequence, and the others' ratio
    time_spreads(b)            # every implementation / the ring per (N, s, heads), with the iterations' spread
    bf16_sentence(...)         # why the H200's bf16 rows put ours 32-65x further from SDPA than PyTorch's CP

Times are compared only by the noise rule (common.findings.Spread): a ratio whose spread over the timed
iterations holds 1 is no difference, and times of more ranks than cores are compared with nothing. Rows from
before the three designs name the ring "ours": normalise() reads them as the ring's.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.findings import Finding, Sentences, Spread, cores, listing, oversubscribed, sci, short_hardware, spread

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")
OURS = ("ring", "allgather", "ulysses")
TORCH = ("torch-allgather", "torch-alltoall")
NAMES = {"ring": "ring", "allgather": "all-gather", "ulysses": "Ulysses", "torch-allgather": "PyTorch's CP",
         "torch-alltoall": "PyTorch's all-to-all CP"}


def normalise(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the one-design days call the ring "ours"."""
    return df.assign(impl=df["impl"].replace({"ours": "ring"})) if "impl" in df else df


def timing(r: pd.Series) -> Spread:
    return Spread(r["time_ms"], r["time_min_ms"], r["time_max_ms"])


def sent(row) -> float:
    return row["fwd_sent_bytes"] + row["bwd_sent_bytes"]


def heads_label(h: int, kv: int) -> str:
    return f"MHA {h}/{kv}" if h == kv else f"GQA {h}/{kv}"


def time_spreads(b: pd.DataFrame) -> dict[tuple[int, int, int, int, str], Spread]:
    """Every other implementation / the ring at each (N, s, heads), with the spread the timed iterations allow."""
    out = {}
    for (n, s, h, kv), d in b.groupby(["cp", "seq_len", "n_heads", "n_kv_heads"], sort=True):
        d = d.set_index("impl")
        if "ring" in d.index:
            out.update({(n, s, h, kv, i): timing(d.loc[i]).over(timing(d.loc["ring"])) for i in d.index
                        if i not in ("ring", "sdpa")})
    return out


def byte_winners(b: pd.DataFrame) -> dict[tuple[int, int], tuple[list[str], dict[str, float | None]]]:
    """Per (heads, N > 1) at the longest sequence: the designs of ours that send least, and every design's bytes
    over theirs (None: the design cannot run there, Ulysses with heads that do not divide by N)."""
    big = b[(b["seq_len"] == b["seq_len"].max()) & (b["cp"] > 1)]
    out = {}
    for (h, kv, n), d in big.groupby(["n_heads", "n_kv_heads", "cp"], sort=True):
        d = d.set_index("impl")
        ours = {i: sent(d.loc[i]) for i in OURS if i in d.index}
        least = min(ours.values())
        out[(h, kv, n)] = ([i for i, v in ours.items() if v == least],
                           {i: (sent(d.loc[i]) / least if i in d.index else None) for i in (*OURS, *TORCH)})
    return out


def correctness_sentence(corrs: dict[str, pd.DataFrame]) -> str:
    if not corrs:
        return S("correct.none")
    c = normalise(pd.concat(corrs.values()))
    ours = c[c["impl"].isin(OURS)]
    err = ours[["err_output", "err_dq", "err_dk", "err_dv"]].max(axis=1)
    fp32, fp64 = err[ours["dtype"] == "float32"], err[ours["dtype"] == "float64"]
    theirs = c[c["impl"].isin(TORCH)]
    key = "correct.ok" if ours["pass"].all() and ours["bytes_ok"].all() else "correct.failed"
    docs = "documents" in ours and (ours["documents"].fillna("").astype(str) != "").any()
    designs = listing([NAMES[i] for i in OURS if i in set(ours["impl"])])
    return S(key, ok=int(ours["pass"].sum()), n=len(ours), degrees=listing([str(n) for n in sorted(ours["cp"].unique())]),
             designs=designs[:1].upper() + designs[1:],
             masks=S("correct.masks.docs") if docs else S("correct.masks.causal"),
             fp32=sci(fp32.max()) if len(fp32) else "-", fp64=sci(fp64.max()) if len(fp64) else "-",
             exact=int(ours["bytes_ok"].sum()), theirs_ok=int(theirs["pass"].sum()), theirs_n=len(theirs))


def _bytes_file(benches: dict[str, pd.DataFrame]) -> pd.DataFrame | None:
    with_n = [normalise(b) for b in benches.values() if b["cp"].max() > 1]
    return max(with_n, key=lambda b: (b["cp"].max(), b["seq_len"].max())) if with_n else None


def bytes_sentence(benches: dict[str, pd.DataFrame]) -> str:
    """Which design sends least per rank per layer, per heads, at the longest sequence of the file with the largest N
    (bytes are exact: no noise); designs with the same ratios (the ring and the all-gather) are named together."""
    b = _bytes_file(benches)
    if b is None:
        return S("bytes.none")
    wins = byte_winners(b)
    degrees: dict[tuple[int, int], list[int]] = {}
    for h, kv, n in sorted(wins):
        degrees.setdefault((h, kv), []).append(n)
    parts = []
    for (h, kv), ns in sorted(degrees.items(), key=lambda x: -x[0][1]):
        names = wins[(h, kv, ns[-1])][0]
        said: dict[tuple, list[str]] = {}
        for i in OURS:
            if i not in names:
                ratios = tuple(wins[(h, kv, n)][1][i] for n in ns)
                said.setdefault(ratios, []).append(NAMES[i])
        others = []
        for ratios, who in said.items():
            ran = [(n, r) for n, r in zip(ns, ratios) if r is not None]
            values = dict(who=" = ".join(who), ratios="/".join(f"{r:.2f}x" for _, r in ran),
                          degrees="/".join(str(n) for n, _ in ran))
            lost = [n for n, r in zip(ns, ratios) if r is None]
            others.append(S("bytes.cannot", **values, kv=kv, n=lost[0]) if lost else S("bytes.ratios", **values))
        parts.append(S("bytes.winner", heads=heads_label(h, kv), winner=" = ".join(NAMES[i] for i in names),
                       others="; ".join(others)))
    n = max(k[2] for k in wins)
    torch = [r for k, (_, rs) in wins.items() if k[2] == n for t, r in rs.items() if t in TORCH and r]
    return S("bytes", s=int(b["seq_len"].max()), parts="; ".join(parts), torch=spread(torch, "{:.1f}", "-") + "x", n=n)


def ratio(r: Spread) -> str:
    """'1.23 (1.004-1.48)': two decimals, three where two would print a bound as 1.00."""
    f = lambda x: f"{x:.2f}" if f"{x:.2f}" != "1.00" or x == 1 else f"{x:.3f}"  # noqa: E731
    return f"{f(r.mid)} ({f(r.lo)}-{f(r.hi)})"


def time_sentence(benches: dict[str, pd.DataFrame]) -> str:
    """Where one design is faster than another beyond the spread, on files whose ranks have a core each."""
    parts, shared = [], []
    for tag, b in benches.items():
        b = normalise(b)
        if oversubscribed(b):
            shared.append(b)
            continue
        n = int(b["cp"].max())
        if n < 2:
            continue
        rs = {k: r for k, r in time_spreads(b).items() if k[0] == n}
        apart = [S("time.differs", who=NAMES[k[4]], ratio=ratio(r), s=k[1], heads=heads_label(k[2], k[3]))
                 for k, r in rs.items() if r.differs]
        outside = len(apart)
        load = b.loc[b["cp"] == n, "load_1m"] if "load_1m" in b else pd.Series(dtype=float)
        where = S("time.where", hardware=short_hardware(b["hardware"].iloc[0]), n=n,
                  load=S("time.load", load=spread(list(load), "{:.1f}", "-")) if load.notna().any() else "")
        mids = [r.mid for r in rs.values()]
        if len(apart) > 2:  # the opening has one screen: the rest are in the table
            apart = apart[:2] + [S("time.more", k=len(apart) - 2, count=len(rs))]
        parts.append(where + " " + (S("time.apart", apart="; ".join(apart), k=outside, count=len(rs)) if apart else
                                    S("time.same", lo=f"{min(mids):.2f}", hi=f"{max(mids):.2f}", count=len(mids))))
    text = "; ".join(parts) if parts else S("time.none")
    if shared:
        text += S("time.shared", ranks=int(shared[0]["world_size"].max()), cores=cores(shared[0]["hardware"].iloc[0]))
    return text + S("time.missing", gaps=listing(missing(benches))) + "."


def bf16_numbers(benches: dict[str, pd.DataFrame], corrs: dict[str, pd.DataFrame]) -> dict | None:
    """The GPU rows' gap (ours' and PyTorch's distance from bf16 SDPA at N = 1) and the CPU bf16 checks that explain
    it (each design's distance from SDPA and from fp32, beside SDPA's own distance from fp32)."""
    gpu = [normalise(b) for b in benches.values() if b["backend"].iloc[0] == "nccl" and (b["dtype"] == "bfloat16").any()]
    c = normalise(pd.concat(corrs.values())) if corrs else pd.DataFrame()
    cpu = c[(c["dtype"] == "bfloat16")] if len(c) and "err_vs_fp32" in c else pd.DataFrame()
    if not gpu or not len(cpu):
        return None
    g = gpu[0][gpu[0]["cp"] == 1].set_index(["seq_len", "impl"])["max_rel_err"]
    lengths = sorted({s for s, _ in g.index})
    gap = [g[(s, "ring")] / min(g[(s, t)] for t in TORCH if (s, t) in g) for s in lengths]
    err = cpu[["err_output", "err_dq", "err_dk", "err_dv"]].max(axis=1)
    merged = cpu[cpu["impl"].isin(("ring", "allgather", *TORCH))]
    def errs(values) -> str:
        values = list(values)
        return "0" if max(values) == 0 else spread(values, "{:.1e}")

    return {"hardware": short_hardware(gpu[0]["hardware"].iloc[0]), "torch": gpu[0]["torch_version"].iloc[0],
            "gap": spread(gap, "{:.0f}", "-"), "ours": errs(g.xs("ring", level=1)),
            "theirs": errs(g[(s, t)] for s in lengths for t in TORCH if (s, t) in g),
            "cpu_vs_sdpa": errs(err[merged.index]), "cpu_vs_fp32": errs(merged["err_vs_fp32"]),
            "sdpa_vs_fp32": errs(cpu["reference_vs_exact"]),
            "closer": bool((merged["err_vs_fp32"] <= merged["reference_vs_exact"]).all()),
            "ulysses": errs(err[cpu["impl"] == "ulysses"]) if (cpu["impl"] == "ulysses").any() else None}


def bf16_sentence(benches: dict[str, pd.DataFrame], corrs: dict[str, pd.DataFrame]) -> str:
    x = bf16_numbers(benches, corrs)
    if x is None:
        return S("bf16.none")
    return S("bf16", **x, verdict=S("bf16.closer") if x["closer"] else S("bf16.further"),
             same=S("bf16.ulysses", err=x["ulysses"]) if x["ulysses"] else "")


def missing(benches: dict[str, pd.DataFrame]) -> list[str]:
    """What no file measures yet: GPUs at N > 1 (where overlap decides), and run-to-run spread."""
    gpu = [b for b in benches.values() if b["backend"].iloc[0] == "nccl"]
    return ([] if any(b["cp"].max() > 1 for b in gpu) else [S("missing.multi_gpu")]) + [S("missing.repeats")]


def plot_caption(b: pd.DataFrame, tag: str) -> str:
    note = S("plot.shared", tag=tag, ranks=int(b["world_size"].max()), cores=cores(b["hardware"].iloc[0])) \
        if oversubscribed(b) else ""
    return S("plot.caption", shared=" " + note if note else "")


def public_line(public: pd.DataFrame | None) -> str:
    if public is None or not len(public):
        return ""
    rows = public.drop_duplicates(["device", "runs", "error", "torch_version"])
    return "; ".join(S("public", dev=r["device"].upper(), verdict=S("public.runs") if r["runs"] else S(
        "public.refuses", torch=r["torch_version"], error=r["error"], device=r["device"].upper()))
        for _, r in rows.iterrows()) + "."


def opening(benches: dict[str, pd.DataFrame], corrs: dict[str, pd.DataFrame]) -> list[Finding]:
    """Which design wins where (bytes, then time with its spread and what is not measured), why, and whether all
    three are right."""
    return [Finding("Answer", bytes_sentence(benches)), Finding("Time", time_sentence(benches)),
            Finding("Why", S("why")), Finding("Correct", correctness_sentence(corrs))]
