"""fp8-train's sentences, each picked by a predicate over the CSVs (the words: findings_template.md; the numbers:
evidence.py). Every sentence that compares, ranks or explains is chosen here, never typed into the report:

    opening(all_facts, bounds_missing, multi_gpu)   # the report's first lines (one screen)
    loss_paragraph(f), early_paragraph(f), ...      # the body's paragraphs of one model
    caption_answer(f), caption_loss(f), ...         # every plot's "What to see", naming its model

The rules: a gap is within or beyond the noise only by Facts.beyond (evidence.py: the noise over every
evaluation); a speed ratio differs from BF16 only outside the spread BF16's own runs allow (common.findings.Spread);
delayed scaling "trails most" only when its gaps and the others' are apart by more than the noise. The opening
speaks for one results set, `primary`'s (GPU, measured noise, larger model, more FP8 runs, newest), and counts the
other GPU sets ("2 more sets below", common.findings.first_sets): one screen whatever results lie beside it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from common.findings import Finding, Sentences, Spread, first_sets, gaps_sentence, listing, short_hardware, spread
from reporting.comparison import Run
from reporting.evidence import DELAYED, Damage, Facts, ident

HERE = Path(__file__).resolve().parent
S = Sentences(HERE / "findings_template.md")


def short_gpu(hardware: str, count: bool = True) -> str:
    """'1x NVIDIA H100 80GB HBM3' -> '1x H100 80GB' (without the count: 'H100 80GB'); a CPU as short_hardware."""
    m = re.search(r"(\d+x )?NVIDIA (\S+)( \d+GB)?", hardware)
    return f"{(m.group(1) or '') if count else ''}{m.group(2)}{m.group(3) or ''}" if m else short_hardware(hardware)


def run_label(r: Run) -> str:
    """te, te current, torchao, native, mxfp8 emulated: what a learner compares."""
    return r.backend + (" current" if r.recipe == "current" else "") if r.precision == "fp8" else \
        f"{r.precision} {r.backend}"


def kind(runs: list[Run]) -> str:
    return "FP8" if all(r.precision == "fp8" for r in runs) else "low-precision"


def where(f: Facts, sep: str = " (") -> str:
    """'1x H100 80GB (d_model 4096)' (a caption's: '1x H100 80GB, d_model 4096'), with a world size above one."""
    ws = f", world size {f.key.world_size}" if f.key.world_size > 1 else ""
    return f"{short_gpu(f.key.hardware)}{sep}d_model {f.key.d_model}{ws}" + (")" if sep == " (" else "")


def then(name: str, **values) -> str:
    """A sentence that follows another on the same line: with its leading space."""
    return " " + S(name, **values)


def finals(f: Facts) -> list[tuple[Run, float]]:
    return [(r, float(f.gap(r).iloc[-1])) for r in f.low()]


def verdict_key(f: Facts) -> str:
    """within / worse / beyond / unknown: the final gaps against the noise."""
    gaps = [g for _, g in finals(f)]
    out = [g for g in gaps if f.beyond(g)]
    if f.noise is None or not out:
        return "unknown" if f.noise is None else "within"
    return "worse" if len(out) == len(gaps) and min(gaps) > 0 else "beyond"


# ---- the opening ----------------------------------------------------------------------------------------------

def primary(all_facts: list[Facts]) -> Facts:
    """The comparison the opening is about, by one rule: GPU before CPU, measured noise, the larger model (FP8 is for
    size), the most FP8 runs, then the newest run. Every other set is counted in the opening (first_sets) and told in
    the body, so the opening stays one screen whatever results lie beside the committed ones."""
    return max(all_facts, key=lambda f: (f.gpu, f.noise is not None, f.key.d_model, len(f.low()),
                                         max((r.started for r in f.runs), default="")))


def others(f: Facts, all_facts: list[Facts]) -> list[Facts]:
    """The GPU comparisons besides the primary one: counted in the opening, told in the body."""
    return [g for g in all_facts if g.gpu and g is not f]


def answer_sentence(f: Facts, more: list[Facts] = ()) -> str:
    """The final gaps against the noise, on the primary set; the other GPU sets with gaps counted (first_sets)."""
    gaps, n = [g for _, g in finals(f)], f.noise
    also = first_sets([str(g.key) for g in more if g.low()], shown=0)  # "; 2 more sets below": the body tells them
    values = dict(where=where(f), n=len(gaps), kind=kind(f.low()), diffs=spread(gaps, "{:+.3f}") if gaps else "",
                  k=sum(f.beyond(g) for g in gaps),
                  noise=S(f"noise.{n.kind}", level=n.level, evals=n.evals, runs=n.runs) if n else "")
    return S(f"answer.{verdict_key(f)}" if gaps else "answer.none", **values, also=also)


def speeds(f: Facts) -> list[tuple[Run, Spread]]:
    """Each FP8 run's tokens/s over BF16's median with its run-to-run spread: an FP8 run is measured once, so it is
    given the spread of the BF16 runs around their median (with one BF16 run, its steps' interquartile range), and
    the ratio spans the extremes (Spread.over)."""
    bf16 = [r for r in f.runs if r.precision == "bf16" and not math.isnan(r.tokens_per_s)]
    if not bf16:
        return []
    tps = [r.tokens_per_s for r in bf16]
    mid = float(pd.Series(tps).median())
    lo, hi = (min(tps) / mid, max(tps) / mid) if len(tps) > 1 else (1 - bf16[0].tps_iqr, 1 + bf16[0].tps_iqr)
    base = Spread(mid, mid * lo, mid * hi)
    out = [(r, Spread(r.tokens_per_s, r.tokens_per_s * lo, r.tokens_per_s * hi).over(base)) for r in f.runs
           if r.fp8 and not math.isnan(r.tokens_per_s)]
    return sorted(out, key=lambda rs: -rs[1].mid)


def fastest(f: Facts) -> list[tuple[Run, Spread]]:
    """The fastest FP8 run and every run whose spread overlaps it (a tie is no ranking)."""
    sp = speeds(f)
    return [(r, s) for r, s in sp if s.overlaps(sp[0][1])] if sp else []


def speed_sentence(gpu_facts: list[Facts]) -> str:
    """The first GPU set's speeds by name (the primary one: opening puts it first), the others' counted."""
    if not gpu_facts:
        return S("speed.cpu")
    parts = []
    for f in gpu_facts:
        said = [f"{run_label(r)} {s.mid:.2f}x" if s.differs else S("speed.same", name=run_label(r), x=s.mid)
                for r, s in speeds(f)]
        runs = listing(said[:4] + ([f"{len(said) - 4} more"] if len(said) > 4 else []))  # one screen: the table has all
        if runs:
            bound = " " + S("speed.bound", bound=f.bound) if f.bound else ""
            parts.append(S("speed.gpu", gpu=short_gpu(f.key.hardware), runs=runs) + bound)
    return S("speed", speeds=first_sets(parts)) if parts else S("speed.none")


class Early:
    """Where the low-precision runs trail their seed's BF16 run beyond the noise (0 when none is measured)."""

    def __init__(self, f: Facts):
        self.f, self.runs = f, f.low()
        self.level = f.noise.level if f.noise else 0.0
        frame = pd.concat([f.gap(r) for r in self.runs], axis=1, keys=range(len(self.runs))).dropna() \
            if self.runs else pd.DataFrame()
        self.frame = frame  # one column per run, one row per evaluation every run made
        steps = list(frame.index)
        self.first = steps[0] if steps else None
        self.lag = next((s for s in steps if (frame.loc[s] > self.level).all()), None)
        later = [s for s in steps if self.lag is not None and s > self.lag]
        self.caught = next((s for s in later if (frame.loc[s].abs() <= self.level).all()), None) \
            if f.noise else None

    def split(self, step: int) -> tuple[list[float], list[float]]:
        row = self.frame.loc[step]
        delayed = [float(row.iloc[i]) for i, r in enumerate(self.runs) if r.recipe.startswith(DELAYED)]
        others = [float(row.iloc[i]) for i, r in enumerate(self.runs) if not r.recipe.startswith(DELAYED)]
        return delayed, others

    def who(self, step: int) -> str:
        """all (one kind of scaling ran), delayed / current (one trails the other beyond the noise), or alike."""
        delayed, others = self.split(step)
        if not delayed or not others:
            return "all"
        if min(delayed) - max(others) > self.level:
            return "delayed"
        return "current" if min(others) - max(delayed) > self.level else "alike"


def _gaps(xs: list[float], fmt: str = "{:.2f}") -> str:
    return spread(xs, fmt, "-" if "+" not in fmt else " to ")


def early_sentence(f: Facts) -> str:
    e = Early(f)
    if e.lag is None:
        return S("early.none", kind=kind(e.runs), gpu=short_gpu(f.key.hardware)) if e.runs else ""
    delayed, others = e.split(e.lag)
    text = S(f"early.{e.who(e.lag)}", step=e.lag, gpu=short_gpu(f.key.hardware), n=len(e.runs), kind=kind(e.runs),
             gaps=_gaps(delayed + others), delayed=_gaps(delayed, "{:+.2f}"), others=_gaps(others, "{:+.2f}"))
    if f.noise is None:
        return text + S("early.open")
    if e.caught is None:
        return text + S("early.stays")
    return text + S("early.caught", step=e.caught, worst=float(e.frame.loc[e.caught].abs().max()))


def meaning_sentence(f: Facts) -> str:
    if not f.gpu:
        return S("meaning.cpu")
    top = fastest(f)
    if not top:
        return S("meaning.none")
    best = " or ".join(dict.fromkeys(run_label(r) for r, _ in top))
    x = spread([s.mid for _, s in top], "{:.2f}x", "-")
    if not any(s.differs and s.mid > 1 for _, s in top):
        return S("meaning.slower", best=best, x=x, gpu=short_gpu(f.key.hardware))
    key = {"within": "free", "unknown": "unresolved"}.get(verdict_key(f), "trade")
    return S(f"meaning.{key}", best=best, x=x, gpu=short_gpu(f.key.hardware))


def on_gpus(hardware: list[str]) -> str:
    """'H200' when the sets of one GPU lack a measurement, '2 GPUs' when several do (each model's table says which):
    the gap stays one clause whatever results lie beside the committed ones."""
    names = list(dict.fromkeys(short_gpu(h, False) for h in hardware))
    return names[0] if len(names) == 1 else f"{len(names)} GPUs"


def missing_sentence(all_facts: list[Facts], bounds_missing: list, multi_gpu: bool) -> str:
    gpu = [f for f in all_facts if f.gpu]
    gaps = [] if gpu else [S("missing.gpu")]
    if gpu and "te-fused" not in {r.backend for f in gpu for r in f.runs}:
        gaps.append(S("missing.te_fused"))
    if bounds_missing:
        gaps.append(S("missing.bound", gpu=on_gpus([key.hardware for key in bounds_missing])))
    if unknown := [f.key.hardware for f in gpu if f.noise is None]:
        gaps.append(S("missing.noise", gpu=on_gpus(unknown)))
    if gpu and not multi_gpu:
        gaps.append(S("missing.multi_gpu"))
    return gaps_sentence(S, gaps)


def opening(all_facts: list[Facts], bounds_missing: list, multi_gpu: bool) -> list[Finding]:
    """The report's first lines (common.findings.block, one screen): each names the primary set and counts the rest."""
    f = primary(all_facts)
    more = others(f, all_facts)
    return [Finding("Answer", answer_sentence(f, more)),
            Finding("Speed", speed_sentence(([f] if f.gpu else []) + more)), Finding("Early steps", early_sentence(f)),
            Finding("What it means", meaning_sentence(f)),
            Finding("Not measured yet", missing_sentence(all_facts, bounds_missing, multi_gpu))]


# ---- the body: one model's paragraphs ---------------------------------------------------------------------------

def loss_paragraph(f: Facts) -> str:
    pairs = finals(f)
    if not pairs:
        return ""
    diffs = spread([g for _, g in pairs], "{:+.4f}")
    n, low = f.noise, kind(f.low())
    if n is None:
        return S("loss.unknown", kind=low, diffs=diffs)
    out = [f"{run_label(r)} {g:+.4f}" for r, g in pairs if f.beyond(g)]
    inside = [f"{run_label(r)} {g:+.4f}" for r, g in pairs if not f.beyond(g)]
    verdict = S("loss.beyond", runs=listing(out), inside=listing(inside) or "none") if out else \
        S("loss.within", n=len(pairs), diffs=diffs)
    if n.kind == "repeat":
        rerun, g = max(f.repeats, key=lambda rg: rg[1].abs().max())
        return S("loss.repeat", kind=low, seed=rerun.seed, folder=rerun.folder, evals=n.evals, level=n.level,
                 last=float(g.iloc[-1]), verdict=verdict)
    return S("loss.seeds", kind=low, runs=n.runs, evals=n.evals, level=n.level,
             exact=then("loss.exact") if n.exact else "", verdict=verdict)


def early_paragraph(f: Facts) -> str:
    e, parts = Early(f), []
    if e.first is not None and e.first != e.lag and e.who(e.first) == "delayed":
        delayed, others = e.split(e.first)
        parts.append(S("early.first", step=e.first, delayed=_gaps(delayed, "{:+.3f}"), others=_gaps(others, "{:+.3f}")))
    parts.append(early_sentence(f))
    if f.flush:
        fl = f.flush
        through = S("flush.through") if fl.zero and fl.zero + fl.flushed == fl.total else ""
        runs = ("each of the " if fl.same and fl.runs > 1 else "") + f"{fl.runs} intact delayed run" + \
            ("s" if fl.runs > 1 else "")
        zeros = S("flush.zeros", zero=fl.zero, total=fl.total) + through if fl.zero else ""
        parts.append(S("flush", runs=runs, modules=listing(fl.modules), amax=fl.amax, half=fl.half, zeros=zeros))
        if e.lag is not None and e.first != e.lag and e.who(e.first) == "delayed" and e.who(e.lag) == "alike":
            parts.append(S("flush.first_only", first=e.first, step=e.lag))
    if e.caught is not None:
        after = e.frame.loc[e.frame.index >= e.caught]
        reruns = pd.concat([g for _, g in f.repeats], axis=1, keys=range(len(f.repeats))).dropna() \
            if f.repeats else pd.DataFrame()
        reruns = reruns.loc[reruns.index >= e.caught] if len(reruns) else reruns
        if any((after[c] > 0).any() and (after[c] < 0).any() for c in after) and len(reruns):
            parts.append(S("early.sign", lo=float(after.min().min()), hi=float(after.max().max()),
                           rlo=float(reruns.min().min()), rhi=float(reruns.max().max())))
    return " ".join(p for p in parts if p)


def memory_sentence(f: Facts) -> str:
    base = [r.memory for r in f.runs if r.precision == "bf16" and not math.isnan(r.memory)]
    low = [r for r in f.runs if r.fp8 and not math.isnan(r.memory)]
    if not f.gpu or not base or not low:
        return ""
    ref = float(pd.Series(base).median())
    best = min(low, key=lambda r: r.memory)
    if best.memory >= ref:
        return S("memory.none")
    return S("memory", best=run_label(best), pct=best.memory / ref - 1)


def damage_words(what: list[Damage]) -> str:
    """'126 scales of exactly 0.0 at step 0; underflow recorded for 6 of 48 modules'."""
    def words(d: Damage) -> str:
        if d.rule == "scale":
            value = "0.0" if not d.infinite else "infinite" if d.infinite == d.found else "0.0 or infinite"
            return S("damage.scale", n=d.found, value=value, steps=spread(list(d.steps), "{}", "-"))
        if d.rule == "missing":
            return S("damage.missing", steps=len(d.steps), of=d.recorded)
        return S("damage.partial", n=d.modules, modules=d.of_modules)
    return "; ".join(words(d) for d in what)


def damaged_sentence(f: Facts) -> str:
    named = [f"{name} (`{folder}`: {damage_words(what)})" for (folder, name), what in f.damaged.items()]
    return S("damaged", runs=listing(named)) if named else ""


def underflow_paragraph(f: Facts) -> str:
    u = f.underflow
    g = u[u["role"] == "grad_output"] if len(u) else u
    if not len(g):
        return ""
    first = g[g["step"] == g["step"].min()]
    top = first.sort_values("max").iloc[-1]
    fwd = u[(u["role"] != "grad_output") & (u["step"] == g["step"].min())]["max"]
    runs = listing(list(dict.fromkeys(f"{r} (`{fo}`)" for r, fo in zip(u["run"], u["folder"]))))
    text = S("underflow.start", runs=runs, step=int(top["step"]), worst=top["max"], mean=first["mean"].max(),
             modules=listing(sorted(set(first.loc[first["max"] == top["max"], "worst_module"]))),
             fwd=fwd.max() if len(fwd) else 0.0)
    late = g[g["step"] >= g["step"].max() / 2]
    worst = late.sort_values("max").iloc[-1]
    steps = spread(sorted(set(late["step"].astype(int))), "{}", "-")
    if worst["max"] < 0.01:
        return text + " " + S("underflow.late_none", steps=steps, worst=worst["max"])
    mods = sorted(set(late.loc[late["max"] >= worst["max"] / 2, "worst_module"]))
    return text + " " + S("underflow.late", steps=steps, modules=listing(mods), worst=worst["max"],
                          mean=late["mean"].max(), run=worst["run"])


# ---- captions ---------------------------------------------------------------------------------------------------

def caption_answer(f: Facts) -> str:
    if f.noise is None:
        noise = then("caption.answer.unknown")
    else:
        what = S("caption.answer.rerun") if f.noise.kind == "repeat" else S(
            "caption.answer.seeds", runs=f.noise.runs, exact=S("caption.answer.exact") if f.repeats else "")
        noise = S("caption.answer.noise", level=f.noise.level, what=what)
    return S("caption.answer", where=where(f, ", "), kind=kind(f.low()), noise=noise,
             panels=S("caption.answer.gpu") if f.gpu else then("caption.answer.cpu"))


def caption_loss(f: Facts) -> str:
    n = len(f.band.seeds)
    band = S("caption.loss.band", n=n) if n >= 2 else S("caption.loss.one")
    return S("caption.loss", where=where(f, ", "), band=band, hollow=S("caption.loss.hollow") if f.band.repeats else "")


def caption_scales(f: Facts, shown: list[Run], missing: bool) -> str:
    kinds = {"delayed" if r.recipe.startswith(DELAYED) else "current" if r.precision == "fp8" else "block"
             for r in shown}
    how = "".join(S(f"caption.scales.{k}") for k in ("delayed", "current", "block") if k in kinds)
    left = [f"{name} (`{folder}`)" for folder, name in f.damaged]
    return S("caption.scales", where=where(f, ", "), how=how, missing=then("caption.scales.missing") if missing
             else "", left_out=then("caption.scales.left_out", runs=listing(left)) if left else "")


def caption_underflow(f: Facts) -> str:
    runs = listing(list(dict.fromkeys(f"{r} (`{fo}`)" for r, fo in zip(f.underflow["run"], f.underflow["folder"]))))
    return S("caption.underflow", where=where(f, ", "), runs=runs)


def shown_runs(f: Facts) -> list[Run]:
    """The FP8 runs whose scale record may be drawn and compared (damaged ones left out)."""
    return [r for r in f.runs if r.fp8 and ident(r) not in f.damaged]
