"""One plotting style for every report: matplotlib Agg, PNG, and a footer that says what ran.

    fig, ax = new_figure()
    ax.plot(...)
    save(fig, "results/busbw.png", footer=describe_runs(df))

Every figure carries, in small type under the axes, the hardware, world size, backend and
versions it was measured with and whatever settings were held constant, read from the CSV's
provenance columns, so a PNG copied out of the report still says where its numbers came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")  # headless: no display on CI machines or cluster nodes
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "figure.figsize": (7.5, 4.5),
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 9,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "lines.linewidth": 1.6,
    "lines.markersize": 4,
    "svg.hashsalt": "distributed-training",  # deterministic output
}
plt.rcParams.update(STYLE)


def new_figure(nrows: int = 1, ncols: int = 1, **kwargs):
    kwargs.setdefault("constrained_layout", True)
    if nrows * ncols > 1 and "figsize" not in kwargs:
        kwargs["figsize"] = (4.2 * ncols + 1.0, 3.3 * nrows + 0.6)
    return plt.subplots(nrows, ncols, **kwargs)


def save(fig, path: str | Path, footer: str = "") -> Path:
    """Write a PNG with the provenance footer and close the figure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if footer:
        fig.text(0.01, 0.005, footer, fontsize=6.5, color="0.35", ha="left", va="bottom", wrap=True)
        engine = fig.get_layout_engine()
        if engine is not None:  # leave room for the footer under the axes
            engine.set(rect=(0, 0.05, 1, 0.95))
    # No timestamps in the file: a re-run on the same CSV gives the same bytes.
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path


STYLES = ("-o", "--s", "-.^", ":D", "-v", "--P", "-.X", ":*")  # line and marker differ, so no series hides another


def gapped(ax, x, y, fmt: str = "-o", max_step: float = 2.0, label: str | None = None, **kwargs) -> None:
    """Points at every x measured, joined by a line only where neighbours lie within max_step of each other:
    a line across x never measured (1 GPU to 8) would draw values no run had."""
    pts = sorted(zip(x, y))
    runs: list[list[tuple[float, float]]] = []
    for p in pts:
        if runs and p[0] <= runs[-1][-1][0] * max_step:
            runs[-1].append(p)
        else:
            runs.append([p])
    longest = max(range(len(runs)), key=lambda i: len(runs[i])) if runs else 0
    for i, run in enumerate(runs):
        alone = len(run) == 1 and not any(m in fmt for m in "os^vD*PXdph<>+x")  # a lone point of a line style:
        line, = ax.plot([p[0] for p in run], [p[1] for p in run], fmt + ("_" if alone else ""),  # a short dash
                        label=label if i == longest else None, **({"ms": 14} if alone else {}), **kwargs)
        kwargs.setdefault("color", line.get_color())


def describe_runs(df, held: dict[str, object] | None = None,
                  columns: Iterable[str] = ("hardware", "world_size", "backend", "torch_version", "cuda_version",
                                            "nccl_version")) -> str:
    """Footer text from a results DataFrame's provenance columns (unique values joined) plus held settings."""
    parts = []
    for col in columns:
        if col in df.columns:
            vals = sorted({str(v) for v in df[col].dropna().unique()})
            if vals and vals != ["none"]:
                parts.append(f"{col}={'/'.join(vals)}")
    for k, v in (held or {}).items():
        parts.append(f"{k}={v}")
    return "  ".join(parts)


def log2_size_axis(ax, sizes_bytes: Iterable[int]) -> None:
    """A log2 x-axis labelled in B/KiB/MiB/GiB, as the nccl-tests size column reads."""
    from .config import format_size

    sizes = sorted(set(int(s) for s in sizes_bytes))
    ax.set_xscale("log", base=2)
    if not sizes:
        return
    step = max(1, len(sizes) // 9)
    ticks = sizes[::step]
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(s) for s in ticks], rotation=0)
    ax.minorticks_off()
