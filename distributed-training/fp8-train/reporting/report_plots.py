"""The report's plots, each showing what its table shows, in the same direction.

    loss        per model: training loss (10-step mean) and validation loss of every run over the BF16
                band of distinct seeds, and each run's final validation loss against the band
    scales      per model: every FP8 run's per-tensor scales over steps, colour = role; a role the run
                did not record is named in its panel
    crossover   per benchmark: speedup = BF16 step time / step time (higher is better), every hidden
                size ticked, the spread from the benchmark's own timings
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.plotting import new_figure, save
from health.panels import ROLE_COLORS
from reporting.comparison import Band, Run


def _label(r: Run) -> str:
    return f"{r.name} ({r.folder})"


def plot_loss(runs: list[Run], curves: dict[tuple[str, str], pd.DataFrame], band: Band, path: Path,
              footer: str) -> Path:
    fig, (ax, axv, axf) = new_figure(1, 3, figsize=(14, 4.4))
    smooth = {id(r): curves[(r.folder, r.name)].set_index("step")["loss"].rolling(10, min_periods=1).mean()
              for r in runs}
    vals = {id(r): curves[(r.folder, r.name)].dropna(subset=["val_loss"]).set_index("step")["val_loss"]
            for r in runs}
    seeds = band.seeds
    if len(seeds) >= 2:
        label = f"BF16 band ({len(seeds)} seeds: {', '.join(f's{r.seed}' for r in seeds)})"
        for a, series in ((ax, smooth), (axv, vals)):
            b = pd.concat([series[id(r)] for r in seeds], axis=1)
            a.fill_between(b.index, b.min(axis=1), b.max(axis=1), color="0.8", label=label)
    for r in seeds[:1] if len(seeds) < 2 else []:  # one seed: a reference line, said to be no band
        for a, series in ((ax, smooth), (axv, vals)):
            a.plot(series[id(r)].index, series[id(r)], color="0.3", ls="--", lw=1,
                   label=f"BF16 s{r.seed} (1 seed: no band)")
    others = [r for r in runs if r.precision != "bf16"]
    for r in others:
        line, = ax.plot(smooth[id(r)].index, smooth[id(r)], lw=1.1, label=_label(r))
        axv.plot(vals[id(r)].index, vals[id(r)], marker="o", ms=3, lw=1.1, color=line.get_color(), label=_label(r))
    ax.set(xlabel="step", ylabel="train loss (10-step mean)", title="training loss")
    tail = pd.concat([s.iloc[len(s) // 10:] for s in smooth.values()])
    ax.set_ylim(tail.quantile(0.01) - 0.05, tail.max() + 0.05)
    axv.set(xlabel="step", ylabel="validation loss", title="validation loss")
    axv.legend(fontsize=7)
    _final_val(axf, runs, band)
    return save(fig, path, footer)


def _final_val(ax, runs: list[Run], band: Band) -> None:
    """Final validation loss per run against the band: the table's verdict column, drawn."""
    lim = band.limits("final_val")
    if lim:
        ax.axvspan(*lim, color="0.8")
    order = sorted(runs, key=lambda r: (r.precision != "bf16", r.precision, r.backend, r.started))
    repeats = {id(r) for r in band.repeats}
    for y, r in enumerate(order):
        hollow = id(r) in repeats
        ax.plot(r.final_val, y, "o", ms=6, mfc="none" if hollow else None,
                color="0.3" if r.precision == "bf16" else "tab:red")
    ax.set_yticks(range(len(order)), [_label(r) + (" [repeat]" if id(r) in repeats else "") for r in order],
                  fontsize=7)
    ax.invert_yaxis()
    band_text = f"grey: BF16 band, {len(band.seeds)} distinct seeds" if lim else "no BF16 band (< 2 seeds)"
    ax.set(xlabel="final validation loss (hollow: a repeated seed)", title=f"final val loss ({band_text})")


def plot_scales(runs: list[Run], fp8: dict[str, pd.DataFrame | None], missing: dict[int, list[str]], path: Path,
                footer: str) -> Path | None:
    runs = [r for r in runs if r.fp8]
    if not runs:
        return None
    cols = min(2, len(runs))
    fig, axes = new_figure((len(runs) + cols - 1) // cols, cols, squeeze=False, sharey=True)
    for a in axes.flat[len(runs):]:
        a.set_visible(False)
    for a, r in zip(axes.flat, runs):
        f = fp8[r.folder]
        g = f[f["run"] == r.name] if f is not None and len(f) else pd.DataFrame(columns=["module", "role"])
        for (module, role), h in g.groupby(["module", "role"]):
            a.plot(h["step"], h["scale"], color=ROLE_COLORS.get(role, "0.5"), lw=0.7, alpha=0.6)
        for role, c in ROLE_COLORS.items():
            a.plot([], [], color=c, label=role + (": not recorded" if role in missing[id(r)] else ""))
        a.set(yscale="log", xlabel="step", ylabel="scale (fp8_max / amax)")
        a.set_title(f"{_label(r)}\n{r.recipe}", fontsize=8.5)
        a.legend(fontsize=7)
    return save(fig, path, footer)


def speedups(b: pd.DataFrame, time_col: str, ref_prec: str = "bf16") -> pd.DataFrame:
    """Per (d_model, run): speedup = reference step time / step time, and its spread where the CSV has one.

    The spread: with step_time_p25_s / step_time_p75_s columns, the speedup range their IQRs allow;
    otherwise the speedup of the fastest steps (step_time_min_s / step_time_min_s) beside the median one."""
    ref = b[b["precision"] == ref_prec].set_index("d_model")
    rows = []
    for r in b[b["precision"] != ref_prec].itertuples():
        if r.d_model not in ref.index:
            continue
        x = ref.loc[r.d_model]
        med = x[time_col] / getattr(r, time_col)
        if "step_time_p25_s" in b and pd.notna(getattr(r, "step_time_p25_s", float("nan"))):
            lo, hi, how = x["step_time_p25_s"] / r.step_time_p75_s, x["step_time_p75_s"] / r.step_time_p25_s, "IQR"
        elif "step_time_min_s" in b:
            lo = hi = x["step_time_min_s"] / r.step_time_min_s
            lo, hi, how = min(lo, med), max(hi, med), "min"
        else:
            lo, hi, how = med, med, ""
        rows.append(dict(d_model=r.d_model, run=r.run, speedup=med, lo=lo, hi=hi, spread=how))
    return pd.DataFrame(rows)


def plot_crossover(sp: pd.DataFrame, path: Path, footer: str, ref: str = "BF16") -> Path:
    fig, ax = new_figure()
    for run, g in sp.groupby("run", sort=False):
        g = g.sort_values("d_model")
        ax.errorbar(g["d_model"], g["speedup"], yerr=[g["speedup"] - g["lo"], g["hi"] - g["speedup"]],
                    marker="o", capsize=3, label=run)
    ax.axhline(1.0, color="0.4", lw=0.8, ls="--", label=f"{ref} (1.0)")
    sizes = sorted(sp["d_model"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.minorticks_off()
    how = "interquartile range" if (sp["spread"] == "IQR").all() else "median to fastest-step timings"
    ax.set(xlabel=f"hidden size (d_model); bars: {how}", ylabel=f"speedup = {ref} step time / step time",
           title=f"FP8 speedup over {ref} per training step (higher is better)")
    ax.margins(x=0.08)
    ax.legend()
    return save(fig, path, footer)
