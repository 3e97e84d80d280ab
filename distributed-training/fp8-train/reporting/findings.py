"""fp8-train's answer, from the CSVs: does FP8 train as well as BF16, how much faster and smaller is it, and why
delayed scaling starts behind. The facts here feed the report's opening lines (findings_template.md picks the
wording by what they show) and its story section (story.py); nothing is typed in by hand.

    facts = model_facts(key, runs, band, fp8_by_folder, events_by_folder, config_by_folder)
    lines = opening(all_facts, bounds_missing, ...)            # <= 8 lines, common.findings.block

Definitions (comparison.py): the BF16 band is [min, max] of the final validation loss over distinct BF16
seeds; a paired difference is a run's final val minus that of the BF16 run of its own seed (same weights,
same batches); the repeat noise is how far a BF16 seed run twice landed from itself.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from common.findings import Finding, Sentences, gaps_sentence, listing, spread
from precision.formats import FORMATS
from reporting.comparison import Band, ModelKey, Run

HERE = Path(__file__).resolve().parent
S = Sentences(HERE / "findings_template.md")
DELAYED = "delayed"


class Paired(NamedTuple):
    run: Run
    diff: float  # final val - the same seed's BF16 final val


class Lag(NamedTuple):
    """The first evaluation: delayed-scaling runs against the band, and what their first step held."""
    step: int | None  # the first evaluation every BF16 seed made (None: fewer than two seeds)
    band: tuple[float, float]
    delayed: list[tuple[Run, float]]  # (run, val at that step)
    dynamic: list[tuple[Run, float]]
    flushed: list[str]  # grad_output modules whose step-0 amax x scale lies below half the smallest subnormal
    counts: list[tuple[int, int]]  # per delayed run with step-0 records: (grad_outputs exactly 0, grad_outputs)
    flushed_amax: float
    min_subnormal: float


class Facts(NamedTuple):
    key: ModelKey
    gpu: bool
    runs: list[Run]
    band: Band
    paired: list[Paired]
    noise: float | None  # the largest |repeat - first| of a BF16 seed, None without a repeat
    lag: Lag | None
    underflow: pd.DataFrame  # run, role, step, mean and max underflow fraction over modules
    alerts: pd.DataFrame  # every alert row of the model's runs (folder added)
    nonfinite: list[str]
    first_judged: int | None  # the first step the scale detector compares a full window (alert warm-up + window)
    bound: float | None  # bound.csv's step speedup FP8 GEMMs alone could give this model (None: not measured)


def short_gpu(hardware: str) -> str:
    """'1x NVIDIA H100 80GB HBM3' -> '1x H100 80GB'; a CPU name is kept to its model and cores."""
    m = re.search(r"(\d+x )?NVIDIA (\S+)( \d+GB)?", hardware)
    if m:
        return f"{m.group(1) or ''}{m.group(2)}{m.group(3) or ''}"
    return hardware.replace("(R)", "").replace("  ", " ")


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def run_label(r: Run) -> str:
    """torchao (tensorwise dynamic), te (delayed), native (delayed): what a learner compares."""
    how = r.recipe.split(",")[0].strip()
    return f"{r.backend} ({how})" if r.precision == "fp8" else f"{r.precision} {r.backend}"


def paired(runs: list[Run], band: Band) -> list[Paired]:
    ref = {r.seed: r for r in band.seeds}
    return [Paired(r, r.final_val - ref[r.seed].final_val) for r in runs
            if r.fp8 and r.seed in ref and not math.isnan(r.final_val)]


def repeat_noise(band: Band) -> float | None:
    first = {r.seed: r for r in band.seeds}
    diffs = [abs(r.final_val - first[r.seed].final_val) for r in band.repeats if r.seed in first]
    return max(diffs) if diffs else None


def _val_at(curves: dict[tuple[str, str], pd.DataFrame], r: Run, step: int) -> float:
    v = curves[(r.folder, r.name)].dropna(subset=["val_loss"])
    v = v[v["step"] == step]["val_loss"]
    return float(v.iloc[0]) if len(v) else math.nan


def first_lag(runs: list[Run], band: Band, curves: dict, fp8: dict[str, pd.DataFrame | None]) -> Lag | None:
    """Delayed-scaling runs at the first evaluation, against the BF16 band there, and their step-0 gradients."""
    fp8_runs = [r for r in runs if r.precision == "fp8"]
    step, lo, hi = None, math.nan, math.nan  # without two BF16 seeds: no band to judge the first evaluation by
    evals = [set(curves[(r.folder, r.name)].dropna(subset=["val_loss"])["step"]) for r in band.seeds]
    common = sorted(set.intersection(*evals)) if len(evals) >= 2 else []
    if common:
        step = common[0]
        ref = [_val_at(curves, r, step) for r in band.seeds]
        lo, hi = min(ref), max(ref)
    at = (lambda r: _val_at(curves, r, step)) if step is not None else (lambda r: math.nan)
    delayed = [(r, at(r)) for r in fp8_runs if r.recipe.startswith(DELAYED)]
    dynamic = [(r, at(r)) for r in fp8_runs if not r.recipe.startswith(DELAYED)]
    flushed, counts, amax_flushed, sub = [], [], 0.0, math.nan
    for r, _ in delayed:
        f = fp8.get(r.folder)
        if f is None or not len(f):
            continue
        g = f[(f["run"] == r.name) & (f["role"] == "grad_output")]
        g = g[g["step"] == g["step"].min()].dropna(subset=["amax", "scale"]) if len(g) else g
        if g.empty or not (g["scale"] == 1).all():
            continue
        fmt = FORMATS.get(str(g["format"].iloc[0]))
        sub = fmt.min_subnormal if fmt else math.nan
        counts.append((int((g["amax"] == 0).sum()), len(g)))
        low = g[(g["amax"] > 0) & (g["amax"] * g["scale"] < sub / 2)]
        flushed += sorted({".".join(m.split(".")[-2:]) for m in low["module"]})
        amax_flushed = max([amax_flushed, *low["amax"]])
    return Lag(step, (lo, hi), delayed, dynamic, sorted(set(flushed)), counts, amax_flushed, sub)


def underflow(runs: list[Run], fp8: dict[str, pd.DataFrame | None]) -> pd.DataFrame:
    """Per run, role and step: the mean and max underflow fraction over the run's modules (lab's layer only)."""
    parts = []
    for r in runs:
        f = fp8.get(r.folder)
        if f is None or not len(f) or "underflow_frac" not in f:
            continue
        g = f[(f["run"] == r.name)].dropna(subset=["underflow_frac"])
        if g.empty:
            continue
        a = g.groupby(["role", "step"])["underflow_frac"].agg(["mean", "max"]).reset_index()
        worst = g.assign(kind=g["module"].str.split(".").str[-2:].str.join("."))
        worst = worst.groupby(["role", "step", "kind"])["underflow_frac"].max().reset_index()
        top = worst.sort_values("underflow_frac").groupby(["role", "step"]).tail(1).set_index(["role", "step"])
        a["worst_module"] = [top.loc[(ro, st), "kind"] for ro, st in zip(a["role"], a["step"])]
        parts.append(a.assign(run=r.name, folder=r.folder))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["run", "folder", "role", "step", "mean", "max", "worst_module"])


def model_facts(key: ModelKey, runs: list[Run], band: Band, gpu: bool, curves: dict,
                fp8: dict[str, pd.DataFrame | None], events: dict[str, pd.DataFrame | None],
                configs: dict[str, dict], bound: float | None = None) -> Facts:
    names = {(r.folder, r.name) for r in runs}
    alerts = [e.assign(folder=folder) for folder, e in events.items() if e is not None and len(e)]
    alerts = pd.concat(alerts, ignore_index=True) if alerts else pd.DataFrame(columns=["folder", "run", "kind"])
    alerts = alerts[[(f, n) in names for f, n in zip(alerts["folder"], alerts["run"])]]
    bad = [f"{r.name} ({r.folder}) step {s}" for r in runs for s in r.nonfinite]
    judged = {c.get("alert_warmup", 0) + c.get("scale_window", 0) for c in configs.values() if "scale_window" in c}
    return Facts(key, gpu, runs, band, paired(runs, band), repeat_noise(band), first_lag(runs, band, curves, fp8),
                 underflow(runs, fp8), alerts, bad, judged.pop() if len(judged) == 1 else None, bound)


# ---- the opening lines -------------------------------------------------------------------------------

def primary(all_facts: list[Facts]) -> Facts:
    """The comparison the answer is about: GPU before CPU, then the most FP8 runs, then the larger model."""
    return max(all_facts, key=lambda f: (f.gpu, len(f.band.seeds) >= 2, sum(r.fp8 for r in f.runs), f.key.d_model,
                                         f.key.hardware))


def where(f: Facts) -> str:
    return (f"{short_gpu(f.key.hardware)} (d_model {f.key.d_model}, {f.key.n_layers} layers, {f.key.steps} steps, "
            f"world size {f.key.world_size})")


def loss_sentence(f: Facts) -> str:
    lim = f.band.limits("final_val")
    low = [r for r in f.runs if r.fp8]
    if lim is None:
        return (S("loss.noband", where=where(f), n=len(low), seeds=plural(len(f.band.seeds), "BF16 seed")) + " "
                + paired_sentence(f))
    lo, hi = lim
    above = [r for r in low if r.final_val > hi]
    below = [r for r in low if r.final_val < lo]
    inside = len(low) - len(above) - len(below)
    if len(above) == len(low):
        head = S("loss.all_above", where=where(f), n=len(low), seeds=len(f.band.seeds), lo=lo, hi=hi)
    elif inside == len(low):
        head = S("loss.all_inside", where=where(f), n=len(low), seeds=len(f.band.seeds), lo=lo, hi=hi)
    else:
        head = S("loss.mixed", where=where(f), n=len(low), inside=inside, above=len(above), below=len(below),
                 seeds=len(f.band.seeds), lo=lo, hi=hi)
    return head + " " + paired_sentence(f)


def paired_sentence(f: Facts) -> str:
    if not f.paired:
        return ""
    diffs = [p.diff for p in f.paired]
    if f.noise is None:
        return S("paired.nonoise", diffs=spread(diffs))
    if f.noise == 0:
        return S("paired.deterministic", diffs=spread(diffs))
    ratios = [abs(d) / f.noise for d in diffs]
    if max(abs(d) for d in diffs) <= f.noise:
        return S("paired.within", diffs=spread(diffs), noise=f.noise)
    worse = all(d > 0 for d in diffs)
    return S("paired.worse" if worse else "paired.beyond", diffs=spread(diffs), noise=f.noise,
             ratios=spread(ratios, "{:.0f}", "-"))


def _bf16(f: Facts, field: str) -> float:
    vals = [getattr(r, field) for r in f.runs if r.precision == "bf16" and not math.isnan(getattr(r, field))]
    return float(pd.Series(vals).median()) if vals else math.nan


def by_backend(f: Facts, field: str) -> list[tuple[str, float]]:
    """(label, value / BF16's median) per FP8 run, fastest (or largest) first."""
    base = _bf16(f, field)
    vals = [(run_label(r), getattr(r, field) / base) for r in f.runs if r.fp8 and not math.isnan(getattr(r, field))]
    return sorted(vals, key=lambda kv: -kv[1])


def speed_sentence(f: Facts) -> str:
    if not f.gpu:
        return S("speed.cpu")
    speed = by_backend(f, "tokens_per_s")
    mem = sorted(by_backend(f, "memory"), key=lambda kv: kv[1])
    if not speed:
        return S("speed.none")
    text = S("speed.gpu", speeds=listing([f"{name} {x:.2f}x" for name, x in speed]),
             memory=listing([f"{name} {x - 1:+.0%}" for name, x in mem]))
    if f.bound is not None and f.bound > 1:
        name, best = speed[0]
        text += " " + S("speed.bound", bound=f.bound, best=name, share=(best - 1) / (f.bound - 1))
    return text


def lag_sentence(f: Facts) -> str:
    lag = f.lag
    if lag is None or not lag.delayed:
        return S("lag.none_delayed")
    if lag.step is None:
        return (S("lag.no_band", runs=plural(len(lag.delayed), "delayed-scaling run")) + " "
                + cause_sentence(lag)).strip()
    lo, hi = lag.band
    late = [(r, v) for r, v in lag.delayed if v > hi]
    vals = spread([v for _, v in lag.delayed], "{:.2f}", "-")
    dyn = [(r, v) for r, v in lag.dynamic if not math.isnan(v)]
    dyn_in = [r for r, v in dyn if lo <= v <= hi]
    if not late:
        return S("lag.none", step=lag.step, vals=vals, lo=lo, hi=hi)
    text = S("lag.behind", step=lag.step, runs=plural(len(late), "delayed-scaling run"), vals=vals, lo=lo, hi=hi)
    if dyn:
        text += " " + S("lag.dynamic_in" if dyn_in else "lag.dynamic_out",
                        runs=listing([run_label(r) for r, _ in dyn]),
                        vals=spread([v for _, v in dyn], "{:.3f}", "-"))
    return (text + " " + cause_sentence(lag)).strip()


def cause_sentence(lag: Lag) -> str:
    """Why delayed scaling's first steps are lost, from fp8.csv at step 0 (empty where the rows do not show it)."""
    if not lag.flushed:
        return ""
    zero, total = lag.counts[0]
    each = "each of the" if len(set(lag.counts)) == 1 and len(lag.counts) > 1 else "the first of the"
    return S("lag.cause", modules=listing(lag.flushed), amax=lag.flushed_amax, half=lag.min_subnormal / 2,
             zero=zero, total=total, each=each, runs=plural(len(lag.counts), "delayed run"))


RISE = re.compile(r"above ([0-9.]+)x its (\d+)-step min ([0-9.e+-]+)")


def rise_factors(alerts: pd.DataFrame) -> list[float]:
    """How far each scale alert's scale moved against its window's extreme (from the alert's own message)."""
    out = []
    for value, message in zip(alerts["value"], alerts["message"]):
        m = RISE.search(str(message))
        if m and float(m.group(3)) > 0:
            out.append(float(value) / float(m.group(3)))
    return out


def health_sentence(f: Facts) -> str:
    a = f.alerts
    nan = S("health.nan", steps=listing(f.nonfinite)) if f.nonfinite else S("health.no_nan")
    if a.empty:
        return S("health.no_alerts") + " " + nan
    parts = []
    for (run, kind), g in a.groupby(["run", "kind"], sort=True):
        steps = sorted(set(g["step"].astype(int)))
        at = f"all at step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
        parts.append(f"{run} {len(g)} {kind} ({at})")
    text = S("health.alerts", alerts=listing(parts))
    rises = a[a["kind"] == "scale_rise"]
    if len(rises) and f.first_judged is not None and set(rises["step"].astype(int)) == {f.first_judged}:
        factors = rise_factors(rises)
        text += " " + S("health.first_judged", step=f.first_judged,
                        factors=spread(factors, "{:.0f}", "-") if factors else "more than the threshold")
    acted = "action" in a and a["action"].notna().any()
    return text + " " + S("health.acted" if acted else "health.no_action") + " " + nan


def loss_cost_seen(f: Facts) -> bool:
    """Do the runs show FP8 losing accuracy? Beyond the repeat noise where a seed was run twice; without a repeat,
    every FP8 run ending above the band."""
    diffs = [p.diff for p in f.paired]
    if f.noise is not None:
        return bool(diffs) and max(diffs) > f.noise
    lim = f.band.limits("final_val")
    low = [r for r in f.runs if r.fp8]
    return lim is not None and bool(low) and all(r.final_val > lim[1] for r in low)


def meaning_sentence(f: Facts) -> str:
    if not f.gpu:
        return S("meaning.cpu")
    speed = by_backend(f, "tokens_per_s")
    best = speed[0] if speed else None
    diffs = [p.diff for p in f.paired]
    if best is None:
        return S("meaning.none")
    if best[1] <= 1.0:
        return S("meaning.slower", best=best[0], x=best[1])
    if loss_cost_seen(f):
        return S("meaning.trade", best=best[0], x=best[1], diffs=spread(diffs))
    return S("meaning.free", best=best[0], x=best[1])


def missing_sentence(all_facts: list[Facts], bounds_missing: list[ModelKey], multi_gpu: bool) -> str:
    gaps = []
    gpu = [f for f in all_facts if f.gpu]
    if not gpu:
        gaps.append(S("missing.gpu"))
    for key in bounds_missing:
        gaps.append(S("missing.bound", where=short_gpu(key.hardware), d=key.d_model))
    backends = {r.backend for f in gpu for r in f.runs}
    if gpu and "te-fused" not in backends:
        gaps.append(S("missing.te_fused"))
    if gpu and not multi_gpu:
        gaps.append(S("missing.multi_gpu"))
    return gaps_sentence(S, gaps)


def opening(all_facts: list[Facts], bounds_missing: list[ModelKey], multi_gpu: bool) -> list[Finding]:
    """The report's first lines (common.findings.block)."""
    f = primary(all_facts)
    lines = [Finding("Question", S("question")), Finding("Answer", loss_sentence(f)),
             Finding("Speed and memory", speed_sentence(f)), Finding("Why delayed scaling starts behind",
                                                                    lag_sentence(f)),
             Finding("Alerts and NaNs", health_sentence(f)), Finding("What it means", meaning_sentence(f)),
             Finding("Not measured yet", missing_sentence(all_facts, bounds_missing, multi_gpu))]
    others = [g for g in all_facts if g is not f and g.gpu]
    if others:
        lines.insert(2, Finding("Also measured", loss_sentence(others[0]) + " " + speed_sentence(others[0])))
    return lines
