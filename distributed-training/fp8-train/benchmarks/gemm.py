"""GEMM rates: one GEMM per path and shape, the ceiling the step-cost numbers approach.

fp32/bf16 torch.mm, FP8 through torch._scaled_mm and torch.nn.functional.scaled_mm, in TFLOP/s (CUDA events on
GPU); it also shows why the native layer calls the public op (on CPU wheels the private one falls back to a
reference kernel).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from common.dist import print0
from common.results import ResultsWriter
from common.timing import time_iterations


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
