"""The one place this lab calls the planner (the `planner` package, imported by name): its choice for a model
and cluster, and its memory, time and communication terms for a configuration the lab runs. If the
planner's signatures change, only this file changes.

Bytes from a time model. The planner prices communication as time (alpha-beta, costs.py); priced on a
cluster whose every link carries 1 byte/s with zero latency, each of its time terms *is* the bus bytes
per GPU that the term assumes: 2(n-1)/n x S for an all-reduce of S bytes, half that for an all-gather or
a reduce-scatter, S for a pipeline transfer. That is what comms.py measures (nccl-tests' bus bytes), so
the two compare with no formula copied here.

Precision and stack. The lab runs PyTorch's stack as the planner's stacks.PYTORCH record describes it (eager
kernels, FlashAttention-2 through SDPA, DTensor TP without async overlap, FSDP2 with bf16 MixedPrecisionPolicy and
fp32 reduction, AdamW foreach): its memory is planner/model/torch_memory.py's, the terms this lab's at-scale study
measures, and its data-parallel schedule FSDP2's. FSDP2 reduces gradients in fp32, so the comparison passes
grad_bytes = 4 (the planner's --grad-bytes 4). Context parallelism is priced too: the ring's bytes are
common/cp_bytes.py's, the formula this lab's design counts.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from common import zero_memory
from common.hardware import get_preset
from common.model import GPTConfig
from planner import plan
from planner.model import cluster, costs, degrees, memory, shapes, stacks, stages, torch_memory
from planner.search import launch, records, search

GRAD_BYTES = 4  # FSDP2 reduces in fp32


def _stack() -> dict:
    """PyTorch's stack as this lab runs it (planner.model.stacks.PYTORCH), in step_costs' keywords."""
    w = search.Workload.of(stacks.PYTORCH, shapes.Shape(1, 8, 1, 1, 8, 8, 32), 1)
    return {"kernels": w.kernels, "tp_overlap": w.tp_overlap, "dp_overlap": w.dp_overlap,
            "tp_layout_copies": w.tp_layout_copies, "dp_schedule": stacks.PYTORCH.dp_schedule}


class Degrees(NamedTuple):
    """A configuration in this lab's terms."""
    tp: int
    pp: int
    dp: int
    zero: int
    microbatch: int
    num_microbatches: int
    interleave: int
    recompute: str
    stage_layers: tuple[int, ...] = ()  # per virtual stage; empty = the runner's balanced split
    cp: int = 1  # context parallelism: each sequence over cp ranks, FSDP2 over dp x cp
    cp_kind: str = "ring"  # its design (common/cp_attention.py), priced as the planner prices it (planner/model/cp_kinds.py)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


class Prediction(NamedTuple):
    memory_bytes: dict[str, float]  # params, grads, optimizer, activations, buffers, total (per GPU, at the peak)
    bus_bytes: dict[str, float]  # tp, pp, dp, cp: bus bytes per GPU per step
    times_s: dict[str, float] | None  # step_s, compute_s, *_comm_s, *_hidden_s, bubble_s; None without a GPU preset
    stage_params: float  # the planner's parameters per GPU (its busiest stage, / t)
    stage_layers: float  # the layers of that stage, on which it prices TP traffic
    state_bytes: float = 0.0  # FSDP2's state between backward and the optimizer step: 16 B per parameter / (dp x cp)


def shape_of(g: GPTConfig):
    return shapes.Shape(g.n_layers, g.d_model, g.n_heads, g.kv_heads, g.vocab_size, g.seq_len, g.ffn)


def best_plan(params: str, gpus: int, gpu: str = "h100", **pins) -> tuple[GPTConfig, Degrees, records.Plan]:
    """The planner's first choice for the model `params` names (shapes.model_shape) on `gpus` GPUs, as `make plan`
    prints it (the pytorch stack, the guide's batch rule, the rules: `pins` as its flags, e.g. cp=2); returns the
    model, the degrees and the planner's record."""
    cfg = plan.PlanConfig(params=params, gpus=gpus, gpu=gpu, top=1, **pins)
    w, cl, pins_, enumerated = cfg.resolved
    best = search.search(w, cl, pins_, top=1, enumerated=enumerated).best
    if best is None:
        raise ValueError(f"the planner finds no configuration of {params} on {gpus} x {gpu} that fits")
    split = launch.virtual_stage_layers(best.layers_per_stage, w.shape.layers, best.pp, best.interleave)
    d = Degrees(best.tp, best.pp, best.dp, best.zero, best.microbatch, best.num_microbatches, best.interleave,
                best.recompute, split if len(set(split)) > 1 else (), best.cp,
                best.cp_kind if best.cp > 1 else "ring")
    return w.shape.gpt, d, best


def _cluster(gpu: str, gpus: int):
    return cluster.make_cluster(get_preset(gpu), gpus, "bf16")


def _unit(cl):
    """The same cluster with 1 byte/s links and no latency: time terms become bus bytes."""
    net = dataclasses.replace(cl.net, intra_GBps=1e-9, nic_GBps=1e-9, alpha_step_us=0.0, alpha_level_us=0.0)
    return dataclasses.replace(cl, net=net)


def planner_recompute(lab: str) -> str:
    """The planner's name for a recompute setting of this lab's rows: the same name (none, op, full), an older row's
    'selective' read as op (settings.recompute_name)."""
    from settings import recompute_name
    return recompute_name(lab)


def _planner_degrees(d: Degrees):
    return degrees.Degrees.of(t=d.tp, p=d.pp, c=d.cp, d=d.dp, b=d.microbatch, v=d.interleave, m=d.num_microbatches,
                              zero=d.zero, recompute=degrees.RECOMPUTE.index(planner_recompute(d.recompute)))


def lab_split(g: GPTConfig, d: Degrees):
    """The planner's StageSplit (first, busiest middle, last rank's layers) of the split this lab runs."""
    from pipeline_stages import split_layers

    per_stage = split_layers(g.n_layers, d.pp * d.interleave, d.stage_layers)
    per_rank = [sum(per_stage[r::d.pp]) for r in range(d.pp)]
    middle = max(per_rank[1:-1], default=0)
    return stages.StageSplit(*(np.asarray(float(x)) for x in (per_rank[0], middle, per_rank[-1])))


def _max_layers(split) -> float:
    return float(np.maximum(np.maximum(split.first, split.last), split.middle))


def predict(g: GPTConfig, d: Degrees, gpu: str | None = "h100", grad_bytes: int = GRAD_BYTES) -> Prediction:
    """The planner's terms for the configuration this lab runs (its degrees and its split), for PyTorch's
    stack (stacks.PYTORCH): memory per GPU at the step's peak, bus bytes per step and, with a GPU preset, the times."""
    shape, deg, split = shape_of(g), _planner_degrees(d), lab_split(g, d)
    mem = stacks.PYTORCH.memory(shape, deg, grad_bytes=grad_bytes, split=split)
    psi = float(memory.stage_params(shape, d.tp, d.pp, split))
    template = _cluster(gpu if gpu and gpu != "cpu" else "h100", d.gpus)
    # The unit cluster's own stage split would balance bytes, not time: rescale its split-dependent terms (TP on
    # the busiest stage's layers, DP on its parameters) to the split this lab runs.
    unit = costs.step_costs(shape, _unit(template), deg, grad_bytes=grad_bytes, cp_kind=d.cp_kind, **_stack())
    unit_psi = float(memory.stage_params(shape, d.tp, d.pp, unit.split))
    bus = {"tp": float(unit.tp_comm_s) / _max_layers(unit.split) * _max_layers(split),
           "pp": float(unit.pp_comm_s), "dp": float(unit.dp_comm_s) * psi / unit_psi, "cp": float(unit.cp_comm_s)}
    times = None
    if gpu and gpu != "cpu":
        priced = costs.step_costs(shape, template, deg, grad_bytes=grad_bytes, cp_kind=d.cp_kind, **_stack())
        times = {k: float(v_) for k, v_ in priced._asdict().items() if k not in ("split", "cp_kind")}
    state = float(sum(zero_memory.model_state_bytes(psi, d.dp * d.cp, 3, torch_memory.FSDP2_STATE)))
    return Prediction({k: float(v_) for k, v_ in mem._asdict().items()}, bus, times, psi, _max_layers(split), state)


def activation_bytes_per_layer(g: GPTConfig, tp: int, recompute: str, microbatch: int, elem_bytes: int = 2) -> float:
    """Korthikanti's saved activations of one block for one micro-batch on one GPU, as the planner prices them
    (sequence parallelism, FlashAttention, no dropout). The planner's coefficient is in bf16 bytes; every
    term is a 2-byte tensor then (no 1-byte dropout masks without dropout), so other widths scale it exactly."""
    coef = float(memory.activation_coefficient(shape_of(g), tp, degrees.RECOMPUTE.index(recompute),
                                               sequence_parallel=True, flash=True, fp8=False, dropout=False))
    return coef * g.seq_len * microbatch * g.d_model * elem_bytes / 2

