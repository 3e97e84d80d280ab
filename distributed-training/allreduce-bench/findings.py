"""allreduce-bench's answer, from the sweeps: how fast collectives move data here, which latency and bandwidth
describe them, and what is not measured yet. The wording is findings_template.md's, picked by what the rows
show (common.findings); report.py puts these lines first.

    lines = opening(df, summ)     # df: every sweep row (report.load), summ: report.summary(df)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.findings import Finding, Sentences, gaps_sentence

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def _machine(r) -> str:
    nodes = f" on {r.nnodes} nodes" if r.nnodes > 1 else ""
    return f"{r.hardware}, {r.ws} {r.backend} ranks{nodes}"


def run_sentence(df: pd.DataFrame, summ: pd.DataFrame, run: str) -> str:
    """One multi-rank run: all_reduce's peak busbw and its alpha-beta fit (or the best collective's)."""
    s = summ[summ["run"] == run]
    row = s[s["collective"] == "all_reduce"]
    r = (row if len(row) else s.sort_values("peak")).iloc[-1]
    g = df[df["run"] == run].iloc[0]
    machine = _machine(pd.Series({"hardware": g.hardware, "ws": r.ws, "backend": g.backend, "nnodes": r.nnodes}))
    f = r.fit
    fitted = f is not None and f.bw_GBps == f.bw_GBps  # NaN: no bandwidth regime to fit
    fit = S("fit", alpha=f.alpha_us, bw=f.bw_GBps, half=_size(f.n_half_bytes)) if fitted else S("fit.none")
    best = s.sort_values("peak").iloc[-1]
    key = "run.cpu" if g.backend == "gloo" else "run.gpu"
    return S(key, machine=machine, coll=r.collective, peak=r.peak, at=r.peak_at, fit=fit, best=best.collective,
             best_peak=best.peak)


def one_rank_sentence(df: pd.DataFrame, summ: pd.DataFrame) -> str:
    one = summ[summ["ws"] == 1]
    if one.empty:
        return ""
    hw = df[df["world_size"] == 1]["hardware"].iloc[0]
    idle = df[(df["world_size"] == 1) & ~df["moves_data"]]
    floor = idle.groupby("collective")["time_us"].median() if len(idle) else pd.Series(dtype=float)
    text = S("one_rank", hardware=hw, peak=one["peak"].max())
    if len(floor):
        text += " " + S("one_rank.floor", lo=floor.min(), hi=floor.max())
    return text


def check_sentence(df: pd.DataFrame) -> str:
    wrong = int(df["wrong"].sum())
    runs = df["run"].nunique()
    return S("check.ok" if wrong == 0 else "check.bad", rows=len(df), runs=runs, wrong=wrong)


def meaning_sentence(summ: pd.DataFrame, df: pd.DataFrame) -> str:
    multi = summ[(summ["ws"] > 1) & (summ["collective"] == "all_reduce")]
    fits = [r.fit for r in multi.itertuples() if r.fit is not None and r.fit.n_half_bytes == r.fit.n_half_bytes]
    if not fits:
        return S("meaning.none")
    half = max(f.n_half_bytes for f in fits)
    gpu = (df[df["world_size"] > 1]["backend"] == "nccl").any()
    return S("meaning.gpu" if gpu else "meaning.cpu", half=_size(half))


def missing_sentence(df: pd.DataFrame, nccl_tests: pd.DataFrame) -> str:
    gaps = []
    multi_gpu = df[(df["backend"] == "nccl") & (df["world_size"] > 1)]
    if multi_gpu.empty:
        gaps.append(S("missing.multi_gpu"))
    if df[(df["backend"] == "nccl") & (df["nnodes"] > 1)].empty:
        gaps.append(S("missing.multi_node"))
    if nccl_tests.empty:
        gaps.append(S("missing.nccl_tests"))
    return gaps_sentence(S, gaps)


def opening(df: pd.DataFrame, summ: pd.DataFrame, nccl_tests: pd.DataFrame) -> list[Finding]:
    multi = [run for run in dict.fromkeys(summ[summ["ws"] > 1]["run"])]
    answers = [run_sentence(df, summ, run) for run in multi[:3]]
    if (df[df["world_size"] > 1]["backend"] == "gloo").any():
        answers.append(S("cpu.caveat"))
    lines = [Finding("Question", S("question"))]
    lines += [Finding("Answer", " ".join(answers) if answers else S("answer.none"))]
    if (one := one_rank_sentence(df, summ)):
        lines.append(Finding("One GPU", one))
    lines += [Finding("Checked", check_sentence(df)), Finding("What it means", meaning_sentence(summ, df)),
              Finding("Not measured yet", missing_sentence(df, nccl_tests))]
    return lines
