"""fp8-train benchmarks (CSVs, not timed tests): what a step costs in each precision, and why.

    step cost   one full training step (forward, backward, AdamW) per mode and hidden size; median of
                the timed steps; on a GPU also the FP8 bound at each size (training/bound.py, bench_bound.csv:
                the BF16 step with its FP8-able GEMMs at measured FP8 speed). On a GPU: hidden 1024-8192, 8K
                tokens per step, every mode's blocks compiled alike (TransformerEngine runs eager
                and says so in the `compiled` column), modes one after another (each owns the
                GPU, and the biggest sizes do not fit twice), steps timed with CUDA events, and
                the kernels one step launches counted with the profiler, with the time the GPU was
                busy running them (gpu_busy_ms: a step well above it waited on the host, not the
                GPU). The hidden size where an FP8 mode overtakes BF16 is the crossover
                (fp8-anchors.md section 5). On CPU: the
                modes interleaved step by step so that a noisy machine slows all of them alike;
                target (issue 6): the emulated FP8 step costs at most 1.5x the fp32 step.
    monitor     the training-health monitoring (issue 7): per-step norms, FP8 scale reads, alerts,
                CSV rows, periodic per-layer and FP8 statistics, dashboard rewrites; wall time per
                loop iteration with all of it on vs off, interleaved, both compiled alike.
                Target: < 5% of the step.
    gemm        one GEMM per path and shape: fp32/bf16 torch.mm, FP8 through torch._scaled_mm and
                torch.nn.functional.scaled_mm, in TFLOP/s (CUDA events on GPU): the ceiling the
                step-cost numbers approach, and why the native layer calls the public op (on CPU
                wheels the private one falls back to a reference kernel).
    kernels     on CPU: the kernels Inductor generates for one compiled block's FP8 training step
                (forward + backward) and the operators the eager scale update dispatches, for
                this fp8_linear.py and, with --kernels-baseline COMMIT, for that commit's: a
                proxy for GPU launches that any machine can measure.

    make fp8-train-bench GPU=cpu            # -> results/cpu_ws1/bench_{step,gemm,monitor,kernels}.csv
    make fp8-train-bench GPU=h100           # -> results/h100_ws1/bench_*.csv (all of it: 8.5-10 min, one H100)
    make gpu-suite PART=4; make gpu-suite PART=6          # the same in two launches that fit 540 s each
    make fp8-train-bench ARGS="--hidden 4096 --parts step --promote merge --fp8-scaling current"  # one size
A stopped launch (SIGTERM: a time limit) keeps the rows of every mode it finished in runs/<preset>_ws1-bench/.
    PYTHONPATH=distributed-training python distributed-training/fp8-train/bench.py --gpu cpu --hidden 128,512
"""

from __future__ import annotations

import sys

from benchmarks import runner
from common.failures import entrypoint


def main(argv: list[str] | None = None) -> int:
    return runner.main(argv, description=__doc__)


if __name__ == "__main__":
    sys.exit(entrypoint(main))
