"""allreduce-bench's sentences, picked by what the sweeps show (the words: findings_template.md).

    opening(df, summ, nccl_tests)   # the report's first lines: peak busbw per run, what it means, what is missing
    busbw_caption(df)               # the busbw plot's caption: how each curve ends, judged against its spread
    overhead_sentence(ov)           # how far the overhead rounds disagree on CPU

df: every sweep row (report.load), summ: report.summary(df). A number is quoted as a finding only where it was
measured: a fitted B the sweep never approached is the line's, not the machine's, and stays out of the opening.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.findings import Finding, Sentences, Spread, cores, gaps_sentence, listing, plural

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")
SHAPES = ("rising", "plateau", "falls", "uneven")


def size_str(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def busbw_spread(r) -> Spread:
    """One size's busbw and its spread over the timed iterations (busbw is proportional to 1 / time)."""
    return Spread(r.busbw_GBps, r.busbw_GBps * r.time_us / r.time_max_us, r.busbw_GBps * r.time_us / r.time_min_us)


def shape(g: pd.DataFrame) -> str:
    """How one curve ends: still rising at its largest size, flat within its peak's spread from the peak on (a
    plateau), ending below the peak's spread (falls), or leaving the spread and coming back (uneven)."""
    g = g.sort_values("size_bytes")
    pts = [busbw_spread(r) for r in g.itertuples()]
    top = max(range(len(pts)), key=lambda i: pts[i].mid)
    if top == len(pts) - 1:
        return "rising"
    if pts[-1].hi < pts[top].lo:
        return "falls"
    return "plateau" if all(p.overlaps(pts[top]) for p in pts[top:]) else "uneven"


def busbw_caption(df: pd.DataFrame) -> str:
    multi = df[(df["world_size"] > 1) & df["moves_data"]]
    shapes: dict[str, list[str]] = {k: [] for k in SHAPES}
    several = multi["run"].nunique() > 1
    for (run, coll), g in multi.groupby(["run", "collective"], sort=False):
        nodes = int(g["nnodes"].iloc[0])
        shapes[shape(g)].append(coll + (f" on {nodes} node{'s' if nodes > 1 else ''}" if several else ""))
    clauses = [S(f"shape.{k}", which=listing(v)) for k, v in shapes.items() if v]
    keys = ["run", "collective"]
    first = multi.loc[multi.groupby(keys)["size_bytes"].idxmin()].set_index(keys)["busbw_GBps"]
    low, total = int((first < 0.1 * multi.groupby(keys)["busbw_GBps"].max()).sum()), len(first)
    start = S("start.low") if low == total else S("start.some", n=low, total=total)
    return S("busbw.caption", start=start, shapes="; ".join(clauses))


def _where(r) -> str:
    nodes = f" on {r.nnodes} nodes" if r.nnodes > 1 else ""
    return f"{r.hardware}, {r.ws} {r.backend} ranks{nodes}"


def answer_sentence(df: pd.DataFrame, summ: pd.DataFrame) -> str:
    """all_reduce's measured peak per multi-rank run (the best collective's where a run has no all_reduce)."""
    parts = []
    for run in dict.fromkeys(summ[summ["ws"] > 1]["run"]):
        s = summ[summ["run"] == run]
        r = (s[s["collective"] == "all_reduce"] if (s["collective"] == "all_reduce").any()
             else s.sort_values("peak")).iloc[-1]
        g = df[(df["run"] == run) & (df["collective"] == r.collective)]
        at_end = g.loc[g["busbw_GBps"].idxmax(), "size_bytes"] == g["size_bytes"].max()
        hw = df[df["run"] == run]["hardware"].iloc[0]
        where = _where(pd.Series({"hardware": hw, "ws": r.ws, "backend": g["backend"].iloc[0], "nnodes": r.nnodes}))
        edge = S("answer.edge") if at_end else ""
        if parts and hw in parts[0] and r.collective in parts[0]:  # the same machine and collective: the change
            where = f"{r.ws} ranks" + (f" on {r.nnodes} nodes" if r.nnodes > 1 else " on one node")
            parts.append(S("answer.more", where=where, peak=r.peak, at=r.peak_at, edge=edge))
        else:
            parts.append(S("answer.run", where=where, coll=r.collective, peak=r.peak, at=r.peak_at, edge=edge))
    if not parts:
        return S("answer.none") + "."
    return "; ".join(parts[:3]) + ". " + S("answer.checked", rows=len(df), wrong=int(df["wrong"].sum())) + "."


def one_rank_sentence(df: pd.DataFrame, summ: pd.DataFrame) -> str:
    one = summ[summ["ws"] == 1]
    if one.empty:
        return ""
    idle = df[(df["world_size"] == 1) & ~df["moves_data"]]
    floor = idle.groupby("collective")["time_us"].median()
    text = S("one_rank", hardware=df[df["world_size"] == 1]["hardware"].iloc[0], peak=one["peak"].max())
    return text + (S("one_rank.floor", lo=floor.min(), hi=floor.max()) if len(floor) else "") + "."


def meaning_sentence(summ: pd.DataFrame) -> str:
    """n_1/2 of the all_reduce fits whose n_1/2 and B the sweep reached (an extrapolated one is the line's)."""
    fits = [r.fit for r in summ[(summ["ws"] > 1) & (summ["collective"] == "all_reduce")].itertuples()
            if r.fit is not None and r.fit.n_half_bytes == r.fit.n_half_bytes and not r.fit.extrapolated]
    return S("meaning.latency", half=size_str(max(f.n_half_bytes for f in fits))) if fits else S("meaning.none")


def missing_sentence(df: pd.DataFrame, nccl_tests: pd.DataFrame) -> str:
    gaps = []
    gloo = df[(df["backend"] == "gloo") & (df["world_size"] > 1)]
    nccl = df[df["backend"] == "nccl"]
    if nccl[nccl["world_size"] > 1].empty:
        note = " " + S("missing.contention", cores=cores(gloo["hardware"].iloc[0]) or "a few") if len(gloo) else ""
        gaps.append(S("missing.multi_gpu", note=note))
    if nccl[nccl["nnodes"] > 1].empty:
        gaps.append(S("missing.multi_node"))
    if nccl_tests.empty:
        gaps.append(S("missing.nccl_tests"))
    gaps.append(S("missing.repeats"))
    return gaps_sentence(S, gaps)


def overhead_sentence(ov: pd.DataFrame) -> str:
    cpu = ov[(ov["backend"] == "gloo") & ov["moves_data"]]
    if cpu.empty:
        return ""
    worst = float((cpu["ratio_max"] / cpu["ratio_min"] - 1).max())
    return S("overhead.cpu", where=listing(sorted(set(cpu["run"].str.rsplit(",", n=1).str[0]))), worst=worst)


def idle_sentence(ov: pd.DataFrame) -> str:
    idle = ov[~ov["moves_data"]]
    if idle.empty:
        return ""
    return S("overhead.idle", which=listing(sorted({f"{c} on {plural(int(n), 'rank')}"
                                                    for c, n in zip(idle["collective"], idle["world_size"])})))


def opening(df: pd.DataFrame, summ: pd.DataFrame, nccl_tests: pd.DataFrame) -> list[Finding]:
    lines = [Finding("Answer", answer_sentence(df, summ)), Finding("What it means", meaning_sentence(summ))]
    if (one := one_rank_sentence(df, summ)):
        lines.append(Finding("One GPU", one))
    return lines + [Finding("Not measured yet", missing_sentence(df, nccl_tests))]
