"""Every results file the guide reads, read through its reader before anything is written (guide.py's main): a
damaged one (common.csvread: cut, binary, a byte-order mark, NaN, a negative time, a key given twice, a foreign CSV)
is one line naming it and exit 2, never a traceback halfway through a render nor a half-written guide.

The readers, as the guide's sections call them: own_runs (every lab's GPU rows), explain_rows.measured_calibration
(fp8-train's GEMM benchmarks), against_pytorch (parallel-3d's at-scale studies), ranking (its ranking set) and
validation.read_before_after (the published regimes before and after issue 38's floor).
common/tests/test_entry_points.py damages each file a whole guide run opens: a file read elsewhere and not here
would still be one line (main catches BadResults around the render), only later.
"""

from __future__ import annotations

from planner.evidence import against_pytorch, explain_rows, own_runs, ranking, validation


def check() -> None:
    """Read every input the guide reads; common.csvread.BadResults (one line) for the first damaged one."""
    own_runs.all_runs()
    explain_rows.measured_calibration()
    for name in ("at_scale.csv", "at_scale_terms.csv", "at_scale_cp.csv"):
        if (against_pytorch.RESULTS / name).is_file():
            against_pytorch.read(against_pytorch.RESULTS / name)
    if (ranking.RESULTS / "ranking_cpu.csv").is_file():
        ranking.compare(ranking.RESULTS)
    if validation.BEFORE_AFTER.is_file():
        validation.read_before_after()
