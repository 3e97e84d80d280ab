"""The numbers fp8-train's sentences are chosen by, per model (no words here: findings.py picks them).

    facts = model_facts(key, runs, band, gpu, curves, fp8_by_folder, events_by_folder, configs, bound)

    gaps        each low-precision run's validation loss minus that of the BF16 run of its seed (same weights,
                same batches), at every evaluation; repeats: a BF16 seed run again, minus its first run
    noise       what a gap is judged against, over EVERY evaluation, never one step's draw: the largest gap
                between a BF16 seed and its rerun; where reruns reproduce every evaluation exactly (a
                deterministic CPU) or none exist, the largest spread between distinct BF16 seeds; with
                neither, not measured (None), and no gap is called a difference
    flush       delayed scaling's step 0: scale 1 before any amax history, and the grad_outputs flushed to 0
    damage      a run's scale record is damaged when it holds a scale of exactly 0.0 (FP8 max / amax never
                is), a module missing at a recorded step, or underflow recorded for some modules only; such a
                run is left out of every scale and underflow comparison (and named)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

from precision.formats import FORMATS
from reporting.comparison import Band, ModelKey, Run

DELAYED = "delayed"


class Noise(NamedTuple):
    level: float  # the largest |gap| between BF16 runs at any evaluation
    kind: str  # "repeat" (one seed run twice) or "seeds" (distinct seeds)
    evals: int  # evaluations compared
    runs: int  # BF16 runs compared
    exact: bool  # reruns exist and reproduced every evaluation exactly (so the level is the seeds')


class Flush(NamedTuple):
    """Delayed scaling's first backward: every grad_output scale is 1 before the amax history holds anything."""
    modules: list[str]  # grad_output kinds (attn.wo, ...) whose amax x scale lies below half the smallest subnormal
    amax: float  # the largest of those amaxes
    half: float  # half the format's smallest subnormal
    zero: int  # grad_outputs exactly 0 (of the first intact delayed run)
    flushed: int  # grad_outputs flushed to 0 by the cast (of the same run)
    total: int
    runs: int  # delayed runs with an intact step-0 record
    same: bool  # all of them show the same counts


class Facts(NamedTuple):
    key: ModelKey
    gpu: bool
    runs: list[Run]
    band: Band
    gaps: dict[tuple[str, str], pd.Series]  # (folder, run) of a low-precision run -> gap per evaluation step
    repeats: list[tuple[Run, pd.Series]]  # BF16 reruns and their gap from the seed's first run
    noise: Noise | None
    flush: Flush | None
    damaged: dict[tuple[str, str], list[tuple[str, dict]]]  # (folder, run) -> what is wrong: (kind, numbers)
    underflow: pd.DataFrame  # run, folder, role, step, mean and max underflow over modules, worst module
    alerts: pd.DataFrame  # every alert of the model's runs (folder added)
    nonfinite: list[str]
    first_judged: int | None  # the first step the scale detector compares a full window
    bound: float | None  # bound.csv's step speedup FP8 GEMMs alone could give (None: not measured)

    def low(self) -> list[Run]:
        """The low-precision runs with a gap curve, in the order of the runs."""
        return [r for r in self.runs if (r.folder, r.name) in self.gaps]

    def gap(self, r: Run) -> pd.Series:
        return self.gaps[(r.folder, r.name)]

    def beyond(self, x: float) -> bool:
        """Is a gap a difference? Only outside the noise; with no noise measured, never."""
        return self.noise is not None and abs(x) > self.noise.level


def ident(r: Run) -> tuple[str, str]:
    return r.folder, r.name


def val_curve(curves: dict[tuple[str, str], pd.DataFrame], r: Run) -> pd.Series:
    return curves[ident(r)].dropna(subset=["val_loss"]).set_index("step")["val_loss"]


def gap_curve(curves: dict, r: Run, ref: Run) -> pd.Series:
    """r's validation loss minus ref's at every evaluation both made."""
    return (val_curve(curves, r) - val_curve(curves, ref)).dropna()


def noise(band: Band, curves: dict) -> Noise | None:
    first = {r.seed: r for r in band.seeds}
    reruns = [gap_curve(curves, r, first[r.seed]) for r in band.repeats if r.seed in first]
    reruns = [g for g in reruns if len(g)]
    level = max((g.abs().max() for g in reruns), default=0.0)
    if level > 0:
        return Noise(float(level), "repeat", max(len(g) for g in reruns), 2, False)
    if len(band.seeds) < 2:
        return None
    vals = pd.concat([val_curve(curves, r) for r in band.seeds], axis=1).dropna()
    if vals.empty:
        return None
    spread = vals.max(axis=1) - vals.min(axis=1)
    return Noise(float(spread.max()), "seeds", len(vals), len(band.seeds), bool(reruns))


def damage(r: Run, fp8: pd.DataFrame | None) -> list[tuple[str, dict]]:
    """What is wrong with a run's scale record ([] when nothing is)."""
    g = fp8[fp8["run"] == r.name] if fp8 is not None and len(fp8) else pd.DataFrame()
    if g.empty:
        return []
    out = []
    modules = g["module"].nunique()
    zero = g[g["scale"] == 0]
    if len(zero):
        out.append(("zero", dict(n=len(zero), steps=sorted(set(zero["step"].astype(int))))))
    per_step = g.groupby("step")["module"].nunique()
    if (per_step < modules).any():
        out.append(("missing", dict(steps=len(per_step[per_step < modules]), of=len(per_step))))
    u = g.dropna(subset=["underflow_frac"]).groupby("step")["module"].nunique()
    if (u < modules).any():
        out.append(("partial", dict(n=int(u.min()), modules=modules)))
    return out


def first_flush(runs: list[Run], fp8: dict[str, pd.DataFrame | None], damaged: dict) -> Flush | None:
    """Step 0 of the delayed-scaling runs whose record is intact: which grad_outputs flushed to zero."""
    flushed, counts, amax, half = set(), [], 0.0, math.nan
    for r in runs:
        f = fp8.get(r.folder)
        if not r.fp8 or not r.recipe.startswith(DELAYED) or ident(r) in damaged or f is None or not len(f):
            continue
        g = f[(f["run"] == r.name) & (f["role"] == "grad_output")]
        g = g[g["step"] == g["step"].min()].dropna(subset=["amax", "scale"]) if len(g) else g
        if g.empty or not (g["scale"] == 1).all():
            continue
        fmt = FORMATS.get(str(g["format"].iloc[0]))
        half = fmt.min_subnormal / 2 if fmt else math.nan
        low = g[(g["amax"] > 0) & (g["amax"] * g["scale"] < half)]
        flushed |= {".".join(m.split(".")[-2:]) for m in low["module"]}
        amax = max([amax, *low["amax"]])
        counts.append((int((g["amax"] == 0).sum()), len(low), len(g)))
    if not flushed:
        return None
    return Flush(sorted(flushed), amax, half, *counts[0], len(counts), len(set(counts)) == 1)


def underflow(runs: list[Run], fp8: dict[str, pd.DataFrame | None], damaged: dict) -> pd.DataFrame:
    """Per intact run, role and step: the mean and max underflow fraction over its modules, and the worst module."""
    parts = []
    for r in runs:
        f = fp8.get(r.folder)
        if ident(r) in damaged or f is None or not len(f):
            continue
        g = f[f["run"] == r.name].dropna(subset=["underflow_frac"])
        if g.empty:
            continue
        a = g.groupby(["role", "step"])["underflow_frac"].agg(["mean", "max"]).reset_index()
        kind = g.assign(kind=g["module"].str.split(".").str[-2:].str.join("."))
        worst = kind.sort_values("underflow_frac").groupby(["role", "step"]).tail(1).set_index(["role", "step"])
        a["worst_module"] = [worst.loc[(ro, st), "kind"] for ro, st in zip(a["role"], a["step"])]
        parts.append(a.assign(run=r.name, folder=r.folder))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["run", "folder", "role", "step", "mean", "max", "worst_module"])


def model_facts(key: ModelKey, runs: list[Run], band: Band, gpu: bool, curves: dict,
                fp8: dict[str, pd.DataFrame | None], events: dict[str, pd.DataFrame | None],
                configs: dict[str, dict], bound: float | None = None) -> Facts:
    ref = {r.seed: r for r in band.seeds}
    gaps = {ident(r): gap_curve(curves, r, ref[r.seed]) for r in runs if r.fp8 and r.seed in ref}
    gaps = {k: g for k, g in gaps.items() if len(g)}
    repeats = [(r, gap_curve(curves, r, ref[r.seed])) for r in band.repeats if r.seed in ref]
    damaged = {ident(r): d for r in runs if r.fp8 and (d := damage(r, fp8.get(r.folder)))}
    names = {ident(r) for r in runs}
    alerts = [e.assign(folder=folder) for folder, e in events.items() if e is not None and len(e)]
    alerts = pd.concat(alerts, ignore_index=True) if alerts else pd.DataFrame(columns=["folder", "run", "kind"])
    alerts = alerts[[(f, n) in names for f, n in zip(alerts["folder"], alerts["run"])]]
    bad = [f"{r.name} ({r.folder}) step {s}" for r in runs for s in r.nonfinite]
    judged = {c.get("alert_warmup", 0) + c.get("scale_window", 0) for c in configs.values() if "scale_window" in c}
    return Facts(key, gpu, runs, band, gaps, repeats, noise(band, curves), first_flush(runs, fp8, damaged), damaged,
                 underflow(runs, fp8, damaged), alerts, bad, judged.pop() if len(judged) == 1 else None, bound)
