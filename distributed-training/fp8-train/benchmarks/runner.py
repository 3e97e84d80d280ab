"""The benchmarks behind bench.py: every part asked for, into one run folder, each row written when measured.

    BenchConfig          the flags (a frozen dataclass), resolved per device (CPU or GPU defaults)
    step_cost            every mode at every hidden size (bench_step.csv; on a GPU the bound, bench_bound.csv)
    monitor_overhead     the loop with all health features on against the bare step (bench_monitor.csv)
    gemm                 one GEMM per path and shape (bench_gemm.csv)
    kernels.py           Inductor's kernels for one block, this fp8_linear.py and an older one (bench_kernels.csv)
    main, _measure       the run folder (runs/<preset>_ws1-bench/), published to results/ when complete; SIGTERM
                         keeps what was measured

What each part measures and why, and the commands: bench.py, whose docstring is this runner's --help.
"""

from __future__ import annotations

import dataclasses
import signal
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F

from benchmarks import kernels
from common.config import config_dict, parse_config
from common.data import load_data
from common.dist import distributed, fail, print0
from common.failures import PREEMPTED, report
from common.hardware import CHOICES, device_kind, get_preset
from common.model import GPTConfig, flops_per_token
from common.results import ResultsWriter, provenance
from common.runs import PROMOTE_CHOICES, RunError, RunFolder, experiment_flags, results_path, run_dir_for, shown
from common.timing import time_iterations
from health.alerts import AlertEngine
from precision import backends
from precision.backend import Backend
from precision.modes import LOW, parse_runs
from precision.prepare import prepare
from training import bound
from training.runloop import RunLoop
from training.runner import free_memory, settings, writers_for
from training.settings import Config, preset
from training.trainer import Trainer

LAB = Path(__file__).resolve().parents[1]  # the lab: results/
TARGET_EMULATED_VS_FP32 = 1.5  # issue 6
TARGET_MONITOR_PCT = 5.0  # issue 7
PARTS = ("step", "gemm", "monitor", "kernels")
# Defaults per device: (runs, hidden sizes, tokens per sequence, monitor hidden size).
CPU_DEFAULTS = (("fp32", "bf16", "fp8:emulated", "fp8:native"), (128, 256, 512), 128, 128)
GPU_DEFAULTS = (("bf16", "fp8:torchao", "fp8:native", "fp8:te", "fp8:te-fused"), (1024, 2048, 4096, 8192), 1024, 4096)


@dataclass(frozen=True)
class BenchConfig:
    gpu: str = field(default="auto", metadata={"help": "preset", "choices": CHOICES})
    runs: tuple[str, ...] = field(default=(), metadata={"help": "modes to time (empty: cpu fp32,bf16,fp8:emulated,"
                                                                "fp8:native; gpu bf16,fp8:torchao,fp8:native,fp8:te)"})
    hidden: tuple[int, ...] = field(default=(), metadata={"help": "hidden sizes (empty: cpu 128,256,512; "
                                                                  "gpu 1024,2048,4096,8192)"})
    n_layers: int = field(default=2, metadata={"help": "blocks"})
    batch: int = field(default=8, metadata={"help": "sequences per step"})
    seq_len: int = field(default=0, metadata={"help": "tokens per sequence (0: cpu 128, gpu 1024)"})
    warmup: int = field(default=3, metadata={"help": "untimed steps per mode (compilation happens here)"})
    iters: int = field(default=15, metadata={"help": "timed steps per mode"})
    compile: bool | None = field(default=None, metadata={"help": "compile each block (default: on GPU only)"})
    fp8_scaling: str = field(default="delayed", metadata={"help": "per-tensor FP8 scaling of the te, native and "
                                                                  "emulated modes", "choices": ["delayed", "current"]})
    monitor_run: str = field(default="", metadata={"help": "run whose monitoring cost is measured (empty: cpu "
                                                           "fp8:emulated, gpu fp8:torchao: compiled, its amax "
                                                           "probes ride in the graph)"})
    monitor_hidden: int = field(default=0, metadata={"help": "hidden size for the monitoring benchmark "
                                                             "(0: cpu 128, gpu 4096)"})
    monitor_iters: int = field(default=100, metadata={"help": "timed steps with monitoring on and off"})
    parts: tuple[str, ...] = field(default=("step", "gemm", "monitor"), metadata={"help": f"of {', '.join(PARTS)}"})
    kernels_baseline: str = field(default="", metadata={"help": "kernels: also count with this commit's "
                                                                "fp8_linear.py (e.g. 2fbc6b4)"})
    threads: int = field(default=0, metadata={"help": "torch threads (0 = default)"})
    out: str = field(default="", metadata={"help": "where complete runs are published (default: fp8-train/results/"
                                                  "<preset>_ws1); a run writes into runs/<name>-bench/ first"})
    promote: str = field(default="auto", metadata={"help": "when complete: auto (replace results for the default "
                                                           "benchmark, keep others in runs/), replace, merge, no",
                                                   "choices": PROMOTE_CHOICES})

    def __post_init__(self):
        if self.iters < 1 or self.warmup < 0 or self.batch < 1 or self.seq_len < 0 or self.n_layers < 1:
            raise ValueError("--iters/--batch/--n-layers must be >= 1, --warmup/--seq-len >= 0")
        if not self.parts or not set(self.parts) <= set(PARTS):
            raise ValueError(f"--parts takes {', '.join(PARTS)}; got {','.join(self.parts) or '(none)'}")
        if any(h < 16 or h % 16 for h in self.hidden + ((self.monitor_hidden,) if self.monitor_hidden else ())):
            raise ValueError(f"--hidden sizes must be multiples of 16 (FP8 GEMM shapes), got {self.hidden}")
        parse_runs(self.runs, "auto", 0, 1)  # a bad mode is a ValueError here, before anything runs

    def resolved(self, on_gpu: bool) -> "BenchConfig":
        runs, hidden, seq, mon = GPU_DEFAULTS if on_gpu else CPU_DEFAULTS
        return dataclasses.replace(
            self, runs=self.runs or runs, hidden=self.hidden or hidden, seq_len=self.seq_len or seq,
            monitor_hidden=self.monitor_hidden or mon, compile=on_gpu if self.compile is None else self.compile,
            monitor_run=self.monitor_run or ("fp8:torchao" if on_gpu else "fp8:emulated"))


def _train_cfg(b: BenchConfig, d_model: int, steps: int, **kw) -> Config:
    return dataclasses.replace(
        preset("cpu" if b.gpu == "cpu" else "h100"), gpu=b.gpu, batch=b.batch, seq_len=b.seq_len, d_model=d_model,
        n_layers=b.n_layers, n_heads=max(1, d_model // 128 if d_model >= 1024 else d_model // 64), steps=steps,
        lr=1e-3, warmup=1, val_every=0, log_every=10 ** 9, progress=False, compile=b.compile, ckpt_every=0,
        fp8_scaling=b.fp8_scaling, **kw)


def _trainer(cfg: Config, spec, env, data) -> Trainer:
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
        tcfg = _train_cfg(cfg, d, cfg.warmup + cfg.iters + 2, monitor=False, stats_every=0, fractions_every=0,
                          health_every=0)
        base: float | None = None  # the first mode's median: every row's ratio_to_first
        for group in ([specs] if interleave else [[s] for s in specs]):
            trainers = {s.name: _trainer(tcfg, s, env, data) for s in group}
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
                    write_bound(tcfg, tr, cfg.warmup + cfg.iters + 1, bound_writer)
            del trainers, tr
            free_memory(env.device)


def write_bound(tcfg: Config, tr: Trainer, first_step: int, writer: ResultsWriter) -> None:
    """The FP8 bound at this hidden size, from the BF16 mode's own trainer (bound.py)."""
    b = bound.measure_trainer(tr, bound.mapped_linears(tr.mcfg, tcfg.fp8_modules, tcfg.hp_modules), first_step)
    writer.write(dict(d_model=tr.mcfg.d_model, n_layers=tr.mcfg.n_layers, n_heads=tr.mcfg.n_heads,
                      seq_len=tcfg.seq_len, batch=tcfg.batch, tokens_per_step=tr.tokens_per_step,
                      compiled=tr.p.compiled, **b.row()))
    print0(f"d_model {tr.mcfg.d_model:5d}  FP8 bound {b.speedup:.2f}x (GEMMs {b.bf16_gemm_ms / b.bf16_step_ms:.0%} "
           f"of the BF16 step, {b.bf16_gemm_ms:.1f} -> {b.fp8_gemm_ms:.1f} ms in FP8)")


def scaling_of(backend: Backend, precision: str, asked: str) -> str | None:
    """How a mode scaled its FP8 tensors: torchao's tensorwise/rowwise recipes always scale by the tensor's
    own amax (current scaling, the record's dynamic_only); TE, the native layer and the emulator follow
    --fp8-scaling."""
    if precision != "fp8":
        return None
    return "current" if backend.dynamic_only else asked


def write_step_row(cfg, d, tcfg, s, times: list[float], base: float, info: ModeInfo, env, writer) -> None:
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
                      precision_backend=backend.name, precision_backend_version=backends.backend_version(backend),
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


def monitor_overhead(cfg: BenchConfig, env, data, writer: ResultsWriter) -> None:
    """Wall time per loop iteration with every health feature on vs. the bare step, interleaved.

    "on" = what a run does with the runner's defaults: per-step param/update norms, FP8 scale reads
    and alerts, CSV rows, FP8 amax/scale rows every 10 steps and underflow/saturation every 50,
    per-layer norms and activation ranges every 10, the HTML dashboard rewritten every 25 steps
    but at most every 10 s; the mean over 100 steps covers whole periods. "off" = forward,
    backward, the grad norm that clipping and NaN detection need anyway, and the optimizer step.
    Both are compiled alike (the "on" graph carries the activation hooks).
    """
    specs, skipped = runnable_specs((cfg.monitor_run,), env.device)
    if not specs:
        print0(f"monitor: skipped {skipped[0]}")
        return
    spec = specs[0]
    n = cfg.warmup + cfg.monitor_iters
    with tempfile.TemporaryDirectory() as tmp:
        on_cfg = _train_cfg(cfg, cfg.monitor_hidden, n + 1)  # the runner's defaults for every health setting
        off_cfg = dataclasses.replace(on_cfg, monitor=False, stats_every=0, fractions_every=0, health_every=0,
                                      dashboard_every=0)
        writers = writers_for(Path(tmp), env, provenance(env, "1"), {})
        loops = {"on": RunLoop(_trainer(on_cfg, spec, env, data), writers, AlertEngine(on_cfg.thresholds),
                               Path(tmp) / "dash.html"),
                 "off": RunLoop(_trainer(off_cfg, spec, env, data), None, AlertEngine(off_cfg.thresholds), None)}
        times: dict[str, list[float]] = {k: [] for k in loops}
        for step in range(n):
            for k, loop in loops.items():
                if env.device.type == "cuda":
                    torch.cuda.synchronize(env.device)
                t0 = time.perf_counter()
                loop.one_step(step)
                if env.device.type == "cuda":
                    torch.cuda.synchronize(env.device)
                if step >= cfg.warmup:
                    times[k].append(time.perf_counter() - t0)
        compiled = loops["on"].tr.p.compiled
        del loops
        free_memory(env.device)
    on, off = statistics.fmean(times["on"]), statistics.fmean(times["off"])
    pct = 100 * (on - off) / off
    writer.write(dict(run=spec.name, d_model=cfg.monitor_hidden, compiled=compiled, steps=cfg.monitor_iters,
                      step_time_off_s=off, step_time_on_s=on, median_off_s=statistics.median(times["off"]),
                      median_on_s=statistics.median(times["on"]), overhead_pct=pct, target_pct=TARGET_MONITOR_PCT,
                      meets_target=pct < TARGET_MONITOR_PCT))
    print0(f"monitoring overhead ({spec.name}, d_model {cfg.monitor_hidden}): {off * 1e3:.1f} -> {on * 1e3:.1f} ms "
           f"per step = {pct:+.1f}% (target < {TARGET_MONITOR_PCT}%: "
           f"{'met' if pct < TARGET_MONITOR_PCT else 'MISSED'})")


def gemm(env, writer: ResultsWriter, shapes: list[tuple[int, int, int]]) -> None:
    """One GEMM per path and shape: (M,K) @ (K,N); on GPU CUDA events, best of the timed iterations."""
    dev = env.device
    gpu = dev.type == "cuda"
    one = torch.ones((), device=dev)
    for m, k, n in shapes:
        a, b = torch.randn(m, k, device=dev), torch.randn(n, k, device=dev)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)  # b8.t(): column-major (K, N)
        ops = {"fp32 torch.mm": lambda: a @ b.t(),
               "fp8 torch._scaled_mm": lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                                                 out_dtype=torch.bfloat16 if gpu else torch.float32)}
        if gpu:
            ab, bb = a.bfloat16(), b.bfloat16()
            ops["bf16 torch.mm"] = lambda: ab @ bb.t()
        if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
            tw = F.ScalingType.TensorWise
            ops["fp8 F.scaled_mm"] = lambda: F.scaled_mm(a8, b8.t(), one.reshape(1), tw, one.reshape(1), tw,
                                                         output_dtype=torch.bfloat16 if gpu else torch.float32)
        for name, fn in ops.items():
            t = _time_op(fn, dev)
            writer.write(dict(op=name, m=m, k=k, n=n, time_us=t * 1e6, tflops=2 * m * k * n / t / 1e12,
                              timing="cuda_event" if gpu else "perf_counter"))
            print0(f"{name:22s} {m}x{k}x{n}: {t * 1e6:10.1f} us  {2 * m * k * n / t / 1e12:8.3f} TFLOP/s")


def _time_op(fn, dev: torch.device) -> float:
    """Best of up to 20 timed calls after warm-up; a slow reference kernel on CPU gets a few, not minutes."""
    fn()
    if dev.type == "cuda":
        return time_iterations(fn, warmup=5, iters=20, device=dev, barrier=False).min_s
    samples, deadline = [], time.perf_counter() + 2.0
    while len(samples) < 10 and (not samples or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return min(samples)


class Stopped(Exception):
    """SIGTERM: a scheduler's or gpu-quick's time limit."""


def _stopped(signum, frame) -> None:
    raise Stopped


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    cfg = parse_config(BenchConfig, argv, description=description, prog="fp8-train-bench")
    try:
        preset = get_preset(cfg.gpu)
        on_gpu = device_kind(preset) == "cuda"
    except ValueError as e:
        fail(str(e), 2)
    if "kernels" in cfg.parts and on_gpu:
        fail("--parts kernels counts Inductor's CPU kernels: run it with --gpu cpu (on a GPU, `step` counts "
             "the kernels each step launches)", 2)
    cfg = cfg.resolved(on_gpu)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = results_path(cfg.out, LAB, preset.run_tag(1))  # one process: <preset>_ws1
    try:
        baseline = None
        if "kernels" in cfg.parts and cfg.kernels_baseline:
            baseline = kernels.load_fp8_linear(cfg.kernels_baseline)
        # one process: the run folder is taken (and its lock checked) before anything is measured
        folder = RunFolder.open(run_dir_for(out.parent, f"{out.name}-bench"), out)
    except (ValueError, RunError) as e:
        fail(str(e), 2)
    changed = experiment_flags(cfg, BenchConfig(gpu=cfg.gpu, out=cfg.out, threads=cfg.threads,
                                             promote=cfg.promote).resolved(on_gpu))
    data = load_data()
    before = signal.signal(signal.SIGTERM, _stopped)  # a time limit: the rows written so far stay in the run folder
    try:
        return _measure(cfg, folder, changed, data, on_gpu, baseline)
    finally:
        signal.signal(signal.SIGTERM, before)


def _measure(cfg: BenchConfig, folder: RunFolder, changed: list[str], data, on_gpu: bool, baseline) -> int:
    with distributed(device="cuda" if on_gpu else "cpu") as env:
        prov = provenance(env, "2")
        w = lambda name, cols, key, **kw: folder.writer(name, cols, key, prov, **kw)  # noqa: E731
        saved = {k: v for k, v in config_dict(cfg).items() if k != "out"}  # no machine paths in results/
        try:  # only the parts asked for get a file: a partial benchmark never blanks the others in results/
            if "step" in cfg.parts:
                bounds = w("bench_bound.csv", bound.COLUMNS, bound.KEY) if on_gpu else None
                step_cost(cfg, env, data, w("bench_step.csv", [
                    "d_model", "n_layers", "run", "precision", "precision_backend", "precision_backend_version",
                    "fp8_scaling", "compiled", "tokens_per_step",
                    "step_time_s", "step_time_min_s", "step_time_p25_s", "step_time_p75_s", "tokens_per_s",
                    "model_tflops", "kernels_per_step", "gpu_busy_ms",
                    "peak_mem_MiB", "ratio_to_first", "target_ratio", "meets_target"],
                    ["d_model", "run", "fp8_scaling"],
                    config=saved), bounds)
            if "gemm" in cfg.parts:
                # the GPU default sizes whatever --hidden says: the GEMM rates are one table, whichever part runs them
                shapes = [(8192, h, h) for h in GPU_DEFAULTS[1]] if on_gpu else [(1024, 512, 512)]
                gemm(env, w("bench_gemm.csv", ["op", "m", "k", "n", "time_us", "tflops", "timing"],
                            ["op", "m", "k", "n"]), shapes)
            if "monitor" in cfg.parts:
                monitor_overhead(cfg, env, data, w("bench_monitor.csv", [
                    "run", "d_model", "compiled", "steps", "step_time_off_s", "step_time_on_s", "median_off_s",
                    "median_on_s", "overhead_pct", "target_pct", "meets_target"], ["run", "d_model"]))
            if "kernels" in cfg.parts:
                kernels.kernel_counts(baseline, cfg.kernels_baseline, w("bench_kernels.csv", [
                    "fp8_linear_version", "fp8_linears", "inductor_kernels", "update_ops"], ["fp8_linear_version"]))
        except Stopped:
            folder.finish(complete=False, changed=changed)
            report(f"fp8-train-bench: SIGTERM; the rows measured so far stay in {shown(folder.path)} (publish them "
                   f"with `python -m common.runs promote {shown(folder.path)} --merge`)", PREEMPTED, "preempted")
            return PREEMPTED
        except BaseException:
            folder.finish(complete=False, changed=changed)
            raise
    for line in folder.finish(complete=True, changed=changed, promote=cfg.promote):
        print(line)
    return 0

