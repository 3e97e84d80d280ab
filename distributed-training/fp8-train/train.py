"""fp8-train: the same GPT trained in FP32, BF16, FP16 and FP8 -- speed, memory, loss curves, scales.

What it measures and why. FP8 GEMMs run at twice the BF16 tensor-core rate on Hopper, but every
FP8 tensor needs a scale, casts cost memory traffic, and small GEMMs do not win (fp8-anchors.md
section 5). This runner trains one GPT from identical initial weights on identical batches in
each precision and records, per step, loss, grad/param norms, update ratio, lr, tokens/s, step
time and memory (steps.csv), and per FP8 tensor its amax, scale and underflow/saturation
fractions (fp8.csv). BF16 runs with several seeds give the seed-to-seed noise band that decides
whether FP8 "matches". On GPU presets a hidden-size sweep (sweep.csv) shows where FP8 starts to pay.
Around every run (training/runloop.py): per-layer health (layers.csv), alerts (events.csv), the --on-nan
policy, atomic checkpoints, --resume, SIGTERM handling and a live HTML dashboard.

Runs (--runs, comma-separated `precision[:backend]`; precision fp32|bf16|fp16|fp8|mxfp8|mxfp4|nvfp4,
backend auto|te|te-fused|torchao|native|emulated). Presets (GPU=; training/settings.py's cpu(), h100(), ..., each a
complete config that the other flags override) pick the runs and the model:
    cpu        tiny GPT, bf16 (emulated) x2 seeds / fp8 emulated + native (the wider set: make fp8-train-wide)
    h100 h200  hidden 4096, 8 layers, 8K tokens/step, blocks compiled; bf16 x3 seeds, fp8 torchao, native,
               te (te.Linear swap), te-fused (TE's fused modules); the FP8 bound after the first bf16 run
    a100       no FP8 hardware: fp32 vs bf16 vs fp16 + GradScaler
    b200       the h100 set plus mxfp8 and nvfp4 through TransformerEngine
Preset runs whose backend is missing are skipped with the reason; a backend you name yourself
(--runs or --fp8-backend) that cannot run here is an error (exit 2) that says how to get it.

Commands:
    make fp8-train GPU=cpu                                    # CPU preset + report (a few minutes)
    make fp8-train GPU=h100                                   # 1 GPU
    make fp8-train-run GPU=h100 NPROC=8                       # 8 GPUs, FSDP2 (torchrun)
    make fp8-train-demo                                       # injected faults + recovery (CPU)
    make fp8-train-run GPU=cpu ARGS="--resume"                # continue after a crash or SIGTERM
    make fp8-train-run GPU=h100 ARGS="--only bf16,fp8:torchao"   # part of the preset now (a short job) ...
    make fp8-train-run GPU=h100 ARGS="--resume"               # ... the rest later; published when all are done
    sbatch --nodes=2 slurm/lab.sbatch fp8-train GPU=h100      # N nodes
    PYTHONPATH=distributed-training python distributed-training/fp8-train/train.py --gpu cpu \\
        --runs bf16,fp8:emulated --steps 50                   # by hand; --help lists every flag
"""

from __future__ import annotations

import sys

from common.failures import entrypoint
from training import runner


def main(argv: list[str] | None = None) -> int:
    return runner.main(argv, description=__doc__)


if __name__ == "__main__":
    sys.exit(entrypoint(main))
