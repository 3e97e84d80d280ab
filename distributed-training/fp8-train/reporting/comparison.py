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
    BF16 seeds       one BF16 run per DISTINCT seed (the first measured, by timestamp); a rerun of a seed
                     is shown beside it, never counted twice (evidence.py: the noise)
    FP8 bound        bound.csv's bound_speedup b for the same shape and hardware: the step speedup FP8
                     GEMMs alone could give (everything else at BF16 speed). For a run of speedup s:
                     gain captured = (s - 1) / (b - 1), the share of the possible gain it realised (100%:
                     all of it; below 0: slower than BF16); bound ratio = s / b, issue 23's target (>= 0.9)
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


def table(runs: list[Run], band: Band, gpu: bool, bound: pd.Series | None) -> list[str]:
    """The model's one table: every run, BF16 first, its final val beside the first-measured BF16 run of its seed."""
    bf16 = [r.tokens_per_s for r in runs if r.precision == "bf16"]
    base = pd.Series(bf16).median() if bf16 else math.nan
    mem = pd.Series([r.memory for r in runs if r.precision == "bf16"]).median() if bf16 else math.nan
    with_bound = gpu and bound is not None  # no bound measured: a sentence under the table says so, not two columns
    head = ["run", "folder", "precision, scaling", "backend, version", "compiled", "tokens/s", "vs BF16 (range)",
            *(["FP8 bound", "gain captured"] if with_bound else []), "MFU",
            "peak memory MiB (vs BF16)" if gpu else "saved activations MiB", "final loss", "final val",
            "final val - seed's BF16"]
    first = {r.seed: r for r in band.seeds}
    rows = []
    for r in sorted(runs, key=lambda r: (r.precision != "bf16", r.precision, r.backend, r.started)):
        speed = r.tokens_per_s / base
        row = [r.name, r.folder, f"{r.precision}, {r.recipe}", f"{r.backend}, {r.version}",
               "compiled" if r.compiled else "eager", f"{r.tokens_per_s:,.0f} ±{r.tps_iqr:.1%}",
               f"{speed:.2f}x ({r.tokens_per_s / max(bf16):.2f}-{r.tokens_per_s / min(bf16):.2f})" if bf16
               else "no BF16 run", *(bound_cells(r, speed, bound) if with_bound else []), mfu_cell(r, gpu),
               "not measured" if math.isnan(r.memory) else f"{r.memory:,.0f}" + (
                   f" ({r.memory / mem - 1:+.1%})" if gpu and r.fp8 else "")]
        ref = first.get(r.seed)
        rows.append(row + [f"{r.final_loss:.4f}", f"{r.final_val:.4f}", "no BF16 run of its seed" if ref is None else
                           "reference" if ref is r else f"{r.final_val - ref.final_val:+.4f}"
                           + (" (rerun)" if r.precision == "bf16" else "")])
    return _md(head, rows)


def mfu_cell(r: Run, gpu: bool) -> str:
    if not math.isnan(r.mfu):
        return f"{r.mfu:.1%}"
    if not gpu:
        return "n/a (CPU)"
    return "n/a (FP8)" if r.fp8 else "not measured"


def bound_cells(r: Run, speed: float, bound: pd.Series | None) -> list[str]:
    """The FP8 bound and the gain captured, (s - 1) / (b - 1)."""
    if not r.fp8:
        return ["", ""]
    if bound is None:
        return ["not measured", "not measured"]
    b = float(bound["bound_speedup"])
    return [f"{b:.2f}x", "n/a (bound <= 1)" if b <= 1 else f"{(speed - 1) / (b - 1):.0%}"]


def _md(head: list[str], rows: list[list[str]]) -> list[str]:
    from common.markdown import table as md
    return md(head, rows).splitlines() + [""]


def targets(key: ModelKey, runs: list[Run], bound: pd.Series | None, within: dict) -> list[str]:
    """The GPU targets against this model's runs (issue 23); a target with no run says so. within: (folder, run) ->
    whether its final gap from its seed's BF16 run lies inside the noise (None: no noise measured)."""
    bf16 = [r for r in runs if r.precision == "bf16"]
    base = pd.Series([r.tokens_per_s for r in bf16]).median() if bf16 else math.nan
    at = "" if key.d_model == 4096 else f" (measured at hidden {key.d_model})"
    mfu = pd.Series([r.mfu for r in bf16]).dropna()
    rows = [[f"BF16 MFU >= {MFU_TARGET:.0%}", f"{mfu.median():.1%}" if len(mfu) else "not measured",
             _met(len(mfu) and mfu.median() >= MFU_TARGET, len(mfu))]]
    fp8 = [r for r in runs if r.precision == "fp8"]
    for backend, goal in SPEEDUP_TARGETS.items():
        mine = [r for r in fp8 if r.backend == backend]
        rows += [[f"FP8 {backend} ({r.recipe}, {r.folder}) / BF16 tokens/s >= {goal:.2f}{at}",
                  f"{r.tokens_per_s / base:.2f}x", _met(r.tokens_per_s / base >= goal, not math.isnan(base))]
                 for r in mine] or [[f"FP8 {backend} / BF16 tokens/s >= {goal:.2f}{at}", "not measured (no run)", ""]]
    ao = [r.tokens_per_s for r in fp8 if r.backend == "torchao"]
    rows += [[f"native FP8 >= {NATIVE_WITHIN:.2f}x torchao (tokens/s)",
              f"{r.tokens_per_s / max(ao):.2f}x of torchao" if ao else "not measured (no torchao run)",
              _met(bool(ao) and r.tokens_per_s / max(ao) >= NATIVE_WITHIN, bool(ao))]
             for r in fp8 if r.backend == "native"]
    what = f"FP8 bound ratio (speedup / bound) >= {BOUND_SHARE}"
    if bound is None or not fp8:
        rows.append([what, "not measured (no bound.csv row for this model)" if fp8 else "no FP8 run", ""])
    else:
        b = float(bound["bound_speedup"])
        ratios = [(r, r.tokens_per_s / base / b) for r in fp8]
        met = sum(x >= BOUND_SHARE for _, x in ratios)
        rows.append([f"{what} (bound {b:.2f}x)", ", ".join(f"{r.backend} ({r.folder}) {x:.2f}" for r, x in ratios),
                     f"{met} of {len(ratios)} met" if met == len(ratios) else f"**{met} of {len(ratios)} met**"])
    judged = [v for r in fp8 if (v := within.get((r.folder, r.name))) is not None]
    rows.append(["FP8 final val loss inside the noise of its seed's BF16 run",
                 f"{sum(judged)} of {len(judged)} runs" if judged else "no noise measured",
                 _met(all(judged), bool(judged))])
    return _md(["target (issue 23)", "measured", ""], rows)


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
            out.append(f"{name} (`{f.name}`): {why}" + (f" -- it ran in {', '.join(f'`{x}`' for x in later)}"
                                                          if later else ""))
    return out
