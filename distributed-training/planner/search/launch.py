"""The command that runs a plan: parallel-3d's runner (../parallel-3d/train.py), as torchrun and as Slurm.

The planner's degrees (CP included: parallel-3d runs context-parallel attention over a (pp, dp, cp, tp) mesh, the
design the plan was priced with: --cp-kind ring|allgather|ulysses), micro-batch,
the global batch it runs, interleave, recompute and layers per stage, and the model's shape, become the runner's
flags (its names are the planner's: --tp --pp --dp --cp --zero --microbatch --global-batch --interleave
--recompute --layers --hidden --heads --kv-heads --ffn --vocab --seq, and --stage-layers for an uneven split;
recompute none, op (per-op selective) or full). A plan is priced for parallel-3d when the
workload runs the pytorch stack with its own software (stacks.PYTORCH); `differences` names every way the
priced workload departs from what parallel-3d runs (FP8, dropout, another attention kernel, another stack, ...)
and plan.py says so on its first line. Nodes are GPUS_PER_NODE GPUs each (HGX/DGX nodes; adjust
--nproc-per-node for other machines). parallel-3d's tests parse these flags with its own config, so the two
cannot drift apart silently.
"""

from __future__ import annotations

import math
import shlex
from typing import NamedTuple

from planner.model.shapes import Shape
from planner.model.stacks import PYTORCH

from .records import Plan

GPUS_PER_NODE = 8
RUNNER = "distributed-training/parallel-3d/train.py"


def rank_layers(layers_per_stage: str, layers: int, pp: int) -> list[int]:
    """Layers of each pipeline rank from the plan's split ("24", "7+9", "7+8x14+7", "8x16"): the middle
    stages share what the first and last leave as evenly as possible (stages.balanced_split)."""
    if "+" not in layers_per_stage:
        return [layers // pp] * pp if "x" in layers_per_stage else [int(layers_per_stage)]
    parts = layers_per_stage.split("+")
    first, last = int(parts[0]), int(parts[-1])
    middle, inner = layers - first - last, pp - 2
    return [first] + [middle // inner + (i < middle % inner) for i in range(inner)] + [last]


def virtual_stage_layers(layers_per_stage: str, layers: int, pp: int, v: int) -> tuple[int, ...]:
    """parallel-3d's --stage-layers: per virtual stage s = chunk x pp + rank, each rank's layers over its v chunks
    (extras to its first chunks)."""
    per_rank = rank_layers(layers_per_stage, layers, pp)
    chunks = {(c, r): n // v + (c < n % v) for r, n in enumerate(per_rank) for c in range(v)}
    return tuple(chunks[s // pp, s % pp] for s in range(pp * v))


class Commands(NamedTuple):
    """How to run a plan: one torchrun line every node runs, one Slurm job, and how it departs from the pricing."""
    torchrun: str
    slurm: str
    notes: tuple[str, ...]


def runner_flags(plan: Plan, model: Shape, gpu: str) -> list[str]:
    zero = 3 if plan.zero == 3 else 2
    recompute = plan.recompute
    flags = {"gpu": gpu, "tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "cp": plan.cp, "zero": zero,
             "microbatch": plan.microbatch, "global-batch": plan.global_batch, "interleave": plan.interleave,
             "recompute": recompute, "layers": model.layers, "hidden": model.hidden, "heads": model.heads,
             "kv-heads": model.kv_heads, "ffn": model.ffn, "vocab": model.vocab, "seq": model.seq}
    if plan.cp > 1 and plan.cp_kind != "none":
        flags["cp-kind"] = plan.cp_kind  # the design the plan was priced with (model/cp_kinds.py)
    split = virtual_stage_layers(plan.layers_per_stage, model.layers, plan.pp, plan.interleave)
    if len(set(split)) > 1:  # uneven: say it, rather than rely on the runner's own balancing
        flags["stage-layers"] = ",".join(map(str, split))
    return [f"--{k}={v}" for k, v in flags.items()]


def differences(w, plan: Plan | None = None) -> list[str]:
    """How the priced workload (search.Workload) and plan depart from what parallel-3d runs; [] = it runs as priced."""
    if w.stack is not PYTORCH:
        return [f"it is priced for the {w.stack.name} stack, which this project has no runner for (--stack pytorch "
                "prices what parallel-3d runs)"]
    out = []
    if w.precision != "bf16":
        out.append(f"parallel-3d trains in bf16, not {w.precision}")
    for flag, ours, what in (("sequence_parallel", True, "sequence parallelism with TP"),
                             ("flash_attention", True, "fused attention (SDPA)"), ("dropout", False, "no dropout"),
                             ("rope", False, "learned positions, not rotary ones")):
        if getattr(w, flag) != ours:
            out.append(f"parallel-3d runs {what}")
    software = {"fused_kernels": "eager kernels", "attention_kernel": "FlashAttention-2 through SDPA",
                "tp_overlap": "TP without async overlap", "dp_overlap": "FSDP2's overlapped collectives",
                "qkv_fused": "q, k and v as three Linears", "optimizer": "AdamW foreach"}
    if w.tp_comm_overlap:
        out.append("parallel-3d runs no userbuffer TP overlap (the plan was priced with --tp-comm-overlap)")
    for flag, what in software.items():
        if getattr(w, flag) != getattr(PYTORCH, flag):
            out.append(f"parallel-3d runs {what} (the plan was priced with --{flag.replace('_', '-')} changed)")
    if plan is not None and plan.zero in PYTORCH.ddp_stages:
        out.append(f"ZeRO-{plan.zero} runs in PyTorch as DDP{' + ZeroRedundancyOptimizer' if plan.zero else ''} "
                   f"(fsdp-scaling's {'zero1' if plan.zero else 'ddp'} strategy, its preset models); parallel-3d runs "
                   "FSDP2, so the command runs it as --zero 2")
    return out


def commands(plan: Plan, model: Shape, gpu: str, notes: list[str] = ()) -> Commands:
    """The commands that run `plan` (its degrees, micro-batch, the global batch it runs, interleave, recompute
    and layers per stage) for `model`; notes: how it departs from what was priced (differences)."""
    gpus = plan.tp * plan.pp * plan.dp * plan.cp
    per_node = min(gpus, GPUS_PER_NODE)
    nodes = math.ceil(gpus / per_node)
    flags = runner_flags(plan, model, gpu)
    torchrun = (f"OMP_NUM_THREADS=1 PYTHONPATH=distributed-training torchrun --nnodes {nodes} --nproc-per-node "
                f"{per_node} --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 --rdzv-id parallel-3d "
                f"{RUNNER} " + " ".join(flags))
    rest = [f for f in flags if not f.startswith(("--gpu=", "--tp=", "--pp=", "--dp=", "--cp="))]
    slurm = (f"sbatch --nodes={nodes} slurm/lab.sbatch parallel-3d TP={plan.tp} PP={plan.pp} "
             f"DP={plan.dp} CP={plan.cp} GPU={gpu} ARGS={shlex.quote(' '.join(rest))}")
    return Commands(torchrun, slurm, tuple(notes))


def lines(cmds: Commands) -> list[str]:
    out = ["run it (parallel-3d; every node runs the torchrun line, or submit the Slurm job):",
           f"  {cmds.torchrun}", f"  {cmds.slurm}"]
    return out + [f"  note: {n}" for n in cmds.notes]
