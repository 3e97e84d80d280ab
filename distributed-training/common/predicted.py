"""The planner's "predicted vs measured" section of a lab report: the one place a report reaches the planner.

Each lab report embeds, beside its measurements, the cost model's prediction for every GPU row it holds
(planner/vs_measured.py, priced by planner/explain_rows.py from the rows' own columns). Labs are folders of
scripts, so the planner's folder is appended to sys.path (a lab's own module names win; the planner's
modules that this imports share none with a lab).

    from common.predicted import section
    lines += ["", section("fp8-train", results_dir)]
"""

from __future__ import annotations

import sys
from pathlib import Path

PLANNER = Path(__file__).resolve().parent.parent / "planner"


def section(lab: str, results: str | Path | None = None, heading: str = "##") -> str:
    """Markdown: every GPU row of `lab` under `results` beside the planner's prediction (a note if none)."""
    if str(PLANNER) not in sys.path:
        sys.path.append(str(PLANNER))
    import vs_measured
    return vs_measured.section(lab, results, heading)
