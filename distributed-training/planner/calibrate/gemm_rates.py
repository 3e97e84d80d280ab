"""The sustained matmul rate of a GPU, measured: calibration from single-GEMM benchmarks.

The compute model (compute.py) runs a GEMM at the published MAMF of its GPU and precision, scaled by
the GEMM's shape efficiency and by the fraction of that burst rate a GPU sustains through a training
step (calibration.py: fitted on published clusters, 0.66 on Hopper). A GEMM benchmark on your own GPU
measures that fraction directly: fp8-train's bench (`bench_gemm.csv`: bf16 torch.mm and FP8
torch._scaled_mm at 8192 x K x N) times each GEMM back to back, and a long one runs at the clock the
GPU holds under full load (an H100 ran its 8192^3 bf16 GEMM at 651 TFLOP/s, 0.82 of the 794.5 MAMF,
and the smaller ones near the MAMF). For each measured GEMM the ratio of its measured time to the
model's burst time (the fraction set to 1) is the fraction that GEMM sustained; the GPU's sustained
fraction is the smallest of them, the GEMM that ran longest at full power, since a training step
keeps the GPU at that load. The fraction replaces calibration.py's for that GPU generation, for bf16
and FP8 alike (a power limit caps the clock, whatever the precision).

    make plan ARGS="--params 8B --gpus 64 --calibrate distributed-training/fp8-train/results/h100_ws1/bench_gemm.csv"

fp8-train's FP8 bound (`bound.csv`) measures the same thing inside a training step: the profiler's time of the BF16
step's linear-layer GEMMs (bf16_gemm_ms) and of the same GEMMs in FP8 (fp8_gemm_ms), at the model's shapes (each of
the block's six linears forward, activation gradient and weight gradient, per layer). Their model time at the burst
rate over the measured time is the fraction those GEMMs sustained, per precision; the smaller one is the GPU's, as
above. This is how an H200, which has no GEMM benchmark here, gets its own rate (h200_ws1/bound.csv: bf16 741 and FP8
1,338 TFLOP/s in the step), never an H100's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from common.csvread import Schema, has_columns, read_rows
from common.hardware import get_preset, preset_for
from planner.model.calibration import ComputeConstants, generation
from planner.model.cluster import Cluster
from planner.model.compute import gemm_efficiency, sm_count, tensor_rate

COLUMNS = {"op", "m", "k", "n", "time_us", "hardware"}
SCHEMA = Schema("fp8-train GEMM benchmark", {"op": str, "m": int, "k": int, "n": int, "time_us": float,
                                             "hardware": str}, key=("op", "m", "k", "n"))
PRECISION = {"bf16 torch.mm": "bf16", "fp8 torch._scaled_mm": "fp8", "fp8 F.scaled_mm": "fp8"}


def is_gemm_csv(path: str) -> bool:
    """True for a GEMM benchmark CSV (by its header)."""
    return has_columns(path, COLUMNS)


class Sustained(NamedTuple):
    fraction: float
    op: str  # the GEMM that set it
    tflops: float  # its measured rate
    rows: int


def burst_seconds(gpu: str, precision: str, m: int, k: int, n: int, consts: ComputeConstants) -> float:
    """The model's time for one GEMM at the burst MAMF (sustained fraction 1), compute-bound part only."""
    preset = get_preset(gpu)
    burst = replace(consts, sustained_ampere=1.0, sustained_hopper=1.0)
    rate = tensor_rate(gpu, precision, preset.achievable_matmul_tflops(precision), burst)
    eta = float(gemm_efficiency(m, n, k, sm_count(gpu), burst, elem_bytes=1.0 if precision == "fp8" else 2.0))
    return 2.0 * m * n * k / (rate * eta)


def sustained(gpu: str, rows: list[dict], consts: ComputeConstants) -> Sustained | None:
    """The smallest measured/burst rate ratio over one GPU's bf16 and FP8 GEMM rows (None without any)."""
    preset = get_preset(gpu)
    best = None
    n = 0
    for r in rows:
        precision = PRECISION.get(r["op"])
        if precision is None or preset.achievable_matmul_tflops(precision) is None:
            continue
        m, k, nn, t = int(r["m"]), int(r["k"]), int(r["n"]), float(r["time_us"]) * 1e-6
        frac = burst_seconds(gpu, precision, m, k, nn, consts) / t
        n += 1
        if best is None or frac < best.fraction:
            best = Sustained(frac, f"{r['op']} {m}x{k}x{nn}", 2.0 * m * k * nn / t / 1e12, 0)
    return None if best is None else best._replace(fraction=min(best.fraction, 1.0), rows=n)


BOUND = Schema("fp8-train FP8 bound", {"hardware": str, "d_model": int, "n_layers": int, "n_heads": int, "seq_len": int,
                                      "batch": int, "bf16_gemm_ms": float, "fp8_gemm_ms": float})
BOUND_COLUMNS = {"bf16_gemm_ms", "fp8_gemm_ms", "d_model", "n_layers", "hardware"}


def is_bound_csv(path: str) -> bool:
    return has_columns(path, BOUND_COLUMNS)


def step_gemms(hidden: int, layers: int, heads: int, seq: int, batch: int) -> list[tuple[int, int, int]]:
    """(m, k, n) of every linear-layer GEMM of one training step of the labs' GPT (three q/k/v Linears, MLP 4h): per
    layer each linear's forward, activation-gradient and weight-gradient GEMM, as bound.csv's profiler counts them."""
    from planner.model.compute import Kernels, block_linears
    from planner.model.shapes import Shape

    shape = Shape(layers, hidden, heads, heads, 256, seq, 4 * hidden)
    out = []
    for lin in block_linears(shape, 1, 1, batch, Kernels(qkv_fused=False)):
        m, k, n = int(lin.m), int(lin.k), int(lin.n)
        out += [(m, k, n), (m, n, k), (k, n, m)]
    return out * layers


def sustained_in_step(gpu: str, rows: list[dict], consts: ComputeConstants) -> Sustained | None:
    """The smallest sustained fraction of the step's GEMMs over one GPU's bound.csv rows, bf16 and FP8."""
    preset = get_preset(gpu)
    best = None
    for r in rows:
        gemms = step_gemms(int(r["d_model"]), int(r["n_layers"]), int(r["n_heads"]), int(r["seq_len"]), int(r["batch"]))
        for precision, col in (("bf16", "bf16_gemm_ms"), ("fp8", "fp8_gemm_ms")):
            if preset.achievable_matmul_tflops(precision) is None:
                continue
            t = float(r[col]) * 1e-3
            burst = sum(burst_seconds(gpu, precision, m, k, n, consts) for m, k, n in gemms)
            flops = sum(2.0 * m * k * n for m, k, n in gemms)
            if best is None or burst / t < best.fraction:
                best = Sustained(burst / t, f"the {len(gemms)} {precision} GEMMs of a d{r['d_model']} step (bound.csv)",
                                 flops / t / 1e12, 0)
    return None if best is None else best._replace(fraction=min(best.fraction, 1.0), rows=len(rows))


def gpu_bound_rows(paths: list[str]) -> dict[str, list[dict]]:
    """bound.csv rows by the GPU preset their hardware column names."""
    out: dict[str, list[dict]] = {}
    for path in paths:  # the guide's own evidence, not --calibrate's: a damaged file is BadResults, one line
        for r in read_rows(path, BOUND):
            preset = preset_for(r["hardware"])
            if preset is not None:
                out.setdefault(preset.name, []).append(r)
    return out


def gpu_rows(paths: list[str]) -> dict[str, list[dict]]:
    """GEMM rows of every CSV, by the GPU preset their hardware column names (CPU rows are dropped)."""
    out: dict[str, list[dict]] = {}
    for path in paths:
        for r in read_rows(path, SCHEMA):  # a damaged file: BadResults, one line naming it (whoever named the file)
            preset = preset_for(r["hardware"])
            if preset is not None:
                out.setdefault(preset.name, []).append(r)
    return out


def calibrated_constants(gpu: str, consts: ComputeConstants, rows: list[dict],
                         in_step: bool = False) -> tuple[ComputeConstants, str] | None:
    """`consts` with the GPU generation's sustained fraction measured from `rows` (GEMM benchmark rows, or bound.csv
    rows with in_step), and a note saying so."""
    s = sustained_in_step(gpu, rows, consts) if in_step else sustained(gpu, rows, consts)
    if s is None:
        return None
    field = "sustained_ampere" if generation(gpu) == "ampere" else "sustained_hopper"
    what = f"of {s.rows} FP8-bound rows" if in_step else f"of {s.rows} GEMM benchmark rows"
    note = (f"sustained matmul fraction {s.fraction:.3f} (table constants: {getattr(consts, field):.3f}) measured "
            f"on {gpu}: {s.op} at {s.tflops:.0f} TFLOP/s, the slowest {what}")
    return replace(consts, **{field: round(s.fraction, 3)}), note


def calibrate_from_gemms(cluster: Cluster, paths: list[str]) -> Cluster:
    """The cluster with its compute constants calibrated from GEMM benchmark CSVs of its GPU."""
    found = calibrated_constants(cluster.gpu, cluster.compute, gpu_rows(paths).get(cluster.gpu, []))
    if found is None:
        raise ValueError(f"--calibrate: no GEMM benchmark rows on {cluster.gpu} in {', '.join(paths)}")
    consts, note = found
    return replace(cluster, compute=consts, notes=(*cluster.notes, note))
