"""The command that runs a plan: parallel-3d's runner (../parallel-3d/train.py), as torchrun and as Slurm.

The planner's degrees, micro-batch, interleave and recompute, and the model's shape, become the runner's
flags (its names are the planner's: --tp --pp --dp --zero --microbatch --global-batch --interleave
--recompute --layers --hidden --heads --kv-heads --ffn --vocab --seq). What parallel-3d cannot run is said
next to the command, not hidden: ZeRO-0/1 (FSDP2 always shards the parameters; the runner uses ZeRO-2's
traffic, reshard_after_forward=False) and context parallelism (none in the lab: pin --cp 1 for a plan it
runs). Nodes are GPUS_PER_NODE GPUs each (HGX/DGX nodes; adjust --nproc-per-node for other machines).
parallel-3d's tests parse these flags with its own config, so the two cannot drift apart silently.
"""

from __future__ import annotations

import math
import shlex

GPUS_PER_NODE = 8
RUNNER = "distributed-training/parallel-3d/train.py"


def runner_flags(plan: dict, model: dict, gpu: str, global_batch: int) -> list[str]:
    zero = 3 if plan["zero"] == 3 else 2
    flags = {"gpu": gpu, "tp": plan["tp"], "pp": plan["pp"], "dp": plan["dp"], "zero": zero,
             "microbatch": plan["microbatch"], "global-batch": global_batch, "interleave": plan["interleave"],
             "recompute": plan["recompute"], "layers": model["layers"], "hidden": model["hidden"],
             "heads": model["heads"], "kv-heads": model["kv_heads"], "ffn": model["ffn"], "vocab": model["vocab"],
             "seq": model["seq"]}
    return [f"--{k}={v}" for k, v in flags.items()]


def notes(plan: dict) -> list[str]:
    out = []
    if plan["zero"] in (0, 1):
        out.append(f"ZeRO-{plan['zero']} is not an FSDP2 mode: parallel-3d runs it as --zero 2 "
                   "(no reshard after forward; the optimizer state and gradients sharded)")
    if plan["cp"] > 1:
        out.append(f"parallel-3d has no context parallelism: this plan (CP {plan['cp']}) needs another runner; "
                   "pin --cp 1 for one it runs")
    return out


def commands(plan: dict, model: dict, gpu: str, global_batch: int) -> dict:
    """{"torchrun": ..., "slurm": ..., "notes": [...]} for the plan (a candidate record of search.describe)."""
    gpus = plan["tp"] * plan["pp"] * plan["dp"] * plan["cp"]
    per_node = min(gpus, GPUS_PER_NODE)
    nodes = math.ceil(gpus / per_node)
    flags = runner_flags(plan, model, gpu, global_batch)
    torchrun = (f"OMP_NUM_THREADS=1 PYTHONPATH=distributed-training torchrun --nnodes {nodes} --nproc-per-node "
                f"{per_node} --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 --rdzv-id parallel-3d "
                f"{RUNNER} " + " ".join(flags))
    rest = [f for f in flags if not f.startswith(("--gpu=", "--tp=", "--pp=", "--dp="))]
    slurm = (f"sbatch --nodes={nodes} slurm/lab.sbatch parallel-3d TP={plan['tp']} PP={plan['pp']} "
             f"DP={plan['dp']} GPU={gpu} ARGS={shlex.quote(' '.join(rest))}")
    return {"torchrun": torchrun, "slurm": slurm, "notes": notes(plan)}


def lines(cmds: dict) -> list[str]:
    out = ["run it (parallel-3d; every node runs the torchrun line, or submit the Slurm job):",
           f"  {cmds['torchrun']}", f"  {cmds['slurm']}"]
    return out + [f"  note: {n}" for n in cmds["notes"]]
