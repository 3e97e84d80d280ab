"""fsdp-scaling's sentences, picked by what the CSVs show (the words: findings_template.md).

    opening(scaling, at_scale, comms, projection, overlap)   # the report's first lines
    step_spreads(one_rank_rows, ref)   # each strategy's step time / the reference's, with the timed steps' spread
    ...and one function per judgement the body makes (captions, losses, the per-step cost, the anchor, across nodes)

A time is compared only by the noise rule (common.findings.Spread): the ratio of two step times spans the ratio of
their fastest and slowest timed steps, and only a ratio whose spread excludes 1 is a difference. Byte counts and
the projection are exact or analytic: they are compared by their numbers alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from common.findings import Finding, Sentences, Spread, cores, gaps_sentence, listing, plural, short_hardware

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")
ORDER = ["single", "ddp", "zero1", "zero2", "zero3", "hsdp"]
MiB = 2**20
LOSS_AGREE = 1e-3  # last losses of one world size and mode further apart than this are flagged


def states(a: pd.DataFrame) -> pd.DataFrame:
    """Measured model-state bytes per rank (held) beside the ZeRO formula's (formula), per at-scale row."""
    return a.assign(held=a["param_bytes"] + a["grad_bytes"] + a["opt_bytes_worst_rank"],
                    formula=a["model_param_bytes"] + a["model_grad_bytes"] + a["model_opt_bytes"])


def timing(r: pd.Series) -> Spread:
    return Spread(r["step_time_ms"], r["step_time_min_ms"], r["step_time_max_ms"])


def pooled(rows: pd.DataFrame) -> Spread:
    """One configuration's step time over its rows: a repeated configuration (the same run measured again) is the
    median of its medians, its spread the fastest and slowest timed step of them all."""
    return Spread(float(rows["step_time_ms"].median()), float(rows["step_time_min_ms"].min()),
                  float(rows["step_time_max_ms"].max()))


def step_spreads(one: pd.DataFrame, ref: str = "single") -> dict[tuple[str, str], Spread]:
    """(mode, strategy) -> step time / the reference strategy's in the same mode (one-rank rows of one hardware and
    model: gpu_one_rank; repeats pooled)."""
    times = {key: pooled(g) for key, g in one.groupby(["mode", "strategy"], sort=False)}
    return {(m, s): t.over(times[(m, ref)]) for (m, s), t in times.items() if s != ref and (m, ref) in times}


def gpu_one_rank(s: pd.DataFrame) -> pd.DataFrame:
    """The one-GPU rows the opening and the answer's table compare: those of the newest GPU set (the hardware and
    model of the latest one-rank nccl row), so that a strategy is divided by its own hardware's plain training,
    whatever other GPUs' sets lie beside it (each set's own table is in the body)."""
    one = s[(s["backend"] == "nccl") & (s["world_size"] == 1)]
    if one.empty:
        return one
    newest = one.iloc[one["timestamp_utc"].astype(str).to_numpy().argmax()]  # by position: sets may share labels
    return one[(one["hardware"] == newest["hardware"]) & (one["model"] == newest["model"])]


def judged(spreads: dict[tuple[str, str], Spread], top: int = 4) -> tuple[str, list[str]]:
    """The differences beyond the spread, largest first ('hsdp weak +100%'), and the pairs with none."""
    apart = sorted(((r.mid, f"{s} {m} {r.mid - 1:+.0%}") for (m, s), r in spreads.items() if r.differs), reverse=True)
    shown = [label for _, label in apart[:top]] + ([f"{len(apart) - top} more"] if len(apart) > top else [])
    return listing(shown) or S("wrappers.none"), [f"{s} {m}" for (m, s), r in spreads.items() if not r.differs]


def tidy(text: str) -> str:
    """A range whose ends print alike is one value: 'MFU 0.46-0.46' reads 'MFU 0.46'."""
    return re.sub(r"(?<![\d.])(\d+(?:\.\d+)?)-\1(?![\d.])", r"\1", str(text))


def memory_sentence(a: pd.DataFrame) -> str:
    if a.empty:
        return S("memory.none")
    a = states(a)
    upto = a[a["world_size"] <= 128]
    n = int(upto["world_size"].max())
    at = upto[upto["world_size"] == n].set_index("strategy")["held"]
    fsdp = upto[upto["strategy"].isin(["ddp", "zero2", "zero3", "hsdp"])]
    worst = float((fsdp["held"] / fsdp["formula"] - 1).abs().max())
    z1 = upto[(upto["strategy"] == "zero1") & (upto["world_size"] == n)]
    zero1_dev = float((z1["held"] / z1["formula"] - 1).iloc[0]) if len(z1) else float("nan")
    agree = S("memory.exact" if worst < 5e-4 else "memory.within", worst=worst, zero1_dev=zero1_dev)
    return S("memory", n=n, ddp=at.get("ddp", float("nan")) / MiB, zero3=at.get("zero3", float("nan")) / MiB,
             agree=agree)


def time_sentence(s: pd.DataFrame) -> str:
    one = gpu_one_rank(s)
    if one.empty or "single" not in set(one["strategy"]):
        return S("time.none")
    above, same = judged(step_spreads(one))
    return S("time", hardware=short_hardware(one["hardware"].iloc[0]), above=above, same=S("time.same", n=len(same)))


def _largest_gpu_model(p: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    g = p[p["target"] != "cpu"]
    model = g.groupby("model")["n_params"].first().idxmax()
    return model, g[g["model"] == model]


def projection_sentence(p: pd.DataFrame) -> str:
    if p[p["target"] != "cpu"].empty:
        return S("projection.none")
    model, g = _largest_gpu_model(p)
    g = g[g["mode"] == "weak"]
    n = int(g["n_gpus"][g["n_gpus"] >= 8].min())
    at = g[g["n_gpus"] == n].set_index("strategy")
    fits = lambda s: str(at.loc[s, "fits_in_memory"]) == "True"  # noqa: E731
    return S("projection", model=model, n=n, target=g["target"].iloc[0],
             ddp=at["state_GB_per_rank"].get("ddp", float("nan")), ddp_fit="fits" if fits("ddp") else "no fit",
             zero3=at["state_GB_per_rank"].get("zero3", float("nan")))


def missing_sentence(s: pd.DataFrame, ov: pd.DataFrame) -> str:
    gpu = s[s["backend"] == "nccl"]
    gaps = [S("missing.gpu")] if gpu.empty else []
    if gpu.empty or gpu["world_size"].max() < 2 or ov.empty or ov["world_size"].max() < 2:
        gaps.append(S("missing.multi_gpu"))
    if gpu.empty or gpu["nnodes"].max() < 2:
        gaps.append(S("missing.nodes"))
    return gaps_sentence(S, gaps + [S("missing.repeats")])


def opening(s: pd.DataFrame, a: pd.DataFrame, c: pd.DataFrame, p: pd.DataFrame, ov: pd.DataFrame) -> list[Finding]:
    return [Finding("Answer", memory_sentence(a)), Finding("Time", time_sentence(s)),
            Finding("At scale", projection_sentence(p)), Finding("What it means", S("meaning")),
            Finding("Not measured yet", missing_sentence(s, ov))]


# ---- the body's judgements ----

def answer_caption(p: pd.DataFrame, cap: float | None) -> str:
    """Which strategies' projected states never fit the GPU, and from which GPU count the others do."""
    model, g = _largest_gpu_model(p)
    g = g[g["mode"] == "weak"]
    fit = g["state_GB_per_rank"] <= cap if cap else pd.Series(True, index=g.index)
    never = [st for st in ORDER if st in set(g["strategy"]) and not fit[g["strategy"] == st].any()]
    if not never:
        all_fit = g.assign(fit=fit).groupby("n_gpus")["fit"].all()
        return S("answer.caption", model=model, verdict=S("answer.fits", n=int(all_fit[all_fit].index.min())))
    first = int(g[fit]["n_gpus"].min()) if fit.any() else 0
    return S("answer.caption", model=model, verdict=S("answer.over", strategies=listing(never), cap=cap, first=first))


def bound(x: float) -> str:
    """How closely two byte counts agree: 'exactly (to 0.01%)' or 'within 6.70%'."""
    return "exactly (to 0.01%)" if x < 1e-4 else f"within {x:.2%}"


def memory_caption(a: pd.DataFrame) -> str:
    """Per strategy, the first world size at which the measured states leave the ZeRO formula by more than 1%."""
    a = states(a)
    a = a.assign(off=(a["held"] / a["formula"] - 1).abs() > 0.01)
    if not a["off"].any():
        return S("memory.caption", verdict=S("memory.caption.on"))
    first = a[a["off"]].groupby("strategy")["world_size"].min()
    on = [st for st in ORDER if st in set(a["strategy"]) and st not in first.index]
    off = "; ".join(f"from {n} ranks: {listing([st for st in ORDER if first.get(st) == n])}"
                    for n in sorted(set(first)))
    leave = a[a["off"]]
    followed = int(((leave["held"] / leave["exact_model_state_bytes"] - 1).abs() <= 0.01).sum())
    return S("memory.caption", verdict=S("memory.caption.off", on=listing(on) or "none", off=off,
                                         followed=f"{followed} of the {len(leave)}"))


def losses(s: pd.DataFrame) -> str:
    spread = s.groupby(["world_size", "mode"])["loss_last"].agg(lambda x: x.max() - x.min())
    if spread.max() == 0:
        return S("set.losses.same")
    bad = int((spread > LOSS_AGREE).sum())
    return S("set.losses.apart" if bad else "set.losses.close", spread=spread.max(), bad=bad, n=len(spread))


def loss_flags(s: pd.DataFrame) -> list[str]:
    """Each world size and mode whose last losses spread above LOSS_AGREE, split by the first step's loss (before
    any update): a difference there is different arithmetic, not different training."""
    out = []
    for (ws, mode), g in s.groupby(["world_size", "mode"]):
        spread = g["loss_last"].max() - g["loss_last"].min()
        if spread <= LOSS_AGREE:
            continue
        start = g["loss_first"].round(6)
        groups = g.groupby(start, sort=True)["strategy"].apply(list)
        kw = dict(mode=mode, ranks=plural(int(ws), "rank"), spread=spread)
        if len(groups) == 1:
            out += [S("loss.flag.same_start", **kw), ""]
            continue
        means = g.groupby(start)["loss_last"].mean()
        out += [S("loss.flag.groups", groups="; ".join(f"{', '.join(v)} start at {k:.6f}" for k, v in groups.items()),
                  within=g.groupby(start)["loss_last"].agg(lambda x: x.max() - x.min()).max(),
                  between=means.max() - means.min(), steps=int(g["steps"].iloc[0]), **kw), ""]
    return out


def per_step(one: pd.DataFrame) -> str:
    """Wrappers whose weak step (half the micro-batch) is no shorter than their strong one within the spread."""
    rows = one.set_index(["mode", "strategy"])
    ratio = {st: timing(rows.loc[("weak", st)]).over(timing(rows.loc[("strong", st)]))
             for st in ORDER if ("weak", st) in rows.index and ("strong", st) in rows.index}
    if "single" not in ratio:
        return ""
    flat = [st for st, r in ratio.items() if st != "single" and r.hi >= 1]
    verdict = S("per_step.some", which=listing(flat)) if flat else S("per_step.none")
    return S("per_step", single=f"{ratio['single'].mid:.2f}x", verdict=verdict)


def projection_caption(p: pd.DataFrame) -> str:
    multi = p[p["n_gpus"] > 1]
    over = sorted(set(multi[multi["comm_ms"] > multi["compute_ms"]]["strategy"]), key=ORDER.index)
    verdict = S("projection.over", which=listing(over)) if over else S("projection.under")
    return S("projection.caption", model=p["model"].iloc[0], target=p["target"].iloc[0], verdict=verdict)


def anchor_verdict(published: float, kept: dict[str, float]) -> str:
    if published < kept["no_overlap"]:
        return S("anchor.below")
    return S("anchor.between") if published <= kept["full_overlap"] else S("anchor.above")


def across_nodes(proj: pd.DataFrame) -> str:
    """The across-nodes reading, from the projection's own rows (weak scaling, the largest GPU count)."""
    p = proj[(proj["target"] != "cpu") & (proj["mode"] == "weak")]
    if p.empty:
        return S("across.none")
    model, p = _largest_gpu_model(p)
    n = int(p["n_gpus"].max())
    e = p[p["n_gpus"] == n].set_index("strategy")["efficiency_no_overlap"]
    wins = e.get("hsdp", 0) > e.get("zero3", 1)
    return S("across", model=model, n=n, zero3=e.get("zero3", float("nan")), hsdp=e.get("hsdp", float("nan")),
             verdict=S("across.hsdp") if wins else S("across.zero3"))


def cpu_caveat(s: pd.DataFrame) -> str:
    found = sorted({str(n) for n in map(cores, s.get("hardware", pd.Series(dtype=str))) if n})
    return S("caveat.cpu", cores=f" ({', '.join(found)} here, per the CSVs' hardware column)" if found else "")
