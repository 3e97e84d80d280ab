"""fp8-train benchmarks (CSVs, not timed tests): what a step costs in each precision.

    monitor     the training-health monitoring (issue 7): per-step norms, FP8 scale reads, alerts,
                CSV rows, periodic per-layer and FP8 statistics, dashboard rewrites; wall time per
                loop iteration with all of it on vs off, interleaved. Target: < 5% of the step.
    step cost   one full training step (forward, backward, AdamW, the per-step metrics) per mode
                and hidden size, modes interleaved step by step so that a noisy machine slows all
                of them alike; median of the timed steps. Target (issue 6): on CPU the emulated FP8
                step costs at most 1.5x the fp32 step. Emulation adds O(M*K) casts per GEMM to
                the GEMM's O(M*K*N), so the ratio falls as the hidden size grows: the CPU's own
                crossover, the way real FP8 needs large GEMMs to beat BF16 on a GPU.
    gemm        one FP8 GEMM through torch._scaled_mm, through torch.nn.functional.scaled_mm and
                an fp32 torch.mm of the same shape, in GFLOP/s: why the native backend calls the
                public op (on CPU wheels the private one can fall back to a reference kernel).

    make fp8-train-bench GPU=cpu                     # -> results/cpu/bench_{step,gemm,monitor}.csv
    PYTHONPATH=distributed-training python distributed-training/fp8-train/bench.py --gpu cpu --hidden 128,512
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from common.config import config_dict, parse_config
from common.data import load_data
from common.dist import distributed, fail, print0
from common.hardware import CHOICES, get_preset
from common.model import GPTConfig
from common.results import ResultsWriter, provenance
import train
from alerts import AlertEngine
from precision import parse_runs, prepare
from runloop import RunLoop
from settings import Config, with_preset
from train import settings
from trainer import Trainer

LAB = Path(__file__).resolve().parent
TARGET_EMULATED_VS_FP32 = 1.5  # issue 6
TARGET_MONITOR_PCT = 5.0  # issue 7


@dataclass(frozen=True)
class BenchConfig:
    gpu: str = field(default="auto", metadata={"help": "preset", "choices": CHOICES})
    runs: tuple[str, ...] = field(default=("fp32", "bf16", "fp8:emulated", "fp8:native"),
                                  metadata={"help": "modes to time"})
    hidden: tuple[int, ...] = field(default=(128, 256, 512), metadata={"help": "hidden sizes"})
    n_layers: int = field(default=2, metadata={"help": "blocks"})
    batch: int = field(default=8, metadata={"help": "sequences per step"})
    seq_len: int = field(default=128, metadata={"help": "tokens per sequence"})
    warmup: int = field(default=3, metadata={"help": "untimed steps per mode"})
    iters: int = field(default=15, metadata={"help": "timed steps per mode"})
    monitor_run: str = field(default="fp8:emulated", metadata={"help": "run whose monitoring cost is measured"})
    monitor_hidden: int = field(default=128, metadata={"help": "hidden size for the monitoring benchmark"})
    monitor_iters: int = field(default=100, metadata={"help": "timed steps with monitoring on and off"})
    parts: tuple[str, ...] = field(default=("step", "gemm", "monitor"), metadata={"help": "what to measure"})
    threads: int = field(default=0, metadata={"help": "torch threads (0 = default)"})
    out: str = field(default="", metadata={"help": "results dir (default: fp8-train/results/<preset>)"})

    def __post_init__(self):
        if self.iters < 1 or self.warmup < 0 or self.batch < 1 or self.seq_len < 1 or self.n_layers < 1:
            raise ValueError("--iters/--batch/--seq-len/--n-layers must be >= 1 and --warmup >= 0")
        if not set(self.parts) <= {"step", "gemm", "monitor"}:
            raise ValueError(f"--parts takes step, gemm, monitor; got {self.parts}")
        if any(h < 16 or h % 16 for h in self.hidden + (self.monitor_hidden,)):
            raise ValueError(f"--hidden sizes must be multiples of 16 (FP8 GEMM shapes), got {self.hidden}")


def _train_cfg(b: BenchConfig, d_model: int, steps: int, **kw) -> Config:
    c = Config(gpu=b.gpu, batch=b.batch, seq_len=b.seq_len, d_model=d_model, n_layers=b.n_layers,
               n_heads=max(1, d_model // 64), steps=steps, lr=1e-3, warmup=1, val_every=0, log_every=10 ** 9,
               progress=False, **kw)
    return with_preset(c, "cpu" if b.gpu == "cpu" else "h100", explicit_runs=True)


def _trainer(cfg: Config, spec, env, data) -> Trainer:
    mcfg = GPTConfig(vocab_size=data.vocab_size, seq_len=cfg.seq_len, d_model=cfg.d_model, n_layers=cfg.n_layers,
                     n_heads=cfg.n_heads)
    return Trainer(cfg, spec, prepare(spec, mcfg, settings(cfg), env.device), env, data, mcfg)


def step_cost(cfg: BenchConfig, env, data, writer: ResultsWriter) -> None:
    specs = parse_runs(cfg.runs, "auto", 0, 1)
    for d in cfg.hidden:
        tcfg = _train_cfg(cfg, d, cfg.warmup + cfg.iters + 1, monitor=False, stats_every=0, fractions_every=0,
                          health_every=0)
        trainers = {s.name: _trainer(tcfg, s, env, data) for s in specs}
        times: dict[str, list[float]] = {n: [] for n in trainers}
        for step in range(cfg.warmup + cfg.iters):
            for name, tr in trainers.items():  # interleaved: contention hits every mode alike
                t = tr.train_step(step)["step_time_s"]
                if step >= cfg.warmup:
                    times[name].append(t)
        base = statistics.median(times[specs[0].name])
        for s in specs:
            med = statistics.median(times[s.name])
            ratio = med / base
            target = TARGET_EMULATED_VS_FP32 if s.precision == "fp8" and trainers[s.name].p.backend == "emulated" \
                and env.device.type == "cpu" else None
            writer.write(dict(d_model=d, n_layers=cfg.n_layers, run=s.name, precision=s.precision,
                              backend=trainers[s.name].p.backend, tokens_per_step=cfg.batch * cfg.seq_len,
                              step_time_s=med, step_time_min_s=min(times[s.name]), ratio_to_first=ratio,
                              target_ratio=target, meets_target=None if target is None else ratio <= target))
            print0(f"d_model {d:4d}  {s.name:18s} {med * 1e3:8.1f} ms/step  x{ratio:4.2f} vs {specs[0].name}"
                   + ("" if target is None else f"  (target <= {target}: {'met' if ratio <= target else 'MISSED'})"))


def monitor_overhead(cfg: BenchConfig, env, data, writer: ResultsWriter) -> None:
    """Wall time per loop iteration with every health feature on vs. the bare step, interleaved.

    "on" = what a run does with the runner's defaults: per-step param/update norms, FP8 scale reads
    and alerts, CSV rows, FP8 amax/scale rows every 10 steps and underflow/saturation every 50,
    per-layer norms and activation ranges every 10, the HTML dashboard rewritten every 25 steps
    but at most every 10 s; the mean over 100 steps covers whole periods. "off" = forward,
    backward, the grad norm that clipping and NaN detection need anyway, and the optimizer step.
    """
    spec = parse_runs((cfg.monitor_run,), "auto", 0, 1)[0]
    n = cfg.warmup + cfg.monitor_iters
    with tempfile.TemporaryDirectory() as tmp:
        on_cfg = _train_cfg(cfg, cfg.monitor_hidden, n + 1)  # the runner's defaults for every health setting
        off_cfg = dataclasses.replace(on_cfg, monitor=False, stats_every=0, fractions_every=0, health_every=0,
                                      dashboard_every=0)
        env_main = env
        writers = train.writers_for(Path(tmp), env_main, provenance(env, "1"), {}, resume=False)
        loops = {"on": RunLoop(_trainer(on_cfg, spec, env, data), writers, AlertEngine(on_cfg.thresholds),
                               Path(tmp) / "dash.html"),
                 "off": RunLoop(_trainer(off_cfg, spec, env, data), None, AlertEngine(off_cfg.thresholds), None)}
        times: dict[str, list[float]] = {k: [] for k in loops}
        for step in range(n):
            for k, loop in loops.items():
                t0 = time.perf_counter()
                loop.one_step(step)
                if step >= cfg.warmup:
                    times[k].append(time.perf_counter() - t0)
    on, off = statistics.fmean(times["on"]), statistics.fmean(times["off"])
    pct = 100 * (on - off) / off
    writer.write(dict(run=spec.name, d_model=cfg.monitor_hidden, steps=cfg.monitor_iters, step_time_off_s=off,
                      step_time_on_s=on, median_off_s=statistics.median(times["off"]),
                      median_on_s=statistics.median(times["on"]), overhead_pct=pct, target_pct=TARGET_MONITOR_PCT,
                      meets_target=pct < TARGET_MONITOR_PCT))
    print0(f"monitoring overhead ({spec.name}, d_model {cfg.monitor_hidden}): {off * 1e3:.1f} -> {on * 1e3:.1f} ms "
           f"per step = {pct:+.1f}% (target < {TARGET_MONITOR_PCT}%: "
           f"{'met' if pct < TARGET_MONITOR_PCT else 'MISSED'})")


def gemm(env, writer: ResultsWriter, m: int = 1024, k: int = 512, n: int = 512) -> None:
    dev = env.device
    a = torch.randn(m, k, device=dev)
    b = torch.randn(n, k, device=dev)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    one = torch.ones((), device=dev)
    ops = {"fp32 torch.mm": lambda: a @ b.t(),
           "fp8 torch._scaled_mm": lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                                             out_dtype=torch.float32)}
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        tw = F.ScalingType.TensorWise
        ops["fp8 F.scaled_mm"] = lambda: F.scaled_mm(a8, b8.t(), one.reshape(1), tw, one.reshape(1), tw,
                                                     output_dtype=torch.float32)
    for name, fn in ops.items():
        fn()
        samples = []
        deadline = time.perf_counter() + 2.0  # a slow reference kernel gets one or two samples, not minutes
        while len(samples) < 10 and (not samples or time.perf_counter() < deadline):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            samples.append(time.perf_counter() - t0)
        t = min(samples)
        writer.write(dict(op=name, m=m, k=k, n=n, time_us=t * 1e6, gflops=2 * m * k * n / t / 1e9,
                          samples=len(samples)))
        print0(f"{name:22s} {m}x{k}x{n}: {t * 1e6:10.0f} us  {2 * m * k * n / t / 1e9:8.2f} GFLOP/s")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(BenchConfig, argv, description=__doc__, prog="fp8-train-bench")
    try:
        preset = get_preset(cfg.gpu)
    except ValueError as e:
        fail(str(e), 2)
    if preset.name != "cpu" and not torch.cuda.is_available():
        fail(f"GPU={cfg.gpu} needs a CUDA GPU and torch sees none; use GPU=cpu here", 2)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    data = load_data()
    out = Path(cfg.out) if cfg.out else LAB / "results" / preset.name
    with distributed(device="cpu" if preset.name == "cpu" else "cuda") as env:
        prov = provenance(env, "1")
        step_w = ResultsWriter(out / "bench_step.csv",
                               ["d_model", "n_layers", "run", "precision", "backend", "tokens_per_step", "step_time_s",
                                "step_time_min_s", "ratio_to_first", "target_ratio", "meets_target"],
                               key=["d_model", "run"], provenance=prov, config=config_dict(cfg), enabled=env.is_main)
        gemm_w = ResultsWriter(out / "bench_gemm.csv", ["op", "m", "k", "n", "time_us", "gflops", "samples"],
                               key=["op", "m", "k", "n"], provenance=prov, enabled=env.is_main)
        mon_w = ResultsWriter(out / "bench_monitor.csv",
                              ["run", "d_model", "steps", "step_time_off_s", "step_time_on_s", "median_off_s",
                               "median_on_s", "overhead_pct", "target_pct", "meets_target"],
                              key=["run", "d_model"], provenance=prov, enabled=env.is_main)
        if "step" in cfg.parts:
            step_cost(cfg, env, data, step_w)
        if "gemm" in cfg.parts:
            gemm(env, gemm_w)
        if "monitor" in cfg.parts:
            monitor_overhead(cfg, env, data, mon_w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
