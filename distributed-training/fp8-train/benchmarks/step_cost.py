"""Step cost: one full training step (forward, backward, AdamW) per mode and hidden size, and why it costs that.

The median of the timed steps, and its ratio to the first mode's. On a GPU: modes one after another (each owns the
GPU, and the biggest sizes do not fit twice), steps timed with CUDA events, the kernels one step launches counted
with the profiler with the time the GPU was busy running them (gpu_busy_ms: a step well above it waited on the
host), and the FP8 bound at each size (training/bound.py). On CPU the modes are interleaved step by step, so that
a noisy machine slows all of them alike.
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

import torch

from benchmarks.settings import TARGET_EMULATED_VS_FP32, BenchConfig, train_config
from common.data import TokenData
from common.dist import DistInfo, print0
from common.model import GPTConfig, flops_per_token
from common.results import ResultsWriter
from precision import backends
from precision.backend import Backend
from precision.modes import LOW, RunSpec, parse_runs
from precision.prepare import prepare
from training import bound
from training.one_run import free_memory, settings
from training.settings import Config
from training.trainer import Trainer


def trainer_for(cfg: Config, spec: RunSpec, env: DistInfo, data: TokenData) -> Trainer:
    """A Trainer of one mode, its model built and converted as a run builds it."""
    mcfg = GPTConfig(vocab_size=data.vocab_size, seq_len=cfg.seq_len, d_model=cfg.d_model, n_layers=cfg.n_layers,
                     n_heads=cfg.n_heads)
    return Trainer(cfg, spec, prepare(spec, mcfg, settings(cfg), env.device), env, data, mcfg)


def runnable_specs(runs: tuple[str, ...], device: torch.device) -> tuple[list, list[str]]:
    """The modes that can run here, and a note for each that cannot (a GPU without TE, say)."""
    keep, skipped = [], []
    for s in parse_runs(runs, "auto", 0, 1):
        if s.precision in LOW:
            ok, why = backends.status(s.backend, s.precision, device) if s.backend != "auto" else (True, "")
            if not ok:
                skipped.append(f"{s.name}: {why.split(';')[0]}")
                continue
        keep.append(s)
    return keep, skipped


class KernelCount(NamedTuple):
    kernels: int  # GPU kernels one step launches
    busy_ms: float  # the time at least one of them ran (their intervals merged): what the GPU itself needed


def kernels_per_step(tr: Trainer, step: int) -> KernelCount | None:
    """One training step under the profiler (None on CPU). A step whose time is well above busy_ms
    waited on the host: launch overhead and Python, not GPU work, paced it."""
    if tr.env.device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        tr.train_step(step)
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type.name == "CUDA")
    return KernelCount(len(spans), merged_us(spans) / 1e3)


def merged_us(spans: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals sorted by start (microseconds)."""
    total, end = 0.0, float("-inf")
    for s, e in spans:
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


class ModeInfo(NamedTuple):
    backend: Backend
    compiled: bool
    kernels: KernelCount | None
    peak_mem_MiB: float | None


def step_cost(cfg: BenchConfig, env, data, writer: ResultsWriter, bound_writer: ResultsWriter | None = None) -> None:
    """Every mode at every hidden size; each mode's row is written as soon as it is measured (on a GPU, one
    mode at a time), so a benchmark stopped by its time limit keeps what it finished."""
    specs, skipped = runnable_specs(cfg.runs, env.device)
    for note in skipped:
        print0(f"step cost: skipped {note}")
    if not specs:
        return
    interleave = env.device.type == "cpu"
    for d in cfg.hidden:
        tcfg = train_config(cfg, d, cfg.warmup + cfg.iters + 2, monitor=False, stats_every=0, fractions_every=0,
                          health_every=0)
        base: float | None = None  # the first mode's median: every row's ratio_to_first
        for group in ([specs] if interleave else [[s] for s in specs]):
            trainers = {s.name: trainer_for(tcfg, s, env, data) for s in group}
            times: dict[str, list[float]] = {name: [] for name in trainers}
            for step in range(cfg.warmup + cfg.iters):
                for name, tr in trainers.items():  # interleaved on CPU: contention hits every mode alike
                    t = tr.train_step(step)["step_time_s"]
                    if step >= cfg.warmup:
                        times[name].append(t)
            for name, tr in trainers.items():
                mem = torch.cuda.max_memory_allocated(env.device) / 2**20 if env.device.type == "cuda" else None
                counted = kernels_per_step(tr, cfg.warmup + cfg.iters)
                base = base or statistics.median(times[name])
                write_step_row(cfg, d, tcfg, tr.spec, times[name], base, ModeInfo(tr.p.backend, tr.p.compiled,
                                                                                 counted, mem), env, writer)
                if bound_writer is not None and tr.spec.precision == "bf16" and env.device.type == "cuda":
                    write_bound(tr, cfg.warmup + cfg.iters + 1, bound_writer)
            del trainers, tr
            free_memory(env.device)


def write_bound(tr: Trainer, first_step: int, writer: ResultsWriter) -> None:
    """The FP8 bound at this hidden size, from the BF16 mode's own trainer (training/bound.py)."""
    b = bound.record(tr, first_step, writer)
    print0(f"d_model {tr.mcfg.d_model:5d}  FP8 bound {b.speedup:.2f}x (GEMMs {b.bf16_gemm_ms / b.bf16_step_ms:.0%} "
           f"of the BF16 step, {b.bf16_gemm_ms:.1f} -> {b.fp8_gemm_ms:.1f} ms in FP8)")


def scaling_of(backend: Backend, precision: str, asked: str) -> str | None:
    """How a mode scaled its FP8 tensors: torchao's tensorwise/rowwise recipes always scale by the tensor's
    own amax (current scaling, the record's dynamic_only); TE, the native layer and the emulator follow
    --fp8-scaling."""
    if precision != "fp8":
        return None
    return "current" if backend.dynamic_only else asked


def write_step_row(cfg: BenchConfig, d: int, tcfg: Config, s: RunSpec, times: list[float], base: float, info: ModeInfo,
                   env: DistInfo, writer: ResultsWriter) -> None:
    """One mode's row at one hidden size: the median of its timed steps, and its ratio to the first mode's."""
    mcfg = GPTConfig(vocab_size=256, seq_len=tcfg.seq_len, d_model=d, n_layers=tcfg.n_layers, n_heads=tcfg.n_heads)
    fpt = flops_per_token(mcfg, tcfg.seq_len)
    tokens = cfg.batch * tcfg.seq_len
    med = statistics.median(times)
    backend, compiled, counted, mem = info
    ratio = med / base
    emulated = s.precision == "fp8" and not backend.fp8_gemms and env.device.type == "cpu"
    target = TARGET_EMULATED_VS_FP32 if emulated else None
    q1, _, q3 = statistics.quantiles(times, n=4) if len(times) > 1 else (med, med, med)
    writer.write(dict(d_model=d, n_layers=cfg.n_layers, run=s.name, precision=s.precision,
                      precision_backend=backend.name,
                      precision_backend_version=backends.backend_version(backend, s.precision),
                      fp8_scaling=scaling_of(backend, s.precision, tcfg.fp8_scaling),
                      compiled=compiled, tokens_per_step=tokens, step_time_s=med,
                      step_time_min_s=min(times), step_time_p25_s=q1, step_time_p75_s=q3,
                      tokens_per_s=tokens / med, model_tflops=tokens / med * fpt / 1e12,
                      kernels_per_step=counted.kernels if counted else None,
                      gpu_busy_ms=counted.busy_ms if counted else None, peak_mem_MiB=mem,
                      ratio_to_first=ratio, target_ratio=target,
                      meets_target=None if target is None else ratio <= target))
    print0(f"d_model {d:5d}  {s.name:18s} {med * 1e3:8.2f} ms/step  {tokens / med * fpt / 1e12:7.1f} TFLOP/s  "
           f"x{ratio:4.2f} vs the first mode"
           + ("" if counted is None else f"  {counted.kernels} kernels, GPU busy {counted.busy_ms:.1f} ms")
           + ("" if target is None else f"  (target <= {target}: {'met' if ratio <= target else 'MISSED'})"))
