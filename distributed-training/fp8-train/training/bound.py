"""The FP8 bound of a model: the step time FP8 could reach if its GEMMs ran at FP8 speed and casts were free.

Measured, not estimated (issue 23), on the model's own BF16 training step:

    1. profile one BF16 step (torch.profiler, CUDA kernel times) and add up the GEMMs of the linears
       the precision map puts in FP8: per linear (in -> out) and T tokens, the forward (T,in)x(in,out),
       the input gradient (T,out)x(out,in) and the weight gradient (out,T)x(T,in), recognised by their
       dimensions {T, in, out}. Attention, the LM head, norms, the optimizer stay as they are;
    2. time the same GEMMs in FP8 (torch._scaled_mm: E4M3 operands, tensorwise scales, BF16 output),
       each shape alone with CUDA events over rotated inputs (so L2 holds none of them), with the
       accumulation TE and torchao use: fast for the forward, split (exact) for the two backward GEMMs;
    3. bound step = BF16 step - its FP8-able GEMMs + those GEMMs in FP8; bound = BF16 step / bound step.

A backend at the bound pays nothing for amaxes, scales, casts and transposed copies; the report puts
each measured speedup beside it, and (speedup - 1) / (bound - 1) is the share of the possible gain a
backend realised. Fused modules (te-fused's one QKV GEMM instead of three) change the GEMM shapes, so
they can land slightly beyond it.

    make fp8-train GPU=h100        # bound.csv for the preset's model (after its BF16 run)
    make fp8-train-bench GPU=h100  # bench_bound.csv: one row per hidden size
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Callable, Iterable, NamedTuple

import torch

from common.model import GPT, GPTConfig
from common.results import NoWriter, ResultsWriter
from precision.prepare import select_modules
from training.settings import Config
from training.trainer import Trainer

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm")
ROTATE = 4  # input sets per shape: more than the 50 MB L2 of an H100 holds at these sizes
COLUMNS = ["d_model", "n_layers", "n_heads", "seq_len", "batch", "tokens_per_step", "compiled", "bf16_step_ms",
           "bf16_gemm_ms", "fp8_gemm_ms", "other_gemm_ms", "gemm_share", "bf16_gemm_tflops", "fp8_gemm_tflops",
           "fp8_gemms", "bound_step_ms", "bound_speedup"]
KEY = ["d_model", "n_layers", "seq_len", "batch"]


class Gemm(NamedTuple):
    m: int
    n: int
    k: int
    backward: bool  # input- or weight-gradient GEMM (split accumulation in FP8)

    @property
    def flop(self) -> float:
        return 2.0 * self.m * self.n * self.k


class ProfiledGemm(NamedTuple):
    gemm: Gemm | None  # None: a GEMM that stays in high precision (LM head, attention's batched ones)
    ms: float


class Bound(NamedTuple):
    bf16_step_ms: float
    bf16_gemm_ms: float  # the FP8-able GEMMs of one BF16 step
    fp8_gemm_ms: float  # the same GEMMs in FP8
    other_gemm_ms: float  # GEMMs that stay high precision
    fp8_gemms: int
    gemm_flop: float

    @property
    def bound_step_ms(self) -> float:
        return self.bf16_step_ms - self.bf16_gemm_ms + self.fp8_gemm_ms

    @property
    def speedup(self) -> float:
        return self.bf16_step_ms / self.bound_step_ms

    def row(self) -> dict:
        return dict(bf16_step_ms=self.bf16_step_ms, bf16_gemm_ms=self.bf16_gemm_ms, fp8_gemm_ms=self.fp8_gemm_ms,
                    other_gemm_ms=self.other_gemm_ms, gemm_share=self.bf16_gemm_ms / self.bf16_step_ms,
                    bf16_gemm_tflops=self.gemm_flop / self.bf16_gemm_ms / 1e9,
                    fp8_gemm_tflops=self.gemm_flop / self.fp8_gemm_ms / 1e9, fp8_gemms=self.fp8_gemms,
                    bound_step_ms=self.bound_step_ms, bound_speedup=self.speedup)


def classify(shape: tuple[int, int, int], backward: bool, tokens: int, linears: set[tuple[int, int]]) -> Gemm | None:
    """A profiled GEMM (m, n, k) -> the FP8-able Gemm it is, or None.

    Each mapped linear (in, out) at T tokens multiplies three matrices whose dimensions are {T, in, out}
    (forward, input gradient, weight gradient alike): that set is the signature. A high-precision GEMM
    whose dimensions happen to equal a mapped linear's is counted too; at the shapes benchmarked here
    (vocabulary 256, hidden >= 1024) none does.
    """
    dims = sorted(shape)
    for i, o in linears:
        if dims == sorted((tokens, i, o)):
            return Gemm(*shape, backward=backward)
    return None


def profile_step(step: Callable[[], object], tokens: int, linears: set[tuple[int, int]]) -> list[ProfiledGemm]:
    """Run `step` once under the profiler; every GEMM it launched, classified, with its kernel time."""
    from torch.profiler import ProfilerActivity, profile, record_function
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        with record_function("fp8lab::step"):
            step()
        torch.cuda.synchronize()
    events = list(prof.events())
    main = next(e.thread for e in events if e.name == "fp8lab::step")
    out = []
    for e in events:
        if e.name not in GEMM_OPS or not e.input_shapes:
            continue
        ms = getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)) / 1e3
        gemm = None
        if e.name != "aten::bmm":  # batched GEMMs (attention's, if any) stay high precision
            gemm = classify(operands(e.name, e.input_shapes), e.thread != main, tokens, linears)
        out.append(ProfiledGemm(gemm, ms))  # the autograd engine runs backward on its own thread on CUDA
    return out


def operands(op: str, shapes: list[list[int]]) -> tuple[int, int, int]:
    """(m, n, k) of a recorded aten::mm / addmm from its argument shapes (an out= tensor may follow)."""
    a, b = (shapes[1], shapes[2]) if op == "aten::addmm" else (shapes[0], shapes[1])  # addmm: (bias, a, b)
    return a[-2], b[-1], a[-1]


def time_fp8_gemm(g: Gemm, iters: int = 20) -> float:
    """Median ms of one FP8 GEMM of this shape: E4M3 x E4M3 -> BF16, row-major a, column-major b."""
    dev = torch.device("cuda")
    a = [(torch.randn(g.m, g.k, device=dev) * 2).to(torch.float8_e4m3fn) for _ in range(ROTATE)]
    b = [(torch.randn(g.n, g.k, device=dev) * 2).to(torch.float8_e4m3fn).t() for _ in range(ROTATE)]  # (k, n) col-major
    one = torch.ones((), device=dev)

    def mm(i: int):
        return torch._scaled_mm(a[i % ROTATE], b[i % ROTATE], scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                use_fast_accum=not g.backward)

    for i in range(3):
        mm(i)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for i, (s, e) in enumerate(ev):
        s.record()
        mm(i)
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def measure(step: Callable[[], object], step_ms: float, tokens: int, linears: Iterable[tuple[int, int]]) -> Bound:
    """The bound of a model whose BF16 training step is `step` (one call = one step) and takes step_ms."""
    profiled = profile_step(step, tokens, set(linears))
    fp8able = [p for p in profiled if p.gemm is not None]
    counts = Counter(p.gemm for p in fp8able)
    fp8_ms = sum(n * time_fp8_gemm(g) for g, n in counts.items())
    return Bound(bf16_step_ms=step_ms, bf16_gemm_ms=sum(p.ms for p in fp8able), fp8_gemm_ms=fp8_ms,
                 other_gemm_ms=sum(p.ms for p in profiled if p.gemm is None), fp8_gemms=len(fp8able),
                 gemm_flop=sum(p.gemm.flop for p in fp8able))


def mapped_linears(mcfg: GPTConfig, fp8_modules: tuple[str, ...], hp_modules: tuple[str, ...]) -> set[tuple[int, int]]:
    """(in, out) of every linear the precision map puts in FP8, for a model's GPTConfig."""
    with torch.device("meta"):
        model = GPT(mcfg)
    return {(m.in_features, m.out_features) for m in (model.get_submodule(n) for n in
                                                      select_modules(model, fp8_modules, hp_modules))}


def measure_trainer(tr: Trainer, linears: Iterable[tuple[int, int]], first_step: int, timed: int = 10) -> Bound:
    """The bound for a one-process Trainer's BF16 model: `timed` more steps for its step time, one profiled.

    The steps continue the run (a step index past its end keeps the final learning rate); call it
    after the run's rows are written.
    """
    times = [tr.train_step(first_step + i)["step_time_s"] for i in range(timed + 2)][2:]
    micro_tokens = tr.cfg.batch // tr.cfg.grad_accum * tr.cfg.seq_len  # the M of each linear's GEMM
    return measure(lambda: tr.train_step(first_step + timed + 2), statistics.median(times) * 1e3, micro_tokens,
                   linears)


def shape(cfg: Config) -> dict[str, int]:
    """The model a Config trains, as bound.csv's key columns (and n_heads)."""
    return dict(d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads, seq_len=cfg.seq_len, batch=cfg.batch)


def record(tr: Trainer, first_step: int, writer: ResultsWriter | NoWriter) -> Bound:
    """The bound of a one-process Trainer's model on the linears its precision map puts in FP8, written as its row
    of bound.csv (a run's) or bench_bound.csv (a benchmark's hidden size)."""
    b = measure_trainer(tr, mapped_linears(tr.mcfg, tr.cfg.fp8_modules, tr.cfg.hp_modules), first_step)
    writer.write(dict(shape(tr.cfg), tokens_per_step=tr.tokens_per_step, compiled=tr.p.compiled, **b.row()))
    return b
