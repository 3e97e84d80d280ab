"""REPORT.md and its plots, from the committed CSVs alone (results/<folder>/*.csv).

    make fp8-train-report          # or: PYTHONPATH=distributed-training python distributed-training/fp8-train/report.py

The prose is reporting/report_template.md; each {{name}} in it is filled by the section function of
that name in reporting/sections.py's SECTIONS (one more section = one function and one placeholder).
Results folders are discovered, not named: every folder under results/ with a steps.csv is grouped by
model identity (reporting/comparison.py), so the runs of one model meet in one table whichever folder
holds them. A folder of runs with injected faults is a health demo (reporting/health_report.py), not a
comparison.
"""

from __future__ import annotations

import sys

from reporting import sections


def main(argv: list[str] | None = None) -> int:
    return sections.main(argv, description=__doc__)


if __name__ == "__main__":
    sys.exit(main())
