"""The plots that carry fp8-train's answer, one quantity per axis (report_plots.py draws the audit's plots).

    answer      per model: each low-precision run's validation loss minus its seed's BF16 run at every
                evaluation, against the noise (evidence.py: the largest BF16 rerun or seed gap at any
                evaluation); on GPUs also tokens/s over BF16 and peak memory per run
    underflow   per model: the share of non-zero FP8 values that became zero, per role over steps (the
                lab's own FP8 layer counts them; TE and torchao cast inside their kernels)
"""

from __future__ import annotations

from pathlib import Path

from common.plotting import new_figure, save
from health.panels import ROLE_COLORS
from reporting.evidence import Facts
from reporting.findings import run_label


def plot_answer(f: Facts, path: Path, footer: str) -> Path | None:
    if not f.gaps and not f.gpu:
        return None
    panels = 3 if f.gpu else 1
    fig, axes = new_figure(1, panels, figsize=(4.8 * panels + 1.5, 0.5 * max(3, len(f.runs)) + 2.6), squeeze=False)
    _paired_panel(axes[0][0], f)
    if f.gpu:
        _ratio_panel(axes[0][1], f)
        _memory_panel(axes[0][2], f)
    return save(fig, path, footer)


def _paired_panel(ax, f: Facts) -> None:
    if f.noise is not None:
        ax.axhspan(-f.noise.level, f.noise.level, color="0.85", label=f"noise ±{f.noise.level:.3f}")
    for r in f.low():
        g = f.gap(r)
        ax.plot(g.index, g.values, "-o", ms=3, lw=1.1, label=f"{run_label(r)}, {r.name} ({r.folder})")
    for r, g in f.repeats:
        ax.plot(g.index, g.values, "k--", lw=1, label=f"BF16 rerun, {r.name} ({r.folder})")
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set(xlabel="step", ylabel="val loss - same seed's BF16 val loss",
           title="loss gap at every evaluation (above 0: worse)")
    ax.legend(fontsize=6.5)


def _bf16_median(f: Facts, field: str) -> float:
    vals = sorted(getattr(r, field) for r in f.runs if r.precision == "bf16")
    return vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2


def _ratio_panel(ax, f: Facts) -> None:
    runs = [r for r in f.runs if r.fp8]
    base = _bf16_median(f, "tokens_per_s")
    ys = list(range(len(runs)))
    ratios = [r.tokens_per_s / base for r in runs]
    bars = ax.barh(ys, ratios, color="tab:green")
    ax.bar_label(bars, [f"{x:.2f}x" for x in ratios], fontsize=7, padding=2)
    ax.axvline(1.0, color="0.3", lw=0.8, ls="--")
    ax.set_yticks(ys, [f"{run_label(r)}\n{r.name} ({r.folder})" for r in runs], fontsize=7)
    ax.invert_yaxis()
    ax.margins(x=0.15)
    ax.set(xlabel="tokens/s / BF16 tokens/s (above 1: faster)", title="speed\n(dashed: BF16, median of its runs)")


def _memory_panel(ax, f: Facts) -> None:
    runs = sorted(f.runs, key=lambda r: (r.precision != "bf16", r.name, r.folder))
    ys = list(range(len(runs)))
    gib = [r.memory / 1024 for r in runs]
    bars = ax.barh(ys, gib, color=["0.55" if r.precision == "bf16" else "tab:purple" for r in runs])
    ax.bar_label(bars, [f"{g:.1f}" for g in gib], fontsize=7, padding=2)
    ax.axvline(_bf16_median(f, "memory") / 1024, color="0.3", lw=0.8, ls="--")
    ax.set_yticks(ys, [f"{run_label(r) if r.fp8 else 'bf16'}\n{r.name} ({r.folder})" for r in runs], fontsize=7)
    ax.invert_yaxis()
    ax.margins(x=0.15)
    ax.set(xlabel="peak allocated memory per GPU (GiB)", title="memory\n(dashed: BF16, median of its runs)")


def plot_underflow(f: Facts, path: Path, footer: str) -> Path | None:
    u = f.underflow
    if u.empty:
        return None
    runs = list(dict.fromkeys(zip(u["run"], u["folder"])))
    cols = min(2, len(runs))
    rows = (len(runs) + cols - 1) // cols
    fig, axes = new_figure(rows, cols, squeeze=False, sharey=True, figsize=(5.4 * cols + 1, 3.3 * rows + 0.6))
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax, (run, folder) in zip(axes.flat, runs):
        g = u[(u["run"] == run) & (u["folder"] == folder)]
        for role, h in g.groupby("role", sort=False):
            h = h.sort_values("step")
            c = ROLE_COLORS.get(role, "0.5")
            ax.plot(h["step"], h["mean"] * 100, "-o", ms=3, color=c, label=f"{role}: mean over modules")
            ax.plot(h["step"], h["max"] * 100, ":", marker=".", color=c, label=f"{role}: worst module")
        ax.set(xlabel="step", title=f"{run} ({folder})", ylim=(-3, 103))
    axes[0][0].legend(fontsize=7)
    for row in axes:
        row[0].set_ylabel("non-zero values cast to 0 (%)")
    return save(fig, path, footer)
