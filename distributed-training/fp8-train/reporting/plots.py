"""fp8-train's plots, one quantity per axis, each drawing what its table or sentence says (captions: findings.py).

    answer      per model: each low-precision run's val loss minus its seed's BF16 run at every evaluation, in
                the grey noise (evidence.py); on GPUs also tokens/s over BF16 and peak memory per run
    loss        per model: training loss (10-step mean) and validation loss over the band of distinct BF16
                seeds, and each run's final validation loss
    scales      per model: every intact FP8 run's per-tensor scales over steps, colour = role
    underflow   per model: the share of non-zero values cast to 0, per role (the lab's own FP8 layer)
    crossover   per benchmark: speedup = BF16 step time / step time per hidden size, with its spread
    health      per run with injected faults: a PNG copy of its dashboard's panels (health/panels.py)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.plotting import describe_runs, new_figure, save
from health.panels import BY_ID, EVENT_STYLE, MPL_MARKERS, PANELS, ROLE_COLORS
from reporting.comparison import Run
from reporting.evidence import Facts
from reporting.findings import run_label


def _name(r: Run) -> str:
    return f"{r.name} ({r.folder})"


def _grid(n: int, width: float = 5.4, height: float = 3.3, **kw):
    """Up to two panels a row; the unused ones hidden."""
    cols = min(2, n)
    fig, axes = new_figure((n + cols - 1) // cols, cols, squeeze=False, figsize=(width * cols + 1, height *
                                                                                 ((n + cols - 1) // cols) + 0.6), **kw)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def _bars(ax, runs: list[Run], values: list[float], colors, ref: float, fmt: str, xlabel: str, title: str) -> None:
    ys = list(range(len(runs)))
    ax.bar_label(ax.barh(ys, values, color=colors), [fmt.format(v) for v in values], fontsize=7, padding=2)
    ax.axvline(ref, color="0.3", lw=0.8, ls="--")
    ax.set_yticks(ys, [f"{run_label(r) if r.fp8 else 'bf16'}\n{_name(r)}" for r in runs], fontsize=7)
    ax.invert_yaxis()
    ax.margins(x=0.15)
    ax.set(xlabel=xlabel, title=title + "\n(dashed: BF16, median of its runs)")


def plot_answer(f: Facts, path: Path, footer: str) -> Path | None:
    if not f.gaps and not f.gpu:
        return None
    fig, axes = new_figure(1, 3 if f.gpu else 1, figsize=(4.8 * (3 if f.gpu else 1) + 1.5,
                                                          0.5 * max(3, len(f.runs)) + 2.6), squeeze=False)
    ax = axes[0][0]
    if f.noise is not None:
        ax.axhspan(-f.noise.level, f.noise.level, color="0.85", label=f"noise ±{f.noise.level:.3f}")
    for r in f.low():
        ax.plot(f.gap(r).index, f.gap(r).values, "-o", ms=3, lw=1.1, label=f"{run_label(r)}, {_name(r)}")
    for r, g in f.repeats:
        ax.plot(g.index, g.values, "k--", lw=1, label=f"BF16 rerun, {_name(r)}")
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set(xlabel="step", ylabel="val loss - same seed's BF16 val loss", title="loss gap at every evaluation "
                                                                                 "(above 0: worse)")
    ax.legend(fontsize=6.5)
    if f.gpu:
        bf16 = pd.DataFrame([r._asdict() for r in f.runs if r.precision == "bf16"]).median(numeric_only=True)
        low = [r for r in f.runs if r.fp8]
        _bars(axes[0][1], low, [r.tokens_per_s / bf16["tokens_per_s"] for r in low], "tab:green", 1.0, "{:.2f}x",
              "tokens/s / BF16 tokens/s (above 1: faster)", "speed")
        runs = sorted(f.runs, key=lambda r: (r.precision != "bf16", r.name, r.folder))
        _bars(axes[0][2], runs, [r.memory / 1024 for r in runs], ["0.55" if not r.fp8 else "tab:purple" for r in runs],
              bf16["memory"] / 1024, "{:.1f}", "peak allocated memory per GPU (GiB)", "memory")
    return save(fig, path, footer)


def plot_loss(f: Facts, curves: dict[tuple[str, str], pd.DataFrame], path: Path, footer: str) -> Path:
    fig, (ax, axv, axf) = new_figure(1, 3, figsize=(14, 4.4))
    smooth = {id(r): curves[(r.folder, r.name)].set_index("step")["loss"].rolling(10, min_periods=1).mean()
              for r in f.runs}
    vals = {id(r): curves[(r.folder, r.name)].dropna(subset=["val_loss"]).set_index("step")["val_loss"]
            for r in f.runs}
    seeds = f.band.seeds
    for a, series in ((ax, smooth), (axv, vals)):
        if len(seeds) >= 2:
            b = pd.concat([series[id(r)] for r in seeds], axis=1)
            a.fill_between(b.index, b.min(axis=1), b.max(axis=1), color="0.8",
                           label=f"BF16 band ({len(seeds)} seeds: {', '.join(f's{r.seed}' for r in seeds)})")
        for r in seeds[:1] if len(seeds) < 2 else []:  # one seed: a reference line, said to be no band
            a.plot(series[id(r)].index, series[id(r)], color="0.3", ls="--", lw=1, label=f"BF16 s{r.seed} (no band)")
    for r in (r for r in f.runs if r.precision != "bf16"):
        line, = ax.plot(smooth[id(r)].index, smooth[id(r)], lw=1.1, label=_name(r))
        axv.plot(vals[id(r)].index, vals[id(r)], marker="o", ms=3, lw=1.1, color=line.get_color(), label=_name(r))
    tail = pd.concat([s.iloc[len(s) // 10:] for s in smooth.values()])
    ax.set(xlabel="step", ylabel="train loss (10-step mean)", title="training loss",
           ylim=(tail.quantile(0.01) - 0.05, tail.max() + 0.05))
    axv.set(xlabel="step", ylabel="validation loss", title="validation loss")
    axv.legend(fontsize=7)
    lim = f.band.limits("final_val")  # the final validation loss per run against the band
    if lim:
        axf.axvspan(*lim, color="0.8")
    order = sorted(f.runs, key=lambda r: (r.precision != "bf16", r.precision, r.backend, r.started))
    repeats = {id(r) for r in f.band.repeats}
    for y, r in enumerate(order):
        axf.plot(r.final_val, y, "o", ms=6, mfc="none" if id(r) in repeats else None,
                 color="0.3" if r.precision == "bf16" else "tab:red")
    axf.set_yticks(range(len(order)), [_name(r) + (" [repeat]" if id(r) in repeats else "") for r in order], fontsize=7)
    axf.invert_yaxis()
    axf.set(xlabel="final validation loss" + (" (hollow: a repeated seed)" if repeats else ""),
            title="final val loss (" + (
        f"grey: BF16 band, {len(seeds)} distinct seeds)" if lim else "no BF16 band: < 2 seeds)"))
    return save(fig, path, footer)


def plot_scales(runs: list[Run], fp8: dict[str, pd.DataFrame | None], missing: dict[int, list[str]], path: Path,
                footer: str) -> Path | None:
    if not runs:
        return None
    fig, axes = _grid(len(runs), 4.2, sharey=True)
    for a, r in zip(axes.flat, runs):
        f = fp8[r.folder]
        g = f[f["run"] == r.name] if f is not None and len(f) else pd.DataFrame(columns=["module", "role"])
        for (module, role), h in g.groupby(["module", "role"]):
            a.plot(h["step"], h["scale"], color=ROLE_COLORS.get(role, "0.5"), lw=0.7, alpha=0.6)
        for role, c in ROLE_COLORS.items():
            a.plot([], [], color=c, label=role + (": not recorded" if role in missing[id(r)] else ""))
        a.set(yscale="log", xlabel="step", ylabel="scale (fp8_max / amax)")
        a.set_title(f"{_name(r)}\n{r.recipe}", fontsize=8.5)
        a.legend(fontsize=7)
    return save(fig, path, footer)


def plot_underflow(f: Facts, path: Path, footer: str) -> Path | None:
    u = f.underflow
    runs = list(dict.fromkeys(zip(u["run"], u["folder"])))
    if not runs:
        return None
    fig, axes = _grid(len(runs), sharey=True)
    for ax, (run, folder) in zip(axes.flat, runs):
        for role, h in u[(u["run"] == run) & (u["folder"] == folder)].groupby("role", sort=False):
            h, c = h.sort_values("step"), ROLE_COLORS.get(role, "0.5")
            ax.plot(h["step"], h["mean"] * 100, "-o", ms=3, color=c, label=f"{role}: mean over modules")
            ax.plot(h["step"], h["max"] * 100, ":", marker=".", color=c, label=f"{role}: worst module")
        ax.set(xlabel="step", title=f"{run} ({folder})", ylim=(-3, 103))
    axes[0][0].legend(fontsize=7)
    for row in axes:
        row[0].set_ylabel("non-zero values cast to 0 (%)")
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
            fast = x["step_time_min_s"] / r.step_time_min_s
            lo, hi, how = min(fast, med), max(fast, med), "min"
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


def plot_health(d: Path, run: str, steps: pd.DataFrame, events: pd.DataFrame, fp8: pd.DataFrame,
                layers: pd.DataFrame, clean: pd.DataFrame | None, bf16: pd.DataFrame | None = None) -> Path:
    """A PNG copy of the dashboard's `png` panels (health/panels.py) for one run, beside the same run without faults
    (clean) and the band of the BF16 seeds of its model (bf16); the HTML has every panel."""
    def of(df: pd.DataFrame) -> pd.DataFrame:
        return df[df["run"] == run] if len(df) else df
    s, e, f, lay = of(steps).sort_values("step"), of(events), of(fp8), of(layers)
    shown = [p for p in PANELS if p.png]
    fig, axes = new_figure(2, (len(shown) + 1) // 2, figsize=(13, 6.8))
    ax = {p.id: a for p, a in zip(shown, axes.flat)}
    for p, a in zip(shown, axes.flat):
        a.set(xlabel="step", yscale="log" if p.log else "linear", ylabel=p.ylabel)
        a.set_title(p.title, fontsize=8)
    if bf16 is not None and bf16["run"].nunique() >= 2:
        band = bf16.pivot_table(index="step", columns="run", values="loss")
        ax["p-loss"].fill_between(band.index, band.min(axis=1), band.max(axis=1), color="0.85",
                                  label=f"BF16 band ({band.shape[1]} seeds)")
    if clean is not None:
        ax["p-loss"].plot(clean["step"], clean["loss"], color="0.45", lw=0.8, label="clean run")
    ax["p-loss"].plot(s["step"], s["loss"], lw=0.9, label=run)
    v = s.dropna(subset=["val_loss"])
    ax["p-loss"].plot(v["step"], v["val_loss"], "o--", ms=3, label="val")
    ax["p-loss"].legend()
    ax["p-grad"].plot(s["step"], s["grad_norm"], lw=0.9)
    ax["p-update"].plot(s["step"], s["update_ratio"].where(s["update_ratio"] > 0), lw=1.4)
    for _, g in (lay[lay["update_ratio"] > 0].groupby("layer") if len(lay) else []):
        ax["p-update"].plot(g["step"], g["update_ratio"], lw=0.5, alpha=0.4, color="0.4")
    for (_, role), g in (f.groupby(["module", "role"]) if len(f) else []):
        ax["p-scale"].plot(g["step"], g["scale"], color=ROLE_COLORS.get(role, "0.5"), lw=0.7, alpha=0.6)
    for role, c in ROLE_COLORS.items():
        ax["p-scale"].plot([], [], color=c, label=role)
    ax["p-scale"].legend(fontsize=6)
    for layer, g in (lay[lay["act_amax"].notna()].groupby("layer") if len(lay) else []):
        ax["p-act"].plot(g["step"], g["act_amax"], marker=".", lw=0.9, label=layer)
    if len(lay):
        ax["p-act"].legend(fontsize=6)
    kinds = list(EVENT_STYLE)
    for k, (c, shape) in EVENT_STYLE.items():
        ek = e[e["kind"] == k] if len(e) else e
        if len(ek):
            ax["p-events"].scatter(ek["step"], [kinds.index(k)] * len(ek), color=c, marker=MPL_MARKERS[shape], s=40)
            if k in ("grad_spike", "nonfinite"):
                y = s.set_index("step")["grad_norm"].reindex(ek["step"]).fillna(s["grad_norm"].max())
                ax["p-grad"].scatter(ek["step"], y, color=c, marker=MPL_MARKERS[shape], s=40, zorder=3)
    ax["p-events"].set(yticks=range(len(kinds)), yticklabels=kinds, xlim=ax["p-loss"].get_xlim(),
                       ylabel=BY_ID["p-events"].ylabel)
    return save(fig, d / f"health_{run}.png", describe_runs(steps))
