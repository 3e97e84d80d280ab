"""fp8-train benchmarks (CSVs, not timed tests): what a step costs in each precision.

    step cost   one full training step (forward, backward, AdamW, the per-step metrics) per mode
                and hidden size, modes interleaved step by step so that a noisy machine slows all
                of them alike; median of the timed steps. Target (issue 6): on CPU the emulated FP8
                step costs at most 1.5x the fp32 step. Emulation adds O(M*K) casts per GEMM to
                the GEMM's O(M*K*N), so the ratio falls as the hidden size grows: the CPU's own
                crossover, the way real FP8 needs large GEMMs to beat BF16 on a GPU.
    gemm        one FP8 GEMM through torch._scaled_mm, through torch.nn.functional.scaled_mm and
                an fp32 torch.mm of the same shape, in GFLOP/s: why the native backend calls the
                public op (on CPU wheels the private one can fall back to a reference kernel).

    make fp8-train-bench GPU=cpu                     # -> results/cpu/bench_step.csv, bench_gemm.csv
    PYTHONPATH=distributed-training python distributed-training/fp8-train/bench.py --gpu cpu --hidden 128,512
"""

from __future__ import annotations

import statistics
import sys
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
from precision import PrecisionSettings, RunSpec, parse_runs, prepare
from trainer import Trainer

LAB = Path(__file__).resolve().parent
TARGET_EMULATED_VS_FP32 = 1.5  # issue 6


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
    threads: int = field(default=0, metadata={"help": "torch threads (0 = default)"})
    out: str = field(default="", metadata={"help": "results dir (default: fp8-train/results/<preset>)"})

    def __post_init__(self):
        if self.iters < 1 or self.warmup < 0 or self.batch < 1 or self.seq_len < 1 or self.n_layers < 1:
            raise ValueError("--iters/--batch/--seq-len/--n-layers must be >= 1 and --warmup >= 0")
        if any(h < 16 or h % 16 for h in self.hidden):
            raise ValueError(f"--hidden sizes must be multiples of 16 (FP8 GEMM shapes), got {self.hidden}")


@dataclass(frozen=True)
class _TrainArgs:  # the fields Trainer reads
    batch: int
    seq_len: int
    steps: int
    lr: float = 1e-3
    warmup: int = 1
    weight_decay: float = 0.1
    clip: float = 1.0
    grad_accum: int = 1
    stats_every: int = 0
    val_batches: int = 1


def step_cost(cfg: BenchConfig, env, data, writer: ResultsWriter) -> None:
    specs = parse_runs(cfg.runs, "auto", 0, 1)
    for d in cfg.hidden:
        mcfg = GPTConfig(vocab_size=data.vocab_size, seq_len=cfg.seq_len, d_model=d, n_layers=cfg.n_layers,
                         n_heads=max(1, d // 64))
        targs = _TrainArgs(cfg.batch, cfg.seq_len, cfg.warmup + cfg.iters)
        trainers = {s.name: Trainer(targs, s, prepare(s, mcfg, PrecisionSettings(), env.device), env, data, mcfg, None)
                    for s in specs}
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
        writer.write(dict(op=name, m=m, k=k, n=n, time_us=t * 1e6, gflops=2 * m * k * n / t / 1e9, samples=len(samples)))
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
        step_cost(cfg, env, data, step_w)
        gemm(env, gemm_w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
