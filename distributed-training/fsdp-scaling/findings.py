"""fsdp-scaling's answer, from its CSVs: which data-parallel strategy to use, what each costs in memory and time,
and what is not measured yet. The wording is findings_template.md's, picked by what the rows show
(common.findings); report.py puts these lines first and draws the memory plot that carries them.

    lines = opening(scaling, at_scale, comms, projection)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.findings import Finding, Sentences, gaps_sentence, listing

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")
MiB = 2**20


def memory_sentence(a: pd.DataFrame) -> str:
    if a.empty:
        return S("memory.none")
    a = a.assign(held=a["param_bytes"] + a["grad_bytes"] + a["opt_bytes_worst_rank"],
                 formula=a["model_param_bytes"] + a["model_grad_bytes"] + a["model_opt_bytes"])
    upto = a[a["world_size"] <= 128]
    n = int(upto["world_size"].max())
    at = upto[upto["world_size"] == n].set_index("strategy")["held"]
    dev = (upto["held"] / upto["formula"] - 1).abs()
    fsdp = upto[upto["strategy"].isin(["ddp", "zero2", "zero3", "hsdp"])]
    worst = (fsdp["held"] / fsdp["formula"] - 1).abs().max()
    return S("memory", model=a["model"].iloc[0], n=n, ddp=at.get("ddp", float("nan")) / MiB,
             zero3=at.get("zero3", float("nan")) / MiB, ratio=at.get("ddp", 0) / at.get("zero3", 1),
             zero1=at.get("zero1", float("nan")) / MiB, worst=worst, all_worst=dev.max())


def comms_sentence(c: pd.DataFrame, a: pd.DataFrame) -> str:
    parts = []
    if len(a):
        ok = ((a["bus_bytes_per_rank"] - a["model_bus_bytes_per_rank"]).abs() <= 1e-6 * a["model_bus_bytes_per_rank"]
              .abs().clip(lower=1)).sum()
        worlds = f"{a['world_size'].min()}-{a['world_size'].max()}"
        parts.append(S("comms.fake", ok=int(ok), rows=len(a), worlds=worlds))
    if len(c):
        match = ((c["count"] == c["model_count"]) & (c["payload_bytes"] == c["model_payload_bytes"])).sum()
        parts.append(S("comms.real", ok=int(match), rows=len(c)))
    return " ".join(parts) if parts else S("comms.none")


def loss_sentence(s: pd.DataFrame) -> str:
    cpu = s[s["backend"] == "gloo"]
    if cpu.empty:
        return ""
    spread = cpu.groupby(["world_size", "mode"])["loss_last"].agg(lambda x: x.max() - x.min())
    return S("parity.exact" if spread.max() == 0 else "parity", n=cpu["strategy"].nunique(), spread=spread.max(),
             worlds=listing([str(w) for w in sorted(set(cpu["world_size"]))]))


def time_sentence(s: pd.DataFrame) -> str:
    gpu = s[s["backend"] == "nccl"]
    if gpu.empty:
        return S("time.none")
    one = gpu[gpu["world_size"] == 1].set_index(["mode", "strategy"])
    noise = (gpu["step_time_max_ms"] / gpu["step_time_min_ms"] - 1).median()
    costs = []
    for (mode, strat), r in one.iterrows():
        if strat == "single" or (mode, "single") not in one.index:
            continue
        cost = r["step_time_ms"] / one.loc[(mode, "single"), "step_time_ms"] - 1
        costs.append((cost, f"{strat} {mode} {cost:+.0%}"))
    above = [label for cost, label in sorted(costs, reverse=True) if cost > noise]
    below = [label for cost, label in costs if cost <= noise]
    mfu = one["mfu"].dropna()
    return S("time.one_gpu", hardware=gpu["hardware"].iloc[0], above=listing(above[:4]) or "none",
             noise=noise, mfu_lo=mfu.min(), mfu_hi=mfu.max(), n_below=len(below))


def projection_sentence(p: pd.DataFrame) -> str:
    g = p[(p["target"] != "cpu")]
    if g.empty:
        return S("projection.none")
    model = g.groupby("model")["n_params"].first().idxmax()
    g = g[(g["model"] == model) & (g["mode"] == "weak")]
    small = int(g["n_gpus"][g["n_gpus"] >= 8].min())
    at = g[g["n_gpus"] == small].set_index("strategy")
    fits = [s for s in at.index if str(at.loc[s, "fits_in_memory"]) == "True"]
    no = [s for s in at.index if str(at.loc[s, "fits_in_memory"]) == "False"]
    big = int(g["n_gpus"].max())
    eff = g[g["n_gpus"] == big].set_index("strategy")["efficiency_no_overlap"]
    best = eff.idxmax()
    return S("projection", model=model, params=g["n_params"].iloc[0] / 1e9, target=g["target"].iloc[0],
             n=small, ddp=at["state_GB_per_rank"].get("ddp", float("nan")),
             zero3=at["state_GB_per_rank"].get("zero3", float("nan")), fits=listing(fits) or "none",
             no=listing(no) or "none", verb="does" if len(no) == 1 else "do", big=big, best=best, eff=eff.max(),
             worst=eff.idxmin(), eff_lo=eff.min())


def meaning_sentence(p: pd.DataFrame) -> str:
    g = p[(p["target"] != "cpu") & (p["mode"] == "weak")]
    if g.empty:
        return S("meaning.cpu")
    model = g.groupby("model")["n_params"].first().idxmax()
    g = g[g["model"] == model]
    big = g[g["n_gpus"] == g["n_gpus"].max()]
    no_fit = sorted(s for s, f in zip(big["strategy"], big["fits_in_memory"].astype(str)) if f == "False")
    key = "meaning.no_fit" if no_fit else "meaning.all_fit"
    return S(key, model=model, no_fit=listing(no_fit), big=int(big["n_gpus"].iloc[0]),
             verb="does" if len(no_fit) == 1 else "do")


def missing_sentence(s: pd.DataFrame, ov: pd.DataFrame) -> str:
    gpu = s[s["backend"] == "nccl"]
    gaps = []
    if gpu.empty:
        gaps.append(S("missing.gpu"))
    if gpu.empty or gpu["world_size"].max() < 2:
        gaps.append(S("missing.multi_gpu"))
    if ov.empty or ov["world_size"].max() < 2:
        gaps.append(S("missing.overlap"))
    if gpu.empty or "nnodes" not in gpu or gpu["nnodes"].max() < 2:
        gaps.append(S("missing.nodes"))
    return gaps_sentence(S, gaps)


def opening(s: pd.DataFrame, a: pd.DataFrame, c: pd.DataFrame, p: pd.DataFrame, ov: pd.DataFrame) -> list[Finding]:
    lines = [Finding("Question", S("question")), Finding("Answer", memory_sentence(a)),
             Finding("Communication and parity", " ".join(x for x in (comms_sentence(c, a), loss_sentence(s)) if x)),
             Finding("Time", time_sentence(s)), Finding("At scale (a projection)", projection_sentence(p)),
             Finding("What it means", meaning_sentence(p)), Finding("Not measured yet", missing_sentence(s, ov))]
    return lines
