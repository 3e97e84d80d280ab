"""The one place this lab calls the planner (../planner): its choice for a model and cluster, and its memory,
time and communication terms for a configuration the lab runs. If the planner's signatures change, only
this file changes.

Bytes from a time model. The planner prices communication as time (alpha-beta, costs.py); priced on a
cluster whose every link carries 1 byte/s with zero latency, each of its time terms *is* the bus bytes
per GPU that the term assumes: 2(n-1)/n x S for an all-reduce of S bytes, half that for an all-gather or
a reduce-scatter, S for a pipeline transfer. That is what comms.py measures (nccl-tests' bus bytes), so
the two compare with no formula copied here.

Precision. The planner models bf16 training with fp32 master weights and Adam (ZeRO's 2 + g + 12 bytes
per parameter) and bf16 activations. FSDP2 with MixedPrecisionPolicy(bf16, fp32 reduce) reduces
gradients in fp32, so the comparison passes grad_bytes = 4 (the planner's --grad-bytes 4).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

from common.hardware import get_preset
from common.model import GPTConfig

PLANNER_DIR = Path(__file__).resolve().parent.parent / "planner"
RECOMPUTE_CODES = ("none", "selective", "full")  # the planner's recompute codes 0, 1, 2
GRAD_BYTES = 4  # FSDP2 reduces in fp32


def _planner() -> SimpleNamespace:
    """The planner's modules, imported from its folder (appended to sys.path: this lab's names win)."""
    if str(PLANNER_DIR) not in sys.path:
        sys.path.append(str(PLANNER_DIR))
    import cluster
    import costs
    import memory
    import plan
    import search
    import shapes
    return SimpleNamespace(cluster=cluster, costs=costs, memory=memory, plan=plan, search=search, shapes=shapes)


class Degrees(NamedTuple):
    """A configuration in the planner's terms (cp is always 1 here: this lab has no context parallelism)."""
    tp: int
    pp: int
    dp: int
    zero: int
    microbatch: int
    num_microbatches: int
    interleave: int
    recompute: str

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


class Prediction(NamedTuple):
    memory_bytes: dict[str, float]  # params, grads, optimizer, activations, buffers, total (per GPU)
    bus_bytes: dict[str, float]  # tp, pp, dp, cp: bus bytes per GPU per step
    times_s: dict[str, float] | None  # step_s, compute_s, *_comm_s, *_hidden_s, bubble_s; None without a GPU preset


def shape_of(g: GPTConfig):
    return _planner().shapes.Shape(g.n_layers, g.d_model, g.n_heads, g.kv_heads, g.vocab_size, g.seq_len, g.ffn)


def gpt_of(shape) -> GPTConfig:
    return shape.gpt


def best_plan(params: str, gpus: int, gpu: str = "h100") -> tuple[GPTConfig, Degrees, dict]:
    """The planner's first choice for a standard model of `params` on `gpus` GPUs, without context parallelism
    (this lab has none); returns the model, the degrees and the planner's candidate record."""
    P = _planner()
    cfg = P.plan.PlanConfig(params=params, gpus=gpus, gpu=gpu, cp=1, top=1)
    w, cl, pins = cfg.resolve()
    best = P.search.search(w, cl, pins, top=1).best
    if best is None:
        raise ValueError(f"the planner finds no configuration of {params} on {gpus} x {gpu} that fits")
    d = Degrees(best["tp"], best["pp"], best["dp"], best["zero"], best["microbatch"], best["num_microbatches"],
                best["interleave"], best["recompute"])
    return w.shape.gpt, d, best


def _cluster(gpu: str, gpus: int):
    P = _planner()
    return P.cluster.make_cluster(get_preset(gpu), gpus, "bf16")


def _unit(cl):
    """The same cluster with 1 byte/s links and no latency: time terms become bus bytes."""
    return dataclasses.replace(cl, intra_gbps=1e-9, inter_gbps=1e-9, alpha_intra_us=0.0, alpha_inter_us=0.0)


def _arrays(d: Degrees) -> tuple:
    return (d.tp, d.pp, 1, d.dp, d.microbatch, d.interleave, d.num_microbatches, d.zero,
            RECOMPUTE_CODES.index(d.recompute))


def predict(g: GPTConfig, d: Degrees, gpu: str | None = "h100", grad_bytes: int = GRAD_BYTES) -> Prediction:
    """The planner's memory (bytes per GPU), bus bytes per step and, with a GPU preset, its times."""
    P = _planner()
    shape = shape_of(g)
    t, p, c, dp, b, v, m, zero, rec = _arrays(d)
    mem = P.memory.memory_breakdown(shape, t, p, c, dp, b, v, m, zero, rec, grad_bytes=grad_bytes,
                                    sequence_parallel=True, flash=True)
    template = _cluster(gpu if gpu and gpu != "cpu" else "h100", d.gpus)
    unit = P.costs.step_costs(shape, _unit(template), t, p, c, dp, b, v, m, zero, rec, grad_bytes=grad_bytes)
    bus = {k: float(unit[f"{k}_comm_s"]) for k in ("tp", "pp", "dp", "cp")}
    times = None
    if gpu and gpu != "cpu":
        priced = P.costs.step_costs(shape, template, t, p, c, dp, b, v, m, zero, rec, grad_bytes=grad_bytes)
        times = {k: float(v_) for k, v_ in priced.items()}
    return Prediction({k: float(v_) for k, v_ in mem.items()}, bus, times)


def stage_params(g: GPTConfig, tp: int, pp: int) -> float:
    """The planner's parameters per GPU: its largest pipeline stage (uniform layers, the embedding on the
    first, the LM head on the last) divided by TP."""
    return float(_planner().memory.stage_params(shape_of(g), tp, pp))


def activation_bytes_per_layer(g: GPTConfig, tp: int, recompute: str, microbatch: int, elem_bytes: int = 2) -> float:
    """Korthikanti's saved activations of one block for one micro-batch on one GPU, as the planner prices them
    (sequence parallelism, FlashAttention, no dropout). The planner's coefficient is in bf16 bytes; every
    term is a 2-byte tensor then (no 1-byte dropout masks without dropout), so other widths scale it exactly."""
    P = _planner()
    coef = float(P.memory.activation_coefficient(shape_of(g), tp, RECOMPUTE_CODES.index(recompute),
                                                 sequence_parallel=True, flash=True, fp8=False, dropout=False))
    return coef * g.seq_len * microbatch * g.d_model * elem_bytes / 2

