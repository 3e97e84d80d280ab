"""The closing table of a short GPU job (quick_summary.py's): one row per run of one results folder.

    rows        each run against the median of the folder's BF16 runs, against its FP8 bound (bound.csv), its MFU
                and the GPU busy time of the step-cost benchmark's row of the same run, in the report's
                definitions (comparison.py)
    main        the table and one line naming the model; a damaged results folder is one line, exit 2
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common.config import parse_config
from common.csvread import BadResults
from common.markdown import table
from reporting import comparison, tables


@dataclass(frozen=True)
class SummaryConfig:
    results: str = field(default="", metadata={"help": "one results folder (steps.csv, bound.csv, bench_step.csv)"})

    def __post_init__(self):
        if not self.results:
            raise ValueError("--results names the folder to summarise, e.g. fp8-train/results/h100_ws1")


def busy_cell(run: str, bench: pd.DataFrame | None) -> str:
    """The bench's step time and GPU busy time for this run, at the bench's largest hidden size."""
    if bench is None or "gpu_busy_ms" not in bench:
        return "no bench row"
    rows = bench[(bench["run"] == run) & bench["gpu_busy_ms"].notna()]
    if rows.empty:
        return "no bench row"
    r = rows.sort_values("d_model").iloc[-1]
    where = f"d{int(r['d_model'])}, {int(r['n_layers'])} blocks"
    return f"{r['gpu_busy_ms']:.1f} of {r['step_time_s'] * 1e3:.1f} ms ({where})"


def rows(folder: Path) -> tuple[list[str], list[list[str]], str]:
    steps = tables.read(folder / "steps.csv")
    if steps is None:
        raise BadResults(f"{folder} has no steps.csv: no run of the preset finished")
    cfg_path = folder / "steps.config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    runs = comparison.summarize(comparison.Folder(folder.name, steps, cfg, None))
    key = comparison.model_key(steps, cfg)
    bound = comparison.bound_for(key, tables.read(folder / "bound.csv"))
    bench = tables.read(folder / "bench_step.csv")
    bf16 = [r.tokens_per_s for r in runs if r.precision == "bf16"]
    base = pd.Series(bf16).median() if bf16 else math.nan
    out = []
    for r in sorted(runs, key=lambda r: (r.precision != "bf16", r.name)):
        speed = r.tokens_per_s / base
        bound_cells = comparison.bound_cells(r, speed, bound) if r.fp8 else ["", ""]
        out.append([r.name, f"{r.tokens_per_s:,.0f}", f"{speed:.2f}x" if bf16 else "no BF16 run", *bound_cells,
                    comparison.mfu_cell(r, True), busy_cell(r.name, bench), f"{r.final_val:.4f}"])
    seeds = sorted({r.seed for r in runs if r.precision == "bf16"})
    note = (f"{key.describe()}; BF16 seeds: {', '.join(f's{s}' for s in seeds) or 'none'}"
            + ("" if len(seeds) >= 2 else " (one seed: no noise band yet)"))
    head = ["run", "tokens/s", "vs BF16", "FP8 bound", "gain captured", "MFU", "GPU busy / step", "final val"]
    return head, out, note


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    cfg = parse_config(SummaryConfig, argv, description=description, prog="quick_summary")
    try:
        head, body, note = rows(Path(cfg.results))
    except (BadResults, OSError, ValueError) as e:
        print(f"quick_summary: error: {e}", file=sys.stderr)
        return 2
    print(f"closing table: {note}")
    print(table(head, body))
    return 0

