"""fsdp-scaling's plots, one quantity per axis, each from one kind of CSV (report.py captions them).

    memory_per_gpu   PROJECTION: model states per GPU against GPU count, per strategy, for the largest
                     projected model, beside the GPU's memory (projection.csv)
    memory_at_scale  measured: model states per rank of the real DDP/FSDP2 code on a fake process group,
                     against the ZeRO formula and the exact model (at_scale.csv)
    scaling          measured: efficiency T(N) / (N T(1)) per strategy, strong and weak (scaling_*.csv);
                     only measured points, never a projection of another machine beside them
    projection       PROJECTION: efficiency without overlap, and communication over compute (the
                     ratio that says whether full overlap could hide it), per strategy (projection.csv)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.hardware import PRESETS
from common.plotting import STYLES, describe_runs, gapped, new_figure, save
from findings import ORDER, tidy

MiB = 2**20
STYLE = dict(zip(ORDER[1:], STYLES))  # each strategy its own line and marker: equal values never hide one,
MARK = {s: dict(ms=9 - 1.5 * i, mfc="none") for i, s in enumerate(ORDER[1:])}  # hollow, nested where they meet


def _gpus_axis(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}")


def memory_per_gpu(proj: pd.DataFrame, target: str, model: str, path: Path) -> Path:
    p = proj[(proj["target"] == target) & (proj["model"] == model) & (proj["mode"] == "weak")]
    fig, ax = new_figure()
    for strat in ORDER[1:]:
        g = p[p["strategy"] == strat].sort_values("n_gpus")
        if len(g):
            gapped(ax, g["n_gpus"], g["state_GB_per_rank"], STYLE[strat], label=strat, **MARK[strat])
    cap = PRESETS[target].memory_gb if target in PRESETS else None
    if cap:
        ax.axhline(cap, color="tab:red", lw=1, ls="--", label=f"{PRESETS[target].label}: {cap:g} GB")
    _gpus_axis(ax)
    ax.set(yscale="log", xlabel="GPUs (data-parallel ranks)", ylabel="model states per GPU (GB)",
           title=f"PROJECTION: {model} ({p['n_params'].iloc[0] / 1e9:.1f}B) model states per GPU")
    ax.legend(ncol=2)
    return save(fig, path, "PROJECTION (ZeRO formula with FSDP2's padding and gathered unit, memory_model.py; "
                           "activations excluded; the formula is checked against the real code in "
                           "memory_at_scale.png)")


def memory_at_scale(a: pd.DataFrame, path: Path) -> Path:
    fig, ax = new_figure()
    for (strat, g), marker in zip(a.groupby("strategy", sort=False), "osD^v"):
        g = g.sort_values("world_size")
        held = g["param_bytes"] + g["grad_bytes"] + g["opt_bytes_worst_rank"]
        zero = g["model_param_bytes"] + g["model_grad_bytes"] + g["model_opt_bytes"]
        line, = ax.plot(g["world_size"], held / MiB, marker, mfc="none", ms=7, label=f"{strat} measured")
        gapped(ax, g["world_size"], zero / MiB, "--", color=line.get_color(), label=f"{strat} ZeRO formula")
        if strat in ("zero3", "zero1"):  # the exact model: FSDP2's padding, ZeRO-1's whole-tensor partition
            gapped(ax, g["world_size"], g["exact_model_state_bytes"] / MiB, ":", color=line.get_color(),
                   label=f"{strat} exact model")
    _gpus_axis(ax)
    ax.set(yscale="log", xlabel="ranks (fake process group)", ylabel="params + grads + optimizer, MiB per rank",
           title="Model-state memory per rank: the real FSDP2/DDP code vs the ZeRO formula")
    ax.legend(ncol=3, fontsize=7)
    return save(fig, path, describe_runs(a, {"model": a["model"].iloc[0]}))


def scaling(s: pd.DataFrame, path: Path) -> Path:
    fig, axes = new_figure(1, 2, sharey=True)
    for ax, mode in zip(axes, ("strong", "weak")):
        for strat in ORDER[1:]:
            g = s[(s["strategy"] == strat) & (s["mode"] == mode)].sort_values("world_size")
            if len(g):
                gapped(ax, g["world_size"], g["efficiency"], STYLE[strat], label=strat, **MARK[strat])
        ax.set(xlabel="ranks", title=f"{mode} scaling", ylim=(0, max(1.1, 1.05 * s["efficiency"].max())))
        _gpus_axis(ax)
    axes[0].set_ylabel("efficiency T(N) / (N T(1)), measured")
    axes[1].legend(fontsize=7)
    return save(fig, path, describe_runs(s, {"model": s["model"].iloc[0]}))


def projection(proj: pd.DataFrame, target: str, model: str, path: Path) -> Path:
    fig, axes = new_figure(2, 2, sharex=True)
    for col, mode in enumerate(("weak", "strong")):
        for strat in ORDER[1:]:
            p = proj[(proj["target"] == target) & (proj["model"] == model) & (proj["strategy"] == strat)
                     & (proj["mode"] == mode)].sort_values("n_gpus")
            if p.empty:
                continue
            oom = " (states exceed memory)" if not p["fits_in_memory"].astype(str).eq("True").any() else ""
            gapped(axes[0][col], p["n_gpus"], p["efficiency_no_overlap"], STYLE[strat], label=f"{strat}{oom}",
                   **MARK[strat])
            multi = p[p["n_gpus"] > 1]  # one GPU communicates nothing: no ratio to draw on a log axis
            gapped(axes[1][col], multi["n_gpus"], multi["comm_ms"] / multi["compute_ms"], STYLE[strat], label=strat,
                   **MARK[strat])
        axes[0][col].set(title=f"{mode} scaling", ylim=(0, 1.05))
        axes[1][col].axhline(1.0, color="0.3", lw=0.8, ls="--")
        axes[1][col].set(yscale="log", xlabel="GPUs")
        _gpus_axis(axes[1][col])
    axes[0][0].set_ylabel("efficiency, no overlap")
    axes[1][0].set_ylabel("communication / compute time")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"PROJECTION: {model} on {target}")
    src = proj[(proj["target"] == target) & (proj["model"] == model)].iloc[0]
    return save(fig, path, f"PROJECTION (analytic model, not measured). compute: {tidy(src['compute_source'])}. "
                           f"bandwidth: {src['bandwidth_source']}")
