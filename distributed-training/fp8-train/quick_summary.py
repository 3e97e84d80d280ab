"""The closing table of a short GPU job: each run of one results folder against BF16 and against its FP8 bound.

`make gpu-quick` prints it at its end (and saves it beside the results archive), so that whoever lent the GPU
reads the answer before the files are home. Every cell uses the report's definitions (reporting/comparison.py):
tokens/s is the median after the first 10% of steps, vs BF16 divides by the median of the folder's BF16 runs,
the bound is bound.csv's for the same shape and GPU, gain captured is (speedup - 1) / (bound - 1) (the share of
the possible gain; docs/glossary.md). GPU busy ms comes from the step-cost benchmark's row of the same run
(bench_step.csv; its model has its own hidden size and 2 blocks, named in the column): a step well above it waited
on the host.

    PYTHONPATH=distributed-training python distributed-training/fp8-train/quick_summary.py \\
        --results distributed-training/fp8-train/results/h100_ws1
"""

from __future__ import annotations

import sys

from reporting import quick_summary


def main(argv: list[str] | None = None) -> int:
    return quick_summary.main(argv, description=__doc__)


if __name__ == "__main__":
    sys.exit(main())
