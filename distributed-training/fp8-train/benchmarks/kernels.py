"""A proxy for GPU launches that any machine can measure: what one FP8 training step compiles to.

On a GPU, bench.py counts the kernels a step launches with the profiler. On a CPU the same question
has a measurable stand-in: the kernels Inductor generates for one compiled block's FP8 forward and
backward, and the operators the eager scale update dispatches (kernel_count.py). Counting both for this tree's
fp8_linear.py and for an earlier commit's shows what a change to the layer did to its launches
(the shared scaling state turned a per-layer update into one batched one). The earlier layer runs in its own
commit's tree, exported from git (common/at_commit.py: the one way this repository runs old code).

    PYTHONPATH=distributed-training python distributed-training/fp8-train/bench.py --gpu cpu \
        --parts kernels --kernels-baseline 2fbc6b4      # -> results/cpu_ws1/bench_kernels.csv
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import kernel_count
from common import at_commit
from common.dist import print0
from common.results import ResultsWriter

LAB_IN_REPO = "distributed-training/fp8-train"
# Where a commit's tree holds the layer, newest first, and the module kernel_count imports it as there.
LAYER_PATHS = {f"{LAB_IN_REPO}/precision/fp8_linear.py": "precision.fp8_linear",
               f"{LAB_IN_REPO}/fp8_linear.py": "fp8_linear"}


def baseline_layer(commit: str) -> str:
    """The module name of `commit`'s fp8_linear.py (kernel_count.LAYERS); ValueError (one line) when `commit` is not
    a commit of this repository or holds no fp8_linear.py. Checked before anything is measured."""
    if not at_commit.is_commit(commit):
        raise ValueError(f"--kernels-baseline {commit!r} is not a commit of this repository")
    for path, module in LAYER_PATHS.items():
        if at_commit.has_path(commit, path):
            return module
    raise ValueError(f"--kernels-baseline {commit}: no fp8_linear.py there ({' or '.join(LAYER_PATHS)})")


def baseline_counts(commit: str) -> tuple[int, int]:
    """kernel_count's two counts for the layer of `commit`, run in that commit's tree (its formats, scaling and
    common): this tree's kernel_count.py is copied in and run there."""
    out = at_commit.run_module(commit, "kernel_count", args=[baseline_layer(commit)],
                               add={f"{LAB_IN_REPO}/kernel_count.py": Path(kernel_count.__file__)},
                               path=("distributed-training", LAB_IN_REPO),
                               export=("distributed-training/common", LAB_IN_REPO))
    counts = json.loads(out.strip().splitlines()[-1])
    return counts["inductor_kernels"], counts["update_ops"]


def kernel_counts(baseline: str, writer: ResultsWriter) -> None:
    """One row per version of the layer: `baseline`'s (a commit, when given), then this tree's."""
    versions = [(baseline, lambda: baseline_counts(baseline))] if baseline else []
    versions.append(("this tree", lambda: kernel_count.count_kernels(*kernel_count.layer("precision.fp8_linear"))))
    for label, count in versions:
        kernels, ops = count()
        writer.write(dict(fp8_linear_version=label, fp8_linears=6, inductor_kernels=kernels, update_ops=ops))
        print0(f"fp8_linear.py ({label}): {kernels} Inductor kernels for one block's forward+backward, "
               f"{ops} operators in the scale update of its 6 FP8 linears")
