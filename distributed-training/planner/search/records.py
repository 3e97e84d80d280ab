"""What the search hands on, as records: each plan it priced, each near-tie that lost, each layout it refused.

A Plan is one configuration in plain numbers: its degrees, the global batch it runs, memory per GPU in GB,
seconds per step by term (model/costs.py's StepCosts, at this configuration), throughput, MFU and HFU. plan.py
prints it as a row of the table and, with --json, as one object whose keys are the field names; the guide,
the evidence and parallel-3d read its fields by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import NamedTuple

from planner.model.memory import Memory

PARALLELISMS = ("tp", "pp", "dp", "cp")  # the four collectives a plan's time is split by


@dataclass(frozen=True)
class Plan:
    tp: int
    pp: int
    dp: int
    cp: int
    zero: int  # ZeRO stage 0-3
    microbatch: int  # sequences
    interleave: int  # virtual pipeline chunks per GPU
    recompute: str  # none, selective, full, op
    num_microbatches: int  # per step
    global_batch: int  # sequences per step: the nearest the DP degree divides (search.BATCH_TOLERANCE)
    layers_per_stage: str  # "16x4", "7+9", "7+8x14+7" (stages.StageSplit.describe)
    memory_gb: Memory  # GB = 1e9 bytes per GPU on the busiest GPU
    compute_s: float  # seconds per optimizer step from here to step_s (model/costs.py, StepCosts)
    tp_comm_s: float
    tp_hidden_s: float
    pp_comm_s: float
    pp_hidden_s: float
    dp_comm_s: float
    dp_hidden_s: float
    cp_comm_s: float
    cp_hidden_s: float
    bubble_fraction: float
    bubble_s: float
    optimizer_s: float
    gpu_step_s: float
    host_s: float
    step_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float  # model FLOPs / step / GPUs / dense peak of the precision
    hardware_tflops_per_gpu: float
    hfu: float  # hardware FLOPs (recompute included) / step / GPUs / peak
    cp_kind: str = "none"  # the context-parallel design priced (model/cp_kinds.py); none without CP
    vs_fastest: float | None = None  # throughput / the fastest plan's - 1, once choose.py has compared them

    def comm_s(self, kind: str) -> float:
        """Collective seconds per step of one parallelism (tp, pp, dp, cp)."""
        return getattr(self, f"{kind}_comm_s")

    def hidden_s(self, kind: str) -> float:
        """The part of them hidden behind compute."""
        return getattr(self, f"{kind}_hidden_s")

    def exposed_s(self, kind: str) -> float:
        """The part no compute hides."""
        return self.comm_s(kind) - self.hidden_s(kind)

    def as_json(self) -> dict:
        """The fields by name, memory as an object; vs_fastest only once set."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["memory_gb"] = self.memory_gb._asdict()
        if self.vs_fastest is None:
            del out["vs_fastest"]
        return out


class NearTie(NamedTuple):
    """A plan within the model's own error of the fastest that practitioners' rules did not choose (choose.py)."""
    tp: int
    pp: int
    dp: int
    cp: int
    zero: int
    microbatch: int
    interleave: int
    recompute: str
    tokens_per_s_per_gpu: float
    step_s: float
    vs_fastest: float
    lost_because: str  # the first rule that separates it from the choice, and its throughput against the choice


@dataclass(frozen=True)
class Rejection:
    """A layout the search refused, with the reason in one line and the degrees that decide it, outermost first
    (a divisibility reason names the few it needs; "does not fit" names the whole configuration)."""
    reason: str
    degrees: tuple[tuple[str, int | str], ...]

    def as_json(self) -> dict:
        return {**dict(self.degrees), "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.reason}  [" + ", ".join(f"{k}={v}" for k, v in self.degrees) + "]"


def fewest_degrees_first(rejected: list[Rejection]) -> list[Rejection]:
    """The most fundamental reasons first: those that name the fewest degrees (a stable sort)."""
    return sorted(rejected, key=lambda r: len(r.degrees))


@dataclass
class Result:
    candidates: list[Plan]  # ranked: the chosen plan first, then by throughput
    rejected: list[Rejection] = field(default_factory=list)
    rejected_total: int = 0
    evaluated: int = 0
    near_ties: list[NearTie] = field(default_factory=list)  # within choose.NEAR_TIE of the fastest, why each lost

    @property
    def best(self) -> Plan | None:
        return self.candidates[0] if self.candidates else None
