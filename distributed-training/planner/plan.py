"""Parallelism planner: which TP / PP / DP / CP degrees, ZeRO stage, micro-batch, interleaving and
activation recompute to use for a transformer on a GPU cluster, and what it costs.

A cost model, not a measurement: memory per GPU (ZeRO model states, Korthikanti activations,
buffers), compute op by op (every GEMM by its shape after TP slicing, memory-bound kernels at HBM
bandwidth, attention with or without FlashAttention, recompute, the optimizer, a cost per kernel:
compute.py), communication (alpha-beta with ring factors on NVLink and the network, overlap where
schedules allow) and the pipeline bubble of possibly unequal stages, for every configuration the
GPU count allows; among the plans within the model's own error of the fastest, practitioners'
rules choose (choose.py). Every term and its source is in the module docstrings and in
../PARALLELISM_GUIDE.md; the error against published runs is in ../PLANNER_VALIDATION.md, section 4.

    make plan ARGS="--params 70B --gpus 512 --gpu h100"                 # what to run
    make plan ARGS="--params 70B --gpus 512 --tp 8 --pp 4 --zero 1"     # price today's config
    PYTHONPATH=distributed-training python -m planner.plan --layers 80 --hidden 8192 --heads 64 --kv-heads 8 \\
        --ffn 43008 --vocab 128256 --seq 8192 --global-batch 512 --gpus 256 --json
    make plan ARGS="--params 8B --gpus 64 --calibrate distributed-training/allreduce-bench/results/sweep_*.csv"

Output: a table of the best configurations (or one JSON object with --json: best, ranked
candidates, rejected configurations with reasons). Exit 0 with a plan, 1 if nothing fits in
memory, 2 for bad input (one line on stderr).
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import sys
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from common.config import config_dict, parse_config
from common.hardware import get_preset
from planner.calibrate import calibrate
from planner.evidence import from_run
from planner.model import cp_kinds
from planner.model.cluster import Cluster, make_cluster
from planner.model.cp_kinds import CP_KINDS
from planner.model.memory import MEMORY_HEADROOM, RECOMPUTE, usable_bytes
from planner.model.shapes import DEFAULT_VOCAB, Shape, model_shape, named, parse_count
from planner.model.stacks import STACKS
from planner.search import launch
from planner.search.choose import NEAR_TIE
from planner.search.records import PARALLELISMS, Plan, Result, fewest_degrees_first
from planner.search.search import (Enumerated, Pins, Structures, Workload, default_batch, enumerate_structures,
                                   evaluate, search)

# What the planner prices: larger sizes are refused in one line (a 1e30-parameter shape alone takes minutes to
# lay out). 1,000T parameters is a thousand times the largest dense model trained; 2^20 GPUs, 2^24-token
# sequences and 2^24-sequence batches lie beyond every cluster and run on record.
LIMITS = {"params": 1e15, "gpus": 2**20, "layers": 10_000, "hidden": 2**20, "heads": 2**16, "kv_heads": 2**16,
          "ffn": 2**22, "vocab": 2**24, "seq": 2**24, "global_batch": 2**24}


class Resolved(NamedTuple):
    """A plan request, checked and resolved once: what the search takes, and the layouts it will price."""
    workload: Workload
    cluster: Cluster
    pins: Pins
    enumerated: Enumerated


def _f(default, text, **kw):
    return field(default=default, metadata={"help": text, **kw})


@dataclass(frozen=True)
class PlanConfig:
    params: str | None = _f(None, "model size: a published model's shape for 7B, 8B, 13B, 70B, 175B, 405B, 1T (Llama "
                                  "2/3.1, GPT-3, Megatron's 1T: shapes.NAMED), a standard shape for any other (e.g. "
                                  "30B, 1.5T); or give --layers/--hidden/--heads")
    layers: int | None = _f(None, "transformer blocks")
    hidden: int | None = _f(None, "model width h")
    heads: int | None = _f(None, "attention heads")
    kv_heads: int | None = _f(None, "key/value heads (GQA); default the named model's, else = heads (with --params "
                                    "it replaces the shape's)")
    vocab: int | None = _f(None, f"vocabulary size; default the named model's, else {DEFAULT_VOCAB:,}")
    seq: int = _f(4096, "sequence length (tokens)")
    ffn: int | None = _f(None, "MLP width; default the named model's, else 4*hidden (a SwiGLU of width F plans as "
                               "1.5*F; with --params it replaces the shape's)")
    global_batch: int | None = _f(None, "sequences per optimizer step; default the guide's rule: 1M tokens, or 1K "
                                        "tokens per GPU beyond 1024 GPUs")
    stack: str = _f("pytorch", "the software that runs the plan, for its memory and collectives (stacks.py): pytorch "
                               "(parallel-3d, whose command is printed) or megatron (Megatron-Core; no runner here)",
                    choices=tuple(STACKS))
    precision: str = _f("bf16", "matmul precision", choices=("bf16", "fp8"))
    fp8_backend: str = _f("te-fused", "how FP8 linears run: TransformerEngine's fused modules or te.Linear, torchao, "
                                      "the lab's native layer (fp8_cost.py)", choices=("te-fused", "te", "torchao",
                                                                                       "native"))
    fp8_recipe: str = _f("delayed", "FP8 scaling: delayed (TE's default), current or tensorwise (an amax pass more)",
                         choices=("delayed", "current", "tensorwise"))
    gpus: int = _f(8, "GPUs in the job")
    gpu: str = _f("h100", "GPU preset from common/hardware.py (a100-40gb, a100-80gb, h100, h100-gt, h200, b200, "
                             "gb200)")
    gpus_per_node: int | None = _f(None, "NVLink domain size (8 HGX, 72 NVL72, 1 = PCIe only); default from --gpu")
    inter_node_gbps: float | None = _f(None, "network per GPU, Gbit/s; default from --gpu")
    nvlink_gbps: float | None = _f(None, "NVLink GB/s per direction per GPU (0 = PCIe only); default from --gpu")
    peak_tflops: float | None = _f(None, "dense peak TFLOP/s of --precision (MFU denominator); default from --gpu")
    matmul_tflops: float | None = _f(None, "achievable large-GEMM TFLOP/s; default the measured MAMF of --gpu")
    memory_gb: float | None = _f(None, "GPU memory in GB; default from --gpu")
    calibrate: str | None = _f(None, "allreduce-bench sweep CSV(s) (measured busbw), fp8-train bench_gemm.csv "
                                  "(measured matmul rate) and/or parallel-3d runs CSV(s) (measured step times), "
                                  "comma-separated or a glob")
    tp: int | None = _f(None, "pin tensor-parallel degree")
    pp: int | None = _f(None, "pin pipeline-parallel degree")
    dp: int | None = _f(None, "pin data-parallel degree")
    cp: int | None = _f(None, "pin context-parallel degree")
    cp_kind: str | None = _f(None, "pin the context-parallel design (planner/model/cp_kinds.py); default: per plan, "
                                   "the one with the least exposed CP time", choices=CP_KINDS)
    zero: int | None = _f(None, "pin ZeRO stage 0-3 (3 = FSDP)")
    microbatch: int | None = _f(None, "pin micro-batch size (sequences)")
    interleave: int | None = _f(None, "pin virtual pipeline chunks per GPU (1 = plain 1F1B)")
    recompute: str | None = _f(None, "pin activation recompute (op = torchtitan's per-op selective AC)",
                               choices=RECOMPUTE)
    grad_bytes: int | None = _f(None, "bytes per gradient element reduced (4 = fp32: FSDP2's and DDP's reduction, "
                                      "Megatron's main_grad); default the stack's (pytorch 4, megatron 2)",
                                choices=(2, 4))
    memory_headroom: float = _f(MEMORY_HEADROOM, "share of each GPU's memory, as CUDA reports it, a plan's projection "
                                                 "may fill; the rest is what runs reserve beyond it (memory.py)")
    tp_comm_overlap: bool = _f(False, "TransformerEngine's userbuffer TP overlap (Megatron-Core --tp-comm-overlap): "
                                      "every TP all-gather and reduce-scatter pipelined with its GEMM, forward and "
                                      "backward; FP8 runs all-gather in FP8")
    pipeline_split: str = _f("balanced", "layers per pipeline stage: balanced (fewer on the first and last stage, "
                                         "stages.py) or even (L/p each, the Megatron of 2021-22: p divides the "
                                         "layers and v divides L/p)", choices=("balanced", "even"))
    sequence_parallel: bool = _f(True, "sequence parallelism with TP (Korthikanti)")
    flash_attention: bool = _f(True, "fused attention: the a*s^2 scores are never stored")
    dropout: bool = _f(False, "dropout masks in the activations (Megatron's GPT default)")
    fused_kernels: bool | None = _f(None, "fused norm/activation kernels (Megatron, TE, torch.compile); "
                                          "--no-fused-kernels = eager PyTorch; default the stack's")
    rope: bool = _f(False, "rotary position embeddings (Llama) instead of learned positions")
    attention_kernel: str | None = _f(None, "FlashAttention family: best of the GPU generation (FA2 on A100, "
                                            "FA3/cuDNN on H100+) or fa2; default the stack's", choices=("best", "fa2"))
    tp_overlap: bool | None = _f(None, "backward TP collectives overlap the weight-gradient GEMMs (Megatron-Core); "
                                       "default the stack's")
    dp_overlap: bool | None = _f(None, "DP/ZeRO collectives overlap compute (bucketed, prefetched); default the "
                                       "stack's")
    optimizer: str | None = _f(None, "the Adam step's implementation: megatron (fused, clip folded in), fused "
                                     "(torch AdamW fused=True), foreach (torch AdamW's default); default the stack's",
                               choices=("megatron", "fused", "foreach"))
    from_run: str | None = _f(None, "price a measured run as its lab's report does, everything read from its CSV "
                                    "(a GPU row of fp8-train's steps.csv or bench_step.csv, fsdp-scaling, "
                                    "parallel-3d runs): the report's predicted number")
    run: str | None = _f(None, "with --from-run: which run of the file (its name in the report), when it holds "
                               "several")
    top: int = _f(10, "candidates to show")
    json: bool = _f(False, "print one JSON object instead of the table")

    def __post_init__(self):
        if self.from_run is not None:  # every bad input raises ValueError here: one line, exit 2 (common.config)
            if self.params is not None or self.layers is not None:
                raise ValueError("--from-run reads the run's own model, software and layout from its CSV; drop "
                                 "--params/--layers")
            self.measured_run
        else:
            self.resolved

    @cached_property
    def measured_run(self):
        """The run --from-run names (from_run.pick), read once."""
        return from_run.pick(self.from_run, self.run)

    def shape(self) -> Shape:
        if self.params is not None:
            if any(x is not None for x in (self.layers, self.hidden, self.heads)):
                raise ValueError("give either --params or --layers/--hidden/--heads, not both")
            return model_shape(self.params, self.seq, self.vocab, self.kv_heads, self.ffn)
        if None in (self.layers, self.hidden, self.heads):
            raise ValueError("give the model as --params (e.g. 7B) or all of --layers, --hidden, --heads")
        return Shape(self.layers, self.hidden, self.heads, self.kv_heads or self.heads, self.vocab or DEFAULT_VOCAB,
                     self.seq, self.ffn or 4 * self.hidden)

    def model_line(self, shape: Shape) -> str:
        """The output's model line: the named model and its source, then the shape the planner prices."""
        model = named(self.params) if self.params is not None else None
        return (f"{model.describe()}; " if model else "") + shape.describe()

    def check_limits(self) -> None:
        """ValueError (one line) for a size beyond what the planner prices (LIMITS)."""
        if self.params is not None and parse_count(self.params) > LIMITS["params"]:
            raise ValueError(f"--params {self.params} is beyond the planner's range: at most {LIMITS['params']:.0e} "
                             "(1000T) parameters")
        for flag, limit in LIMITS.items():
            value = getattr(self, flag)
            if flag != "params" and value is not None and value > limit:
                raise ValueError(f"--{flag.replace('_', '-')} {value} is beyond the planner's range: at most "
                                 f"{limit:,}")

    @cached_property
    def resolved(self) -> Resolved:
        """The workload, cluster, pins and layouts this request names, worked out once (on construction, where
        every bad value raises ValueError: one line, exit 2)."""
        for flag in ("tp", "pp", "dp", "cp", "microbatch", "interleave", "global_batch", "top"):
            value = getattr(self, flag)
            if value is not None and value <= 0:
                raise ValueError(f"--{flag.replace('_', '-')} must be positive, got {value}")
        if self.zero is not None and self.zero not in (0, 1, 2, 3):
            raise ValueError(f"--zero must be 0, 1, 2 or 3, got {self.zero}")
        if not 0 < self.memory_headroom <= 1:
            raise ValueError(f"--memory-headroom must be in (0, 1], got {self.memory_headroom}")
        self.check_limits()
        stack = STACKS[self.stack]
        stack.check(self.zero, self.recompute)
        stack.check_layout(self.zero, self.recompute, (self.tp or 1) * (self.pp or 1) * (self.cp or 1), self.cp)
        shape = self.shape()
        batch = self.global_batch or default_batch(self.gpus, shape.seq)
        cl = make_cluster(get_preset(self.gpu), self.gpus, self.precision, self.gpus_per_node, self.nvlink_gbps,
                          self.inter_node_gbps, self.peak_tflops, self.matmul_tflops, self.memory_gb)
        if self.calibrate:
            cl = calibrate.calibrated(cl, calibrate.expand(self.calibrate))
        software = {k: getattr(self, k) for k in ("fused_kernels", "attention_kernel", "tp_overlap", "dp_overlap",
                                                  "optimizer", "grad_bytes") if getattr(self, k) is not None}
        w = Workload.of(stack, shape, batch, self.precision, sequence_parallel=self.sequence_parallel,
                        flash_attention=self.flash_attention, dropout=self.dropout, rope=self.rope,
                        fp8_backend=self.fp8_backend, fp8_recipe=self.fp8_recipe,
                        tp_comm_overlap=self.tp_comm_overlap, even_stages=self.pipeline_split == "even",
                        memory_headroom=self.memory_headroom, cp_kind=self.cp_kind or cp_kinds.AUTO, **software)
        pins = Pins(self.tp, self.pp, self.dp, self.cp, self.zero, self.microbatch, self.interleave, self.recompute)
        enumerated = enumerate_structures(w, cl, pins)
        if len(enumerated.structures.t) == 0:
            pinned = {k for k, v in pins.__dict__.items() if v is not None}
            names = lambda r: {k for k, _ in r.degrees}  # noqa: E731
            # The reasons that name the fewest free degrees first, and among them those naming a pinned one.
            named_first = sorted(fewest_degrees_first(enumerated.rejected),
                                 key=lambda r: (len(names(r) - pinned), -len(names(r) & pinned)))
            reasons = list(dict.fromkeys(r.reason for r in named_first))
            raise ValueError("no configuration divides: " + "; ".join(reasons[:3]))
        return Resolved(w, cl, pins, enumerated)


def run_commands(w: Workload, cl: Cluster, res: Result) -> launch.Commands | None:
    """How to run the best plan in parallel-3d (launch.py); None without a plan or a runner for the stack."""
    if not res.best or w.stack.runner is None:
        return None
    return launch.commands(res.best, w.shape, cl.gpu, launch.differences(w, res.best))


def cp_choice(w: Workload, cl: Cluster, best: Plan | None) -> dict | None:
    """The chosen plan priced with each context-parallel design pinned (None where it cannot run) and the line that
    says why its design won (cp_kinds.why); None without context parallelism."""
    if not best or best.cp <= 1:
        return None
    one = Structures(*(np.array([x], float) for x in (best.tp, best.pp, best.cp, best.dp, best.microbatch,
                                                      best.interleave, best.num_microbatches, best.global_batch)))
    priced: dict[str, dict | None] = {}
    for kind in CP_KINDS:
        if kind == "ulysses" and not cp_kinds.ulysses_fits(w.shape.heads, w.shape.kv_heads, best.tp, best.cp):
            priced[kind] = None
            continue
        costs = evaluate(replace(w, cp_kind=kind), cl, one, np.array([best.zero]),
                         np.array([RECOMPUTE.index(best.recompute)])).costs
        priced[kind] = {k: round(float(getattr(costs, k)[0]), 6) for k in ("step_s", "cp_comm_s", "cp_hidden_s")}
    return {"design": best.cp_kind, "priced": priced, "why": cp_kinds.why(best, priced, w.cp_kind != cp_kinds.AUTO)}


def headline(w: Workload, res: Result) -> str:
    """The output's first line: the stack the plan is priced for, and whether the printed command runs it as priced."""
    head = f"stack    {w.stack.name}: {w.stack.title}"
    if w.stack.runner is None:
        return (f"{head}. This project has no runner for it: no command is printed (--stack pytorch prices the plan "
                "parallel-3d runs)")
    if not res.best:
        return f"{head}; nothing fits, so no command is printed"
    differs = launch.differences(w, res.best)
    if differs:
        return f"{head}. The {w.stack.runner} command below does NOT run this plan as priced: " + "; ".join(differs)
    return f"{head}; the {w.stack.runner} command below runs this plan as priced"


def report(cfg: PlanConfig, w: Workload, cl: Cluster, res: Result) -> dict:
    """The --json object: what was planned, for what, and every record of the result by its fields' names."""
    cmds = run_commands(w, cl, res)
    return {
        "stack": {"name": w.stack.name, "what": w.stack.title, "runner": w.stack.runner, "headline": headline(w, res)},
        "model": {"name": model.title if (model := named(cfg.params or "")) else None,
                  **{k: getattr(w.shape, k) for k in ("layers", "hidden", "heads", "kv_heads", "vocab", "seq", "ffn")},
                  "params": w.shape.params},
        "cluster": {"gpu": cl.gpu, "gpus": cl.gpus, "gpus_per_domain": cl.domain, "peak_tflops": cl.peak_tflops,
                    "matmul_tflops": cl.matmul_tflops, "memory_gb": cl.memory_gb,
                    "usable_memory_gb": round(usable_bytes(cl.memory_gb, w.memory_headroom) / 1e9, 2),
                    "intra_busbw_GBps": round(cl.net.intra_GBps, 2),
                    "inter_busbw_GBps_per_gpu": round(cl.net.nic_GBps, 2),
                    "alpha_step_us": round(cl.net.alpha_step_us, 3), "alpha_level_us": round(cl.net.alpha_level_us, 3),
                    "notes": list(cl.notes)},
        "workload": {"global_batch_sequences": w.global_batch, "tokens_per_step": w.global_batch * w.shape.seq,
                     "precision": w.precision},
        "definitions": {
            "mfu": "model FLOPs (6N' + 12·L·h·s per token; PaLM, torchtitan) / step / GPUs / dense peak of "
                   "the precision",
            "hfu": "hardware FLOPs (model + activation recompute; Megatron SC21 eq. 3 counting) / step / GPUs / peak",
            "memory_gb": "GB = 1e9 bytes per GPU on the busiest GPU", "times": "seconds per optimizer step"},
        "config": config_dict(cfg),
        "projection": "cost-model projection, not a measurement",
        "error_band": error_band(),
        "best": res.best.as_json() if res.best else None, "cp_choice": cp_choice(w, cl, res.best),
        "run": cmds._asdict() if cmds else None,
        "candidates": [c.as_json() for c in res.candidates], "near_ties": [t._asdict() for t in res.near_ties],
        "rejected": [r.as_json() for r in res.rejected],
        "rejected_total": res.rejected_total, "evaluated": res.evaluated,
    }


FIT_CSV = Path(__file__).resolve().parent / "results" / "compute_fit.csv"


@lru_cache(maxsize=None)
def error_band() -> dict:
    """The throughput error over the held-out published runs (results/compute_fit.csv, fit_compute.py)."""
    errs = [float(r["throughput_error_pct"]) / 100 for r in csv.DictReader(open(FIT_CSV, newline=""))
            if r["role"] == "held-out" and r["throughput_error_pct"]]
    return {"median_abs": round(statistics.median(abs(e) for e in errs), 4),
            "median_signed": round(statistics.median(errs), 4), "optimistic_runs": sum(e > 0 for e in errs),
            "low": min(errs), "high": max(errs), "runs": len(errs),
            "meaning": "projected over published per-GPU throughput minus 1 (+: the model is optimistic), over the "
                       "held-out published runs (PLANNER_VALIDATION.md, section 4)"}


def table(cfg: PlanConfig, w: Workload, cl: Cluster, res: Result) -> str:
    lines = [headline(w, res), f"model    {cfg.model_line(w.shape)}",
             f"cluster  {cl.describe()}" + "".join(f"\n         note: {n}" for n in cl.notes),
             f"workload {w.global_batch} sequences x {w.shape.seq} = {w.global_batch * w.shape.seq:,} tokens/step, "
             f"{w.precision}; {res.evaluated:,} configurations evaluated (a cost-model projection)", ""]
    head = (f"{'#':>2} {'TP':>3} {'PP':>3} {'DP':>5} {'CP':>3} {'Z':>1} {'mb':>3} {'m':>5} {'v':>2} {'recomp':>9} "
            f"{'batch':>6} {'mem GB':>7} {'step s':>8} {'tok/s/GPU':>10} {'MFU':>6} {'HFU':>6} {'bubble':>6}  "
            "exposed TP/PP/DP/CP s")
    lines += [head, "-" * len(head)]
    for i, c in enumerate(res.candidates, 1):
        exposed = "/".join(f"{c.exposed_s(k):.3g}" for k in PARALLELISMS)
        lines.append(f"{i:>2} {c.tp:>3} {c.pp:>3} {c.dp:>5} {c.cp:>3} {c.zero:>1} {c.microbatch:>3} "
                     f"{c.num_microbatches:>5} {c.interleave:>2} {c.recompute:>9} {c.global_batch:>6} "
                     f"{c.memory_gb.total:>7.1f} {c.step_s:>8.3f} {c.tokens_per_s_per_gpu:>10.0f} "
                     f"{c.mfu:>6.1%} {c.hfu:>6.1%} {c.bubble_fraction:>6.1%}  {exposed}")
    if res.best:
        b = res.best
        mem = ", ".join(f"{k} {v:.1f}" for k, v in b.memory_gb._asdict().items())
        band = error_band()
        lo, hi = b.step_s / (1 + band["high"]), b.step_s / (1 + band["low"])
        lines += ["", f"best: step {b.step_s:.3f} s, expected {lo:.3g}-{hi:.3g} s (the model's throughput error on "
                      f"{band['runs']} held-out published runs: signed median {band['median_signed']:+.1%}, "
                      f"{band['low']:+.0%} to {band['high']:+.0%}; {band['optimistic_runs']} of them ran slower "
                      "than projected)",
                  f"      layers per stage {b.layers_per_stage}"
                  + (f"; runs a global batch of {b.global_batch} sequences, not {w.global_batch} (its DP degree "
                     "does not divide the batch)" if b.global_batch != w.global_batch else ""),
                  f"      memory GB per GPU: {mem} (usable {usable_bytes(cl.memory_gb, w.memory_headroom) / 1e9:.1f}: "
                  f"{w.memory_headroom:.0%} of the {cl.memory_gb:g} GB as CUDA reports it)",
                  f"      per step: compute {b.compute_s:.3f} s, bubble {b.bubble_s:.3f} s; comm (hidden): "
                  + ", ".join(f"{k.upper()} {b.comm_s(k):.3f} ({b.hidden_s(k):.3f})"
                              for k in PARALLELISMS), ""]
        choice = cp_choice(w, cl, b)
        if choice:
            lines.insert(-1, f"      {choice['why']}")
        cmds = run_commands(w, cl, res)
        lines += launch.lines(cmds) if cmds else []
        if res.near_ties:
            lines += ["", f"near-ties: {len(res.near_ties)} other plans within {NEAR_TIE:.0%} of the fastest, the "
                          "model's own error: practitioners' rules chose (choose.py); the runners-up and why each "
                          "lost:"]
            lines += [f"  TP {t.tp} PP {t.pp} DP {t.dp} CP {t.cp} Z{t.zero} mb {t.microbatch} v {t.interleave} "
                      f"{t.recompute}: {t.lost_because}" for t in res.near_ties[:5]]
    else:
        lines += ["", "nothing fits in memory: see the rejected configurations below"]
    if res.rejected:
        lines += ["", f"rejected: {res.rejected_total:,} (first {min(5, len(res.rejected))} shown; --json lists more)"]
        lines += [f"  {r}" for r in res.rejected[:5]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(PlanConfig, argv, description=__doc__.split("\n\n")[0], prog="plan.py")
    if cfg.from_run is not None:
        rep = from_run.report(cfg.measured_run)
        print(json.dumps(rep, indent=1) if cfg.json else "\n".join(from_run.lines(rep)))
        return 0
    w, cl, pins, enumerated = cfg.resolved
    res = search(w, cl, pins, top=cfg.top, enumerated=enumerated)
    try:
        print(json.dumps(report(cfg, w, cl, res), indent=1) if cfg.json else table(cfg, w, cl, res))
        sys.stdout.flush()
    except BrokenPipeError:  # `plan.py | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if res.best else 1


if __name__ == "__main__":
    sys.exit(main())
