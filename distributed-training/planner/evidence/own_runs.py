"""This repository's own GPU measurements, read as the planner sees a run: one `Run` per measured row.

Every lab writes its GPU rows under its results/ folder; this module finds them by pattern (never by a
file name: a run renamed to carry its world size, `_ws1`, is found the same way) and turns each into a
`Run`: the model shape, the software stack (precision, FP8 backend and recipe, torch.compile), the
layout (TP, PP, DP, ZeRO stage, micro-batch, ...) and the measured number with its unit, all read
from the row's own columns (and, where a column is missing, from the resolved config saved beside
it). explain.predict prices every Run with the one cost model; nothing here knows a result by name.

One reader per kind of row:

    fp8-train   */steps.csv          training runs: tokens/s, median after the first 10% of steps
                                     (compile and warm-up), as fp8-train's report reads them
                */bench_step.csv     the step-cost benchmark: tokens/s of its median step, its fastest, the
                                     kernels the step launched (kernels_per_step, counted by the profiler) and
                                     the GPU's busy time in the step (gpu_busy_ms), where the row has them
                */bench_gemm.csv     single GEMMs (bf16 torch.mm, FP8 _scaled_mm): time per GEMM
                */bound.csv          the FP8 bound: the BF16 step with its GEMMs' time in FP8 (speed-up)
    fsdp-scaling  scaling_*.csv      one optimizer step per strategy: tokens/s (per rank), slowest and fastest
    tp-attention  bench_*.csv        one transformer block, forward + backward: ms
    allreduce-bench sweep_*.csv      one collective: us
    parallel-3d   runs_*.csv         one optimizer step of a (tp, pp, dp) layout: ms

A row is a GPU row when its hardware column names a GPU of the hardware table (common/hardware.py):
CPU rows measure core contention, not a GPU, and are never compared with a GPU model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from common.csvread import Schema, read_json, read_table
from common.hardware import preset_for
from common.runs import results_path
from planner.model.shapes import Shape

from .kept import kept

LABS = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Stack:
    """The software a row ran: what the cost model prices differently."""

    precision: str = "bf16"  # bf16 | fp8 | fp32
    backend: str = "torch"  # FP8: te | te-fused | torchao | native | emulated; else torch
    recipe: str = ""  # FP8 scaling: delayed | current | tensorwise | rowwise
    compiled: bool = False  # torch.compile around the blocks (fused elementwise kernels)
    optimizer: str = "megatron"  # the Adam step timed with it, as the lab runs it (compute.OPTIMIZER_KERNELS), or none
    weights: str = "fp32"  # dtype of the parameters: fp32 master weights (autocast / FSDP2) or bf16
    eager_fix: "EagerFix | None" = None  # the fix this row predates: its FP8 layer ran outside the compiled graph

    @property
    def fp8_eager(self) -> bool:
        return self.eager_fix is not None


@dataclass(frozen=True)
class Layout:
    """Degrees and batch of one row, in the planner's letters (degrees.py)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero: int = 0
    microbatch: int = 1  # sequences per micro-batch per replica
    micro_batches: int = 1  # per optimizer step
    interleave: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    stage_layers: tuple[int, ...] = ()

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class Run:
    lab: str
    kind: str  # "step", "block", "gemm", "collective"
    file: str  # the CSV, relative to distributed-training/
    name: str  # the row's own label
    gpu: str  # hardware preset
    unit: str  # what `measured` counts: "tokens/s", "ms", "us"
    measured: float
    shape: Shape | None = None
    stack: Stack = Stack()
    layout: Layout = Layout()
    spread: tuple[float, float] | None = None  # the row's own min..max where it has one, in `unit`
    detail: dict = field(default_factory=dict)  # kind-specific inputs: GEMM (m, k, n), collective (name, bytes)

    @property
    def higher_is_better(self) -> bool:
        return self.unit in ("tokens/s", "x")


def _rel(path: Path) -> str:
    """A results file as the reports name it: relative to distributed-training/, or folder/name elsewhere."""
    try:
        return str(path.resolve().relative_to(LABS))
    except ValueError:
        return f"{path.parent.name}/{path.name}"


def gpu_of(hardware: str) -> str | None:
    preset = preset_for(str(hardware))
    return preset.name if preset else None


def gpu_rows(results: Path, pattern: str, schema: Schema):
    """(file, row, GPU preset) for every row measured on a known GPU in the CSVs matching `pattern`."""
    for csv in sorted(results.glob(pattern)):
        for r in read_table(csv, schema).itertuples():
            gpu = gpu_of(r.hardware)
            if gpu is not None:
                yield csv, r, gpu


def _config(csv: Path) -> dict:
    """The resolved config saved beside a results file (<name>.config.json), or {}."""
    path = csv.with_name(csv.stem + ".config.json")
    return read_json(path, "the config saved beside a result") if path.is_file() else {}


def parse_model(desc: str, vocab: int = 256) -> Shape:
    """A model name of the labs' CSVs (d1024-L24-h16-T1024-V256, d64-L6-h4-kv4-f256-T64-V256) as a Shape."""
    parts = dict(re.fullmatch(r"([a-zA-Z]+)(\d+)", p).groups() for p in desc.split("-"))
    d, heads = int(parts["d"]), int(parts["h"])
    return Shape(int(parts["L"]), d, heads, int(parts.get("kv", heads)), int(parts.get("V", vocab)),
                 int(parts["T"]), int(parts.get("f", 4 * d)))


def gpt_shape(layers: int, d: int, heads: int, seq: int, vocab: int = 256) -> Shape:
    """The labs' GPT (common/model.py): multi-head, MLP 4d, learned positions."""
    return Shape(layers, d, heads, heads, vocab, seq, 4 * d)


# ---- fp8-train ------------------------------------------------------------------------------------

STEPS = Schema("fp8-train steps", {"hardware": str, "timestamp_utc": str, "run": str, "precision": str,
                                   "precision_backend": str, "compiled": bool, "step": int, "tokens_per_s": float,
                                   "batch": int, "grad_accum": int, "seq_len": int, "d_model": int, "n_layers": int},
               key=("run", "step"))
BENCH_STEP = Schema("fp8-train step-cost benchmark", {"hardware": str, "timestamp_utc": str, "d_model": int,
                                                      "n_layers": int, "run": str,
                                                      "precision": str, "precision_backend": str, "compiled": bool,
                                                      "tokens_per_step": int, "step_time_s": float,
                                                      "step_time_min_s": float}, key=("d_model", "run", "fp8_scaling"))
BENCH_GEMM = Schema("fp8-train GEMM benchmark", {"hardware": str, "op": str, "m": int, "k": int, "n": int,
                                                 "time_us": float}, key=("op", "m", "k", "n"))
# The Adam step each lab times (compute.optimizer_bytes): fp8-train's trainer runs torch.optim.AdamW(fused=True) on
# CUDA with the clip factor folded into its grad_scale; fsdp-scaling and parallel-3d run torch.optim.AdamW's default
# (foreach on CUDA, DTensors included) without clipping.
FP8_TRAIN_ADAM, TORCH_ADAMW = "fused", "foreach"
WARM_FRACTION = 0.10  # fp8-train's report: tokens/s is the median after the first 10% of steps


class EagerFix(NamedTuple):
    """A commit that changed what a backend's compiled run executes: rows measured before it ran eager."""
    commit: str
    date_utc: str
    what_ran: str  # why a row before it ran outside the compiled graph
    min_layers: int = 1  # the blocks a model needs for it to happen


# Commits that changed what a backend runs, so a row measured before one ran differently from what its columns
# say. A row measured before the commit's date cannot have run it (no git needed: a shallow clone reads the same).
#   b992edb: the native layer called torch.nn.functional.scaled_mm, where torch 2.11's dynamo breaks the graph,
#            so under torch.compile its casts ran eagerly at every GEMM (measured: 0.6x torchao's speed).
#   3297f52: the native layer passed its int slot in the shared scaling state to the traced FP8 function, so
#            dynamo compiled each block apart; with 3 variants per block (training, counting fractions,
#            evaluating), 3+ blocks pass dynamo's 8 recompiles and the rest of the run went eager (the H200 row).
EAGER_BEFORE = {"native": (EagerFix("b992edb", "2026-11-23T00:07:29Z", "dynamo broke the graph at every FP8 GEMM"),
                           EagerFix("3297f52", "2026-11-27T03:22:04Z", "dynamo compiled each block apart and ran "
                                    "eager past its 8 recompiles", min_layers=3))}


def eager_fix(backend: str, compiled: bool, measured_utc: str, n_layers: int) -> EagerFix | None:
    """The first fix a compiled row predates (its FP8 layer ran outside the compiled graph), or None."""
    if not (compiled and measured_utc):
        return None
    return next((f for f in EAGER_BEFORE.get(backend, ()) if str(measured_utc) < f.date_utc
                 and n_layers >= f.min_layers), None)


def fp8_eager(backend: str, compiled: bool, measured_utc: str, n_layers: int = 1) -> bool:
    """True if the row's FP8 layer ran outside the compiled graph: compiled, and measured before a fix."""
    return eager_fix(backend, compiled, measured_utc, n_layers) is not None


def fp8_recipe(backend: str, cfg: dict) -> str:
    """The FP8 scaling a backend ran with, from the run's saved config (fp8-train/training/settings.py)."""
    if backend == "torchao":
        return cfg.get("torchao_recipe", "tensorwise")
    if backend in ("te", "te-fused", "native", "emulated"):
        return cfg.get("fp8_scaling", "delayed")
    return ""


def heads_for(d_model: int, cfg: dict) -> int:
    """Attention heads: the config's, else fp8-train bench's rule (head size 128 from hidden 1024 on)."""
    return int(cfg.get("n_heads") or (d_model // 128 if d_model >= 1024 else max(1, d_model // 64)))


def fp8_train_steps(results: Path) -> list[Run]:
    out = []
    for csv in sorted(results.glob("*/steps.csv")):
        df = read_table(csv, STEPS)
        cfg = _config(csv)
        for run, g in df.groupby("run", sort=False):
            gpu = gpu_of(g["hardware"].iloc[0])
            if gpu is None:
                continue
            g = g.sort_values("step")
            warm = g.iloc[int(len(g) * WARM_FRACTION):]
            r = g.iloc[0]
            backend = str(r["precision_backend"])
            shape = gpt_shape(int(r["n_layers"]), int(r["d_model"]), heads_for(int(r["d_model"]), cfg),
                              int(r["seq_len"]))
            accum = int(r["grad_accum"])
            out.append(Run("fp8-train", "step", _rel(csv), f"{csv.parent.name}/{run}", gpu, "tokens/s",
                           float(warm["tokens_per_s"].median()), shape,
                           Stack(str(r["precision"]), backend, fp8_recipe(backend, cfg), bool(r["compiled"]),
                                 optimizer=FP8_TRAIN_ADAM,
                                 eager_fix=eager_fix(backend, bool(r["compiled"]), str(r["timestamp_utc"]),
                                                     int(r["n_layers"]))),
                           Layout(microbatch=int(r["batch"]) // accum, micro_batches=accum),
                           (float(warm["tokens_per_s"].min()), float(warm["tokens_per_s"].max()))))
    return out


def fp8_train_bench(results: Path) -> list[Run]:
    out = []
    for csv in sorted(results.glob("*/bench_step.csv")):
        df = read_table(csv, BENCH_STEP)
        cfg = _config(csv)
        for r in df.itertuples():
            gpu = gpu_of(r.hardware)
            if gpu is None:
                continue
            seq = int(cfg.get("seq_len", 1024))
            shape = gpt_shape(int(r.n_layers), int(r.d_model), heads_for(int(r.d_model), {}), seq)
            backend = str(r.precision_backend)
            tokens = int(r.tokens_per_step)
            out.append(Run("fp8-train", "step", _rel(csv), f"{csv.parent.name} bench d{r.d_model} {r.run}", gpu,
                           "tokens/s", tokens / float(r.step_time_s), shape,
                           Stack(str(r.precision), backend, fp8_recipe(backend, cfg), bool(r.compiled),
                                 optimizer=FP8_TRAIN_ADAM,
                                 eager_fix=eager_fix(backend, bool(r.compiled), str(r.timestamp_utc),
                                                     int(r.n_layers))),
                           Layout(microbatch=tokens // seq, micro_batches=1),
                           (tokens / float(r.step_time_s), tokens / float(r.step_time_min_s)),
                           detail={**counted(getattr(r, "kernels_per_step", float("nan"))),
                                   **busy(getattr(r, "gpu_busy_ms", float("nan")), float(r.step_time_s))}))
    return out


def counted(kernels) -> dict:
    """The kernels a row's step launched, where its profiler counted them (GPU rows; an optional column, empty on
    CPU and absent from older files), for the per-kernel cost."""
    try:
        kernels = float(kernels)
    except (TypeError, ValueError):
        return {}
    return {"kernels_per_step": int(kernels)} if kernels == kernels and kernels > 0 else {}


def busy(gpu_busy_ms, step_s: float) -> dict:
    """The GPU's busy time in a step, where the row's profiler measured it (fp8-train's gpu_busy_ms: kernels' union
    on the GPU's timeline; an optional column, absent from older files), beside the step it was measured in."""
    try:
        gpu_busy_ms = float(gpu_busy_ms)
    except (TypeError, ValueError):
        return {}
    if gpu_busy_ms != gpu_busy_ms or gpu_busy_ms <= 0:
        return {}
    return {"gpu_busy_ms": gpu_busy_ms, "step_ms": step_s * 1e3}


BOUND = Schema("fp8-train FP8 bound", {"hardware": str, "d_model": int, "n_layers": int, "seq_len": int,
                                      "tokens_per_step": int, "gemm_share": float, "bound_speedup": float},
               key=("d_model", "n_layers", "seq_len", "batch"), nonneg=("gemm_share", "bound_speedup"))


def fp8_train_bound(results: Path) -> list[Run]:
    """The measured FP8 bound: the BF16 step with its GEMMs' time replaced by the FP8 GEMMs' (bound.csv)."""
    out = []
    for csv, r, gpu in gpu_rows(results, "*/bound.csv", BOUND):
        seq = int(r.seq_len)
        shape = gpt_shape(int(r.n_layers), int(r.d_model), heads_for(int(r.d_model), {}), seq)
        out.append(Run("fp8-train", "bound", _rel(csv), f"{csv.parent.name} FP8 bound d{r.d_model}", gpu, "x",
                       float(r.bound_speedup), shape, Stack("fp8", "torch", compiled=True),
                       Layout(microbatch=int(r.tokens_per_step) // seq),
                       detail={"gemm_share": float(r.gemm_share)}))
    return out


GEMM_OPS = {"bf16 torch.mm": "bf16", "fp8 torch._scaled_mm": "fp8", "fp8 F.scaled_mm": "fp8"}


def fp8_train_gemm(results: Path) -> list[Run]:
    out = []
    for csv, r, gpu in gpu_rows(results, "*/bench_gemm.csv", BENCH_GEMM):
        precision = GEMM_OPS.get(str(r.op))
        if precision is None:  # fp32 torch.mm: no fp32 rate in the hardware table
            continue
        out.append(Run("fp8-train", "gemm", _rel(csv), f"{r.op} {r.m}x{r.k}x{r.n}", gpu, "us", float(r.time_us),
                       stack=Stack(precision, optimizer="none"), detail={"m": int(r.m), "k": int(r.k), "n": int(r.n)}))
    return out


# ---- fsdp-scaling --------------------------------------------------------------------------------

SCALING = Schema("fsdp-scaling sweep", {"hardware": str, "strategy": str, "mode": str, "model": str,
                                        "world_size": int, "micro_batch": int, "grad_accum": int,
                                        "precision": str, "tokens_per_s_per_rank": float, "step_time_ms": float,
                                        "step_time_min_ms": float, "step_time_max_ms": float,
                                        "tokens_per_step": int}, key=("strategy", "mode", "world_size", "nnodes"))
ZERO = {"single": 0, "ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "hsdp": 3}


def fsdp_scaling(results: Path) -> list[Run]:
    out = []
    for csv, r, gpu in gpu_rows(results, "scaling_*.csv", SCALING):
        if r.strategy not in ZERO:
            continue
        n = int(r.world_size)
        per_rank = int(r.tokens_per_step) / n / r.step_time_ms * 1e3
        out.append(Run("fsdp-scaling", "step", _rel(csv), f"{r.strategy} {r.mode}, {n} GPU" + "s" * (n > 1),
                       gpu, "tokens/s", per_rank, parse_model(str(r.model)),
                       Stack(str(r.precision), compiled=False, optimizer=TORCH_ADAMW),
                       Layout(dp=n, zero=ZERO[r.strategy], microbatch=int(r.micro_batch),
                              micro_batches=int(r.grad_accum)),
                       (per_rank * r.step_time_ms / r.step_time_max_ms, per_rank * r.step_time_ms /
                        r.step_time_min_ms)))
    return out


# ---- tp-attention --------------------------------------------------------------------------------

TP_BENCH = Schema("tp-attention bench", {"hardware": str, "tp": int, "sp": bool, "seq_len": int, "d_model": int,
                                         "n_heads": int, "batch": int, "dtype": str, "ours_ms": float},
                  key=("tp", "sp", "seq_len", "d_model"))
DTYPES = {"bfloat16": "bf16", "float16": "bf16", "float32": "fp32"}


def tp_attention(results: Path) -> list[Run]:
    out = []
    for csv, r, gpu in gpu_rows(results, "bench_*.csv", TP_BENCH):
        if DTYPES.get(str(r.dtype)) != "bf16":
            continue
        shape = gpt_shape(1, int(r.d_model), int(r.n_heads), int(r.seq_len))
        sp = " SP" if r.sp and r.tp > 1 else ""
        out.append(Run("tp-attention", "block", _rel(csv), f"t={r.tp}{sp} s={r.seq_len} d={r.d_model}", gpu, "ms",
                       float(r.ours_ms), shape, Stack("bf16", compiled=False, optimizer="none", weights="bf16"),
                       Layout(tp=int(r.tp), microbatch=int(r.batch), sequence_parallel=bool(r.sp))))
    return out


# ---- allreduce-bench -----------------------------------------------------------------------------

SWEEP = Schema("allreduce-bench sweep", {"hardware": str, "collective": str, "size_bytes": int, "world_size": int,
                                         "nnodes": int, "time_us": float, "time_min_us": float,
                                         "time_max_us": float},
               key=("collective", "dtype", "size_bytes", "world_size", "nnodes"))


def allreduce_bench(results: Path) -> list[Run]:
    out = []
    for csv, r, gpu in gpu_rows(results, "sweep_*.csv", SWEEP):
        out.append(Run("allreduce-bench", "collective", _rel(csv),
                       f"{r.collective} {r.size_bytes} B, {r.world_size} GPU" + "s" * (r.world_size > 1), gpu,
                       "us", float(r.time_us), spread=(float(r.time_min_us), float(r.time_max_us)),
                       layout=Layout(dp=int(r.world_size)),
                       detail={"collective": str(r.collective), "bytes": int(r.size_bytes), "nnodes": int(r.nnodes)}))
    return out


# ---- parallel-3d ---------------------------------------------------------------------------------

RUNS_3D = Schema("parallel-3d runs", {"hardware": str, "tp": int, "pp": int, "dp": int, "zero": int,
                                      "recompute": str, "interleave": int, "stage_layers": str, "microbatch": int,
                                      "num_microbatches": int, "model": str, "precision": str,
                                      "step_time_ms": float, "step_time_min_ms": float,
                                      "step_time_max_ms": float},
                 key=("variant", "tp", "pp", "dp", "cp", "world_size", "nnodes"))


def parallel_3d(results: Path) -> list[Run]:
    out = []
    for csv, r, gpu in gpu_rows(results, "runs_*.csv", RUNS_3D):
        layers = tuple(int(x) for x in re.findall(r"\d+", str(r.stage_layers)))
        layout = Layout(int(r.tp), int(r.pp), int(r.dp), int(r.zero), int(r.microbatch), int(r.num_microbatches),
                        int(r.interleave), str(r.recompute), sequence_parallel=int(r.tp) > 1, stage_layers=layers)
        out.append(Run("parallel-3d", "step", _rel(csv), f"{r.tp}·{r.pp}·{r.dp} Z{r.zero} {r.recompute}", gpu,
                       "ms", float(r.step_time_ms), parse_model(str(r.model)),
                       Stack(str(r.precision), compiled=False, optimizer=TORCH_ADAMW), layout,
                       (float(r.step_time_min_ms), float(r.step_time_max_ms))))
    return out


READERS = {"fp8-train": (fp8_train_steps, fp8_train_bench, fp8_train_gemm, fp8_train_bound),
           "fsdp-scaling": (fsdp_scaling,),
           "tp-attention": (tp_attention,), "allreduce-bench": (allreduce_bench,), "parallel-3d": (parallel_3d,)}


def runs(lab: str, results: Path | None = None) -> list[Run]:
    """Every GPU row of `lab` under `results` (default: the lab's results/ folder)."""
    folder = results_path(results, LABS / lab)
    return [run for reader in READERS[lab] for run in reader(folder)] if folder.is_dir() else []


@kept
def all_runs() -> list[Run]:
    return [run for lab in READERS for run in runs(lab)]
