"""One comparison per model: every run of the same model, from every results folder, in one table.

A model is its identity (ModelKey): shape, batch, steps, data, hardware and world size. Runs of one
model made by different invocations (results/h100, results/h100-te, ...) meet here; runs of another
shape, GPU or world size never do. The definitions the report uses (each defined here once):

    tokens/s         median over a run's steps after the first 10% (warm-up, compile); +- is half its
                     interquartile range over those steps, relative
    vs BF16          tokens/s / the median tokens/s of the model's BF16 runs (every BF16 run counts,
                     repeats of a seed too: speed does not depend on the seed); the range divides by the
                     fastest and the slowest BF16 run
    final loss       mean training loss over the last 10% of steps; final val: validation loss at the
                     last step, on the same fixed validation batches for every run
    BF16 band        [min, max] over DISTINCT BF16 seeds, one run per seed (the first measured, by
                     timestamp); a repeat of a seed is shown beside it, never counted twice. A run is
                     "in band" if its value lies inside; otherwise its distance from the band is given
    FP8 bound        bound.csv's bound_speedup for the same shape and hardware: the step speedup FP8
                     GEMMs alone could give (everything else at BF16 speed); % of bound = (speedup - 1)
                     / (bound - 1), the share of that possible gain a run realised
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

from precision import backends
from precision.modes import LOW

# Issue 23's targets, at the GPU preset (hidden 4096): FP8 / BF16 tokens/s per backend (TE as its users
# run it, torchao), the lab's own layer against torchao, every FP8 run against its model's measured bound
# (speedup >= BOUND_SHARE x bound), BF16 MFU, and every FP8 run's final validation loss in the BF16 band.
SPEEDUP_TARGETS = {"te-fused": 1.30, "torchao": 1.25}
NATIVE_WITHIN, MFU_TARGET, BOUND_SHARE = 0.95, 0.52, 0.9
NOT_RECORDED_VERSION = "not recorded (run predates the column)"


class Folder(NamedTuple):
    name: str
    steps: pd.DataFrame
    config: dict
    fp8: pd.DataFrame | None


class ModelKey(NamedTuple):
    hardware: str
    world_size: int
    d_model: int
    n_layers: int
    n_heads: int | str
    seq_len: int
    batch: int
    steps: int
    data: str

    def describe(self) -> str:
        return (f"d_model {self.d_model}, {self.n_layers} layers, {self.n_heads} heads, seq {self.seq_len}, "
                f"batch {self.batch} ({self.batch * self.seq_len} tokens/step), {self.steps} steps; "
                f"{self.hardware}, world size {self.world_size}")


def model_key(steps: pd.DataFrame, cfg: dict) -> ModelKey:
    r = steps.iloc[0]
    return ModelKey(str(r["hardware"]), int(r["world_size"]), int(r["d_model"]), int(r["n_layers"]),
                    cfg.get("n_heads", "?"), int(r["seq_len"]), int(r["batch"]),
                    int(cfg.get("steps", steps["step"].max() + 1)),
                    str(cfg.get("data_fingerprint") or cfg.get("data", "?")))


class Run(NamedTuple):
    folder: str
    name: str
    precision: str
    backend: str
    version: str
    recipe: str
    compiled: bool
    seed: int
    tokens_per_s: float
    tps_iqr: float  # half the interquartile range of tokens/s, relative to the median
    mfu: float
    memory: float  # GPU: peak allocated MiB; CPU: saved activations MiB
    final_loss: float
    final_val: float
    nonfinite: list[int]
    started: str

    @property
    def fp8(self) -> bool:
        return self.precision in LOW


def _record(name: str) -> backends.Backend:
    """The record of a CSV's precision_backend; a name no record has (an older run's) reads as torch's."""
    return backends.lookup(name) or backends.TORCH


def recipe(precision: str, backend: str, cfg: dict, gpu: bool) -> str:
    """How a run computed in its precision and scaled its low-precision tensors, from its folder's config."""
    if precision == "fp32":
        return "full fp32"
    if precision in ("bf16", "fp16"):
        how = "autocast" if gpu else "emulated (operands rounded, fp32 GEMMs)"
        return how + (" + GradScaler" if precision == "fp16" else "")
    if precision != "fp8":
        rule = cfg.get("mx_scale_rule") or ("te" if precision == "mxfp8" else "ocp") + " (before the flag)"
        return f"block scales, E8M0 rule {rule}" if precision.startswith("mx") else "block scales (E4M3 x fp32)"
    if _record(backend).dynamic_only:  # torchao: its recipe, whatever --fp8-scaling said
        return f"{cfg.get('torchao_recipe', 'tensorwise')} dynamic"
    if cfg.get("fp8_scaling") == "current":
        return "current"
    return f"delayed, {cfg.get('amax_history', '?')}-step {cfg.get('amax_algo', 'max')}"


def version_cell(g: pd.DataFrame, backend: str) -> str:
    """The backend's package and version; rows from before the column: torch's own version where the
    backend is torch (its torch_version column), else not recorded."""
    if "precision_backend_version" in g and g["precision_backend_version"].notna().any():
        return str(g["precision_backend_version"].dropna().iloc[0])
    if _record(backend).package is None:  # torch ran it: its version is the torch_version column
        return f"torch {g['torch_version'].iloc[0]}"
    return NOT_RECORDED_VERSION


def summarize(f: Folder) -> list[Run]:
    out = []
    for name, g in f.steps.groupby("run", sort=False):
        g = g.sort_values("step")
        n = len(g)
        warm = g.iloc[n // 10:] if n >= 10 else g
        tps = warm["tokens_per_s"]
        val = g["val_loss"].dropna()
        mem_col = "peak_mem_MiB" if is_gpu(f.steps) else "saved_act_MiB"
        mfu = warm["mfu"].dropna() if "mfu" in warm else pd.Series(dtype=float)
        prec, backend = str(g["precision"].iloc[0]), str(g["precision_backend"].iloc[0])
        out.append(Run(f.name, str(name), prec, backend, version_cell(g, backend),
                       recipe(prec, backend, f.config, is_gpu(f.steps)),
                       str(g["compiled"].iloc[0]).lower() == "true", int(g["seed"].iloc[0]), tps.median(),
                       (tps.quantile(0.75) - tps.quantile(0.25)) / 2 / tps.median(),
                       mfu.median() if len(mfu) else math.nan,
                       g[mem_col].max() if g[mem_col].notna().any() else math.nan,
                       g["loss"].iloc[-max(1, n // 10):].mean(), val.iloc[-1] if len(val) else math.nan,
                       g.loc[g["nonfinite"].astype(str).str.lower() == "true", "step"].astype(int).tolist(),
                       str(g["timestamp_utc"].min()) if "timestamp_utc" in g else ""))
    return out


def is_gpu(steps: pd.DataFrame | None) -> bool:
    return steps is not None and str(steps["cuda_version"].iloc[0]) not in ("none", "nan")


class Band(NamedTuple):
    seeds: list[Run]  # one BF16 run per distinct seed (the first measured)
    repeats: list[Run]  # further runs of a seed already in `seeds`

    def limits(self, field: str) -> tuple[float, float] | None:
        vals = [getattr(r, field) for r in self.seeds if not math.isnan(getattr(r, field))]
        return (min(vals), max(vals)) if len(vals) >= 2 else None

    def judge(self, value: float, field: str) -> str:
        lim = self.limits(field)
        if lim is None or math.isnan(value):
            return "no band" if lim is None else "not measured"
        lo, hi = lim
        if lo <= value <= hi:
            return "in band"
        return f"{value - hi:+.4f} above" if value > hi else f"{value - lo:+.4f} below"


def bf16_band(runs: list[Run]) -> Band:
    seeds, repeats = {}, []
    for r in sorted((r for r in runs if r.precision == "bf16"), key=lambda r: (r.started, r.folder)):
        (repeats.append(r) if r.seed in seeds else seeds.__setitem__(r.seed, r))
    return Band(sorted(seeds.values(), key=lambda r: r.seed), repeats)


def bound_for(key: ModelKey, bounds: pd.DataFrame | None) -> pd.Series | None:
    """The bound.csv row of this model's shape and hardware (the newest, if several), or None."""
    if bounds is None or bounds.empty:
        return None
    m = bounds[(bounds["hardware"] == key.hardware) & (bounds["d_model"] == key.d_model)
               & (bounds["n_layers"] == key.n_layers) & (bounds["seq_len"] == key.seq_len)
               & (bounds["tokens_per_step"] == key.batch * key.seq_len)]
    if "world_size" in m:
        m = m[m["world_size"] == key.world_size]
    return m.sort_values("timestamp_utc").iloc[-1] if "timestamp_utc" in m and len(m) else (
        m.iloc[-1] if len(m) else None)


def _mark(value: float, verdict: str, fmt: str = ".4f") -> str:
    return "not measured" if math.isnan(value) else f"{value:{fmt}} ({verdict})"


def table(runs: list[Run], band: Band, gpu: bool, bound: pd.Series | None) -> list[str]:
    """The model's one table: every run, BF16 first."""
    bf16 = [r.tokens_per_s for r in runs if r.precision == "bf16"]
    base = pd.Series(bf16).median() if bf16 else math.nan
    mem_head = "peak memory (MiB)" if gpu else "saved activations (MiB)"
    head = ["run", "folder", "precision, scaling", "backend, version", "compiled", "tokens/s", "vs BF16 (range)"]
    with_bound = gpu and bound is not None  # no bound measured: a sentence under the table says so, not two columns
    head += ["FP8 bound", "% of bound"] if with_bound else []
    head += ["MFU", mem_head, "final loss (vs BF16 band)", "final val (vs BF16 band)"]
    rows = []
    repeat_of = {id(r): next(s for s in band.seeds if s.seed == r.seed) for r in band.repeats}
    for r in sorted(runs, key=lambda r: (r.precision != "bf16", r.precision, r.backend, r.started)):
        speed = r.tokens_per_s / base
        spread = f"{r.tokens_per_s / max(bf16):.2f}-{r.tokens_per_s / min(bf16):.2f}" if bf16 else ""
        row = [r.name, r.folder, f"{r.precision}, {r.recipe}", f"{r.backend}, {r.version}",
               "compiled" if r.compiled else "eager", f"{r.tokens_per_s:,.0f} ±{r.tps_iqr:.1%}",
               f"{speed:.2f}x ({spread})" if bf16 else "no BF16 run"]
        if with_bound:
            row += bound_cells(r, speed, bound)
        row.append(mfu_cell(r, gpu))
        row.append(f"{r.memory:,.1f}" if not math.isnan(r.memory) else "not measured")
        if id(r) in repeat_of:
            s = repeat_of[id(r)]
            row += [_mark(r.final_loss, f"repeat of s{s.seed} from {s.folder}: {r.final_loss - s.final_loss:+.4f}"),
                    _mark(r.final_val, f"repeat of s{s.seed} from {s.folder}: {r.final_val - s.final_val:+.4f}")]
        elif r.precision == "bf16":
            row += [_mark(r.final_loss, "band"), _mark(r.final_val, "band")]
        else:
            row += [_mark(r.final_loss, band.judge(r.final_loss, "final_loss")),
                    _mark(r.final_val, band.judge(r.final_val, "final_val"))]
        rows.append(row)
    return _md(head, rows)


def mfu_cell(r: Run, gpu: bool) -> str:
    if not math.isnan(r.mfu):
        return f"{r.mfu:.1%}"
    if not gpu:
        return "n/a (CPU)"
    return "n/a (FP8)" if r.fp8 else "not measured"


def bound_cells(r: Run, speed: float, bound: pd.Series | None) -> list[str]:
    if not r.fp8:
        return ["", ""]
    if bound is None:
        return ["not measured", "not measured"]
    b = float(bound["bound_speedup"])
    if b <= 1:
        return [f"{b:.2f}x", "n/a (bound <= 1)"]
    return [f"{b:.2f}x", f"{(speed - 1) / (b - 1):.0%}"]


def _md(head: list[str], rows: list[list[str]]) -> list[str]:
    from common.markdown import table as md
    return md(head, rows).splitlines() + [""]


def targets(key: ModelKey, runs: list[Run], band: Band, bound: pd.Series | None) -> list[str]:
    """The GPU targets against this model's runs (issue 23); a target with no run says so."""
    bf16 = [r for r in runs if r.precision == "bf16"]
    base = pd.Series([r.tokens_per_s for r in bf16]).median() if bf16 else math.nan
    at = "" if key.d_model == 4096 else f" (measured at hidden {key.d_model})"
    mfu = pd.Series([r.mfu for r in bf16]).dropna()
    rows = [[f"BF16 MFU >= {MFU_TARGET:.0%}", f"{mfu.median():.1%}" if len(mfu) else "not measured",
             _met(len(mfu) and mfu.median() >= MFU_TARGET, len(mfu))]]
    fp8 = [r for r in runs if r.precision == "fp8"]
    for backend, goal in SPEEDUP_TARGETS.items():
        mine = [r for r in fp8 if r.backend == backend]
        for r in mine:
            ratio = r.tokens_per_s / base
            rows.append([f"FP8 {backend} ({r.recipe}, {r.folder}) / BF16 tokens/s >= {goal:.2f}{at}",
                         f"{ratio:.2f}x", _met(ratio >= goal, not math.isnan(ratio))])
        if not mine:
            rows.append([f"FP8 {backend} / BF16 tokens/s >= {goal:.2f}{at}", "not measured (no run)", ""])
    ao = [r.tokens_per_s for r in fp8 if r.backend == "torchao"]
    for r in [r for r in fp8 if r.backend == "native"]:
        ratio = r.tokens_per_s / max(ao) if ao else math.nan
        rows.append([f"native FP8 >= {NATIVE_WITHIN:.2f}x torchao (tokens/s)",
                     f"{ratio:.2f}x of torchao" if ao else "not measured (no torchao run)",
                     _met(ratio >= NATIVE_WITHIN, bool(ao))])
    for r in fp8:
        rows.append(_bound_target(r, r.tokens_per_s / base, bound))
    for r in fp8:
        verdict = band.judge(r.final_val, "final_val")
        rows.append([f"{r.name} ({r.folder}) final val loss in the {len(band.seeds)}-seed BF16 band",
                     _mark(r.final_val, verdict), _met(verdict == "in band", verdict not in ("no band",
                                                                                            "not measured"))])
    return _md(["target", "measured", ""], rows)


def _bound_target(r: Run, speed: float, bound: pd.Series | None) -> list[str]:
    what = f"{r.name} ({r.folder}) speedup >= {BOUND_SHARE} x FP8 bound"
    if bound is None:
        return [what, "not measured (no bound.csv row for this model)", ""]
    b = float(bound["bound_speedup"])
    return [what, f"{speed:.2f}x of {b:.2f}x = {speed / b:.2f}", _met(speed >= BOUND_SHARE * b, True)]


def _met(ok: bool, measured: bool) -> str:
    return "" if not measured else ("met" if ok else "**not met**")


def skipped(folders: list[Folder], runs: list[Run]) -> list[str]:
    """Runs a preset asked for that could not run, once each, with why (and where they ran after all)."""
    seen, out = set(), []
    for f in folders:
        for note in f.config.get("skipped_runs") or []:
            name, _, why = str(note).partition(": ")
            if (name, why) in seen:
                continue
            seen.add((name, why))
            later = sorted({r.folder for r in runs if r.name == name})
            out.append(f"- {name} (`{f.name}`): {why}" + (f" -- it ran in {', '.join(f'`{x}`' for x in later)}"
                                                          if later else ""))
    return out
