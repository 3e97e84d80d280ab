"""Model-state memory per rank under ZeRO / FSDP sharding: one formula for fsdp-scaling and the planner.

Rajbhandari et al., ZeRO (SC20, arXiv 1910.02054), section 5 and Figure 1. With mixed-precision Adam
a parameter costs 2 B (fp16 weight) + 2 B (fp16 gradient) + K = 12 B of optimizer state (fp32 master
weight, momentum, variance). Per device at data-parallel degree N, stage by stage:

    stage 0 (DDP)           (2 + 2 + K) Psi
    stage 1 (P_os)          2 Psi + 2 Psi + K Psi / N
    stage 2 (P_os+g)        2 Psi + (2 + K) Psi / N
    stage 3 (P_os+g+p)      (2 + 2 + K) Psi / N

Written here per category with bytes per element (`StateBytes`), so the same formula covers ZeRO's
accounting, the planner's bf16 weights with 2- or 4-byte gradients (Megatron's fp32 main_grad), and
FSDP2, whose sharded fp32 parameter *is* the master copy (param 4 + grad 4 + AdamW 8 = 16 B, all
divided by the shard group).

FSDP2's two "stages" (Zhao et al., PyTorch FSDP, VLDB 2023; torch.distributed.fsdp.fully_shard):
reshard_after_forward=True is ZeRO-3. reshard_after_forward=False (this repository's "zero2") keeps the
gathered parameters from forward to backward and frees them after backward, so *between steps* it holds
sharded parameters as ZeRO-3 does (stage 3 here), not the replicated parameters of the paper's ZeRO-2;
its peak holds every unit gathered (fsdp-scaling's memory_model.unsharded_peak).

`sharded` lets a caller replace the paper's even split Psi / N by the elements the busiest rank really
holds (FSDP2 pads every tensor's dim 0 to a multiple of N; ZeroRedundancyOptimizer gives each rank
whole tensors).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

GB = 1e9  # the ZeRO paper's GB


class StateBytes(NamedTuple):
    """Bytes per parameter element, by what holds them."""
    weight: float  # the stored (sharded or replicated) parameter
    grad: float  # the stored gradient
    optimizer: float  # optimizer state (K)


ZERO_PAPER = StateBytes(weight=2, grad=2, optimizer=12)  # fp16 weights and gradients, K = 12
STAGES = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}  # the paper's stage of each strategy name
# What each strategy of fsdp-scaling holds *between steps* (FSDP2's zero2 frees its gathered parameters).
FSDP2_BETWEEN_STEPS = {"single": 0, "ddp": 0, "zero1": 1, "zero2": 3, "zero3": 3, "hsdp": 3}


class ModelStates(NamedTuple):
    """Bytes per rank (numbers or arrays)."""
    weights: object
    grads: object
    optimizer: object

    @property
    def total(self):
        return self.weights + self.grads + self.optimizer


def model_state_bytes(psi, n, stage, b: StateBytes, sharded=None) -> ModelStates:
    """Bytes per rank of Psi parameters at a ZeRO stage over N ranks (module docstring); arrays broadcast.

    `sharded`: elements the busiest rank holds of each sharded state; default Psi / N."""
    psi, n, stage = np.asarray(psi, float), np.asarray(n, float), np.asarray(stage)
    part = psi / n if sharded is None else np.asarray(sharded, float)
    held = lambda from_stage: np.where(stage >= from_stage, part, psi)  # noqa: E731
    return ModelStates(b.weight * held(3), b.grad * held(2), b.optimizer * held(1))


def zero_paper_table(psi: float, nd: int, b: StateBytes = ZERO_PAPER) -> dict[str, float]:
    """Per-device model-state GB of the four ZeRO stages (the paper's Figure 1 rows)."""
    names = ("baseline", "zero1", "zero2", "zero3")
    return {name: float(model_state_bytes(psi, nd, stage, b).total) / GB for stage, name in enumerate(names)}
