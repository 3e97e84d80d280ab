"""The software stack that runs a plan, chosen once (`--stack`) and passed on as a record: its memory, its
data-parallel collectives, the kernels it launches, which ZeRO stages and recompute modes it has, and the
command that runs it here. The cost model reads the record's fields and functions; no name is tested again.

    pytorch   what PyTorch runs in this repository. parallel-3d, this project's runner: DTensor TP with sequence
              parallelism on the critical path (no async TP), torch.distributed.pipelining (1F1B, interleaved
              1F1B, GPipe below p micro-batches), FSDP2 with bf16 MixedPrecisionPolicy and fp32 reduction (its
              two modes: ZeRO-2 = reshard_after_forward=False, ZeRO-3 = True), eager kernels, FlashAttention-2
              through SDPA, torch.optim.AdamW (foreach). And fsdp-scaling's data parallelism without TP, PP or
              CP: ZeRO-0 = DistributedDataParallel (fp32 weights under autocast, fp32 gradients all-reduced once
              per step), ZeRO-1 = DDP + ZeroRedundancyOptimizer (the same all-reduce, then each updated fp32
              parameter broadcast from the rank that owns its optimizer state), neither with recompute. Memory:
              torch_memory.py, the terms parallel-3d's at-scale study measures. Recompute: none, per-op
              selective (`op`, parallel-3d's selective-checkpoint policy) or full; with context parallelism none
              or full (the per-op policy and the ring do not mix there).
    megatron  Megatron-Core as the published runs ran it: Korthikanti's activations with sequence parallelism,
              ZeRO's accounting (the distributed optimizer is ZeRO-1), fused kernels, the best FlashAttention
              of the GPU generation, TP collectives overlapped with the weight-gradient GEMMs, overlapped DP.
              Memory: memory.py. No runner here: the project has no Megatron.

The software flags of the CLI (--no-fused-kernels, --attention-kernel, --no-tp-overlap, --optimizer, ...)
default to the stack's and override it where given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from . import memory, torch_memory
from .degrees import RECOMPUTE


class DPSchedule(NamedTuple):
    """Seconds of one step's data-parallel traffic (arrays): per step and per micro-batch, and what is exposed."""
    step: np.ndarray
    step_exposed: np.ndarray
    microbatch: np.ndarray
    microbatch_exposed: np.ndarray


def zero_schedule(ar, rs, ag, fwd_mb, bwd_mb, deg) -> DPSchedule:
    """ZeRO's schedule (§7) as Megatron runs it: ZeRO-0 all-reduces once per step, ZeRO-1 reduce-scatters and
    gathers once per step, ZeRO-2 reduce-scatters every micro-batch, ZeRO-3 also gathers the weights for every
    micro-batch's forward and backward; each hides behind the compute it can overlap (costs.py)."""
    zero = deg.zero
    step = np.select([zero == 0, zero == 1, zero == 2], [ar, rs + ag, ag], 0.0)
    step_exposed = np.select([zero == 0, zero == 1], [np.maximum(0, ar - bwd_mb),
                                                      np.maximum(0, rs - bwd_mb) + np.maximum(0, ag - fwd_mb)],
                             np.where(zero == 2, np.maximum(0, ag - fwd_mb), 0.0))
    mb = np.select([zero == 2, zero == 3], [rs, 2 * ag + rs], 0.0)
    mb_exposed = np.select([zero == 2, zero == 3], [np.maximum(0, rs - bwd_mb),
                                                    np.maximum(0, 2 * ag + rs - fwd_mb - bwd_mb)], 0.0)
    return DPSchedule(step, step_exposed, mb, mb_exposed)


def fsdp2_schedule(ar, rs, ag, fwd_mb, bwd_mb, deg) -> DPSchedule:
    """PyTorch's data parallelism as this repository runs it: FSDP2's ZeRO-2/3 as parallel-3d does (its design.py
    counts it collective by collective), DDP and ZeroRedundancyOptimizer (ZeRO-0/1) as fsdp-scaling does.

    DDP all-reduces the accumulated gradients once per step, bucket by bucket under the last micro-batch's
    backward; ZeroRedundancyOptimizer then broadcasts every updated fp32 parameter from its owner inside
    optimizer.step(), after the backward, so nothing hides it (twice the bf16 all-gather's bytes, `ag`).

    Without a pipeline every micro-batch gathers each unit before its forward (a ZeRO-3 unit once more before
    its backward) and reduce-scatters its gradients. Under a pipeline, pipelining accumulates the gradients
    unsharded and reduces once per step; ZeRO-2 gathers a 1F1B stage once per step, an interleaved rank's
    chunks before their forwards and again before their backwards in every round of p micro-batches (its
    runtime keeps only a few chunks gathered), ZeRO-3 a 1F1B unit m + 1 times (resharded after each forward)."""
    zero, p, v, m = deg.zero, deg.p, deg.v, deg.m
    piped, z3, ddp = p > 1, zero >= 3, zero < 2
    rounds = np.maximum(1.0, np.floor(m / p))
    gathers = np.where(z3, (m + 1) / m, np.where(v > 1, 2 * rounds / m, 1 / m))  # per micro-batch, piped
    flat_mb = np.where(z3, 2 * ag, ag) + rs
    flat_exposed = np.where(z3, np.maximum(0, 2 * ag + rs - fwd_mb - bwd_mb),
                            np.maximum(0, ag - fwd_mb) + np.maximum(0, rs - bwd_mb))
    mb = np.where(ddp, 0.0, np.where(piped, gathers * ag, flat_mb))
    mb_exposed = np.where(ddp, 0.0, np.where(piped, np.maximum(0, gathers * ag - fwd_mb), flat_exposed))
    broadcast = np.where(zero == 1, 2 * ag, 0.0)  # ZeroRedundancyOptimizer: fp32 parameters from their owners
    step = np.where(ddp, ar + broadcast, np.where(piped, rs, 0.0))
    step_exposed = np.where(ddp, np.maximum(0, ar - bwd_mb) + broadcast, np.where(piped, np.maximum(0, rs - bwd_mb),
                                                                                  0.0))
    return DPSchedule(step, step_exposed, mb, mb_exposed)


@dataclass(frozen=True)
class Stack:
    name: str
    title: str  # what it is, for the CLI's header and the guide's MFU column
    memory: Callable  # (shape, deg, *, grad_bytes, sequence_parallel, flash, fp8, dropout, split) -> memory.Memory
    dp_schedule: Callable  # (ar, rs, ag, fwd_mb, bwd_mb, deg) -> DPSchedule
    zero_stages: tuple[int, ...]
    recompute: tuple[str, ...]  # modes it runs
    cp_recompute: tuple[str, ...]  # modes it runs with context parallelism
    runner: str | None  # the project's runner for it; None: this project cannot run its plans
    fused_kernels: bool
    attention_kernel: str
    tp_overlap: bool
    dp_overlap: bool
    qkv_fused: bool
    optimizer: str  # compute.OPTIMIZER_KERNELS
    tp_layout_copies: bool  # DTensor's batch-first SP: each collective copies its buffer, and the backward reuses
    #                         the gathered inputs it saved (no re-gather); Megatron's sequence-first SP neither
    grad_bytes: float = 2.0  # bytes per gradient element reduced: 4 where gradients are reduced in fp32
    ddp_stages: tuple[int, ...] = ()  # ZeRO stages it runs as DDP: data parallelism alone, without recompute

    def check(self, zero: int | None, recompute: str | None) -> None:
        """ValueError (one line: what is wrong, what is allowed) for a pin this stack cannot run."""
        if zero is not None and zero not in self.zero_stages:
            raise ValueError(f"--zero {zero} is not a mode of the {self.name} stack (it runs ZeRO "
                             f"{', '.join(map(str, self.zero_stages))})")
        if recompute is not None and recompute not in self.recompute:
            hint = ("; per-op selective checkpointing, which parallel-3d called selective, is op"
                    if recompute == "selective" and "op" in self.recompute else "")
            raise ValueError(f"--recompute {recompute} is not what the {self.name} stack runs (it runs "
                             f"{', '.join(self.recompute)}{hint})")

    def check_layout(self, zero: int | None, recompute: str | None, split: int, cp_pinned: int | None) -> None:
        """ValueError (one line) for pins this stack cannot run together: ZeRO-0/1 where it runs them as DDP,
        with TP, PP or CP (split: the product of the pinned TP, PP and CP degrees) or with recompute; a recompute
        mode context parallelism does not run with."""
        if zero in self.ddp_stages and (split > 1 or recompute not in (None, "none")):
            what = "TP, PP or CP" if split > 1 else f"--recompute {recompute}"
            raise ValueError(f"--zero {zero} with {what}: the {self.name} stack runs ZeRO-{zero} as DDP"
                             f"{' + ZeroRedundancyOptimizer' if zero == 1 else ''} (fsdp-scaling), data parallelism "
                             "alone without recompute; ZeRO-2/3 (FSDP2) run with TP, PP, CP and recompute")
        if recompute and (cp_pinned or 1) > 1 and recompute not in self.cp_recompute:
            raise ValueError(f"--recompute {recompute} with --cp {cp_pinned}: the {self.name} stack runs "
                             f"{', '.join(self.cp_recompute)} with context parallelism")

    def runs(self, s, zero, recompute) -> np.ndarray:
        """Which configurations (structures `s` with their ZeRO and recompute codes, arrays) this stack runs: a
        recompute mode context parallelism runs with, and DDP's stages only for data parallelism alone without
        recompute (check_layout says why, for pins)."""
        ok = (s.c == 1) | np.isin(recompute, [RECOMPUTE.index(r) for r in self.cp_recompute])
        ddp = np.isin(zero, self.ddp_stages)
        return ok & ~(ddp & ((s.t > 1) | (s.p > 1) | (s.c > 1) | (np.asarray(recompute) != 0)))


PYTORCH = Stack(
    "pytorch", "PyTorch as parallel-3d runs it (DTensor TP + SP without async TP, pipelining, FSDP2, eager kernels, "
               "FlashAttention-2, AdamW foreach)",
    torch_memory.memory_breakdown, fsdp2_schedule, zero_stages=(0, 1, 2, 3), recompute=("none", "op", "full"),
    cp_recompute=("none", "full"), runner="parallel-3d", fused_kernels=False, attention_kernel="fa2",
    tp_overlap=False, dp_overlap=True, qkv_fused=False, optimizer="foreach", tp_layout_copies=True,
    grad_bytes=4.0, ddp_stages=(0, 1))
MEGATRON = Stack(
    "megatron", "Megatron-Core as the published runs ran it (fused kernels, the GPU's best FlashAttention, TP "
                "overlapped with the weight-gradient GEMMs, distributed optimizer)",
    memory.memory_breakdown, zero_schedule, zero_stages=(0, 1, 2, 3), recompute=("none", "selective", "full", "op"),
    cp_recompute=("none", "selective", "full", "op"), runner=None, fused_kernels=True, attention_kernel="best",
    tp_overlap=True, dp_overlap=True, qkv_fused=True, optimizer="megatron", tp_layout_copies=False)
STACKS = {s.name: s for s in (PYTORCH, MEGATRON)}
