"""The planner's "predicted vs measured" section of a lab report: the one place a report reaches the planner.

Each lab report embeds, beside its measurements, the cost model's prediction for every GPU row it holds
(planner/vs_measured.py, priced by planner/explain_rows.py from the rows' own columns). Labs are folders of
scripts, so the planner's folder is appended to sys.path (a lab's own module names win; the planner's
modules that this imports share none with a lab).

    from common.predicted import section
    predicted.check_inputs(results_dir)                # first, before anything is drawn
    lines += ["", section("fp8-train", results_dir)]
    step_seconds(gcfg, "h100", zero=3, sequences=2)     # the planner's compute model for a run not measured
"""

from __future__ import annotations

import sys
from pathlib import Path

PLANNER = Path(__file__).resolve().parent.parent / "planner"


def _planner():
    if str(PLANNER) not in sys.path:
        sys.path.append(str(PLANNER))


def step_seconds(gcfg, gpu: str, zero: int, sequences: int) -> float:
    """The planner's one-GPU step time for the labs' GPT (common.model.GPTConfig) as fsdp-scaling runs it (eager
    bf16, fp32 master weights, AdamW), `sequences` in one micro-batch, the strategy's ZeRO stage on one rank."""
    _planner()
    import explain_rows
    return explain_rows.one_gpu_step_s(gcfg, gpu, zero, sequences)


def check_inputs(results: str | Path) -> None:
    """Every config saved beside a result under `results` (what the planner reads besides the CSVs, which it reads
    through common.csvread), checked before a report draws anything: BadResults (one line naming the file)."""
    from .csvread import read_json
    for path in sorted(Path(results).rglob("*.config.json")):
        read_json(path, "the config saved beside a result")


def section(lab: str, results: str | Path | None = None, heading: str = "##") -> str:
    """Markdown: every GPU row of `lab` under `results` beside the planner's prediction (a note if none)."""
    _planner()
    import vs_measured
    return vs_measured.section(lab, results, heading)
