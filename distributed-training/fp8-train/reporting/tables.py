"""What fp8-train's result CSVs hold, for the readers that check them (common.csvread).

The writers' column lists live with the writers (training/runloop.py, benchmarks/); these schemas name the
columns the report, the health section and the dashboard command rely on, their kinds, the key each file's
writer keeps rows by (a key seen twice is refused, agreeing or not) and the columns that cannot be negative
besides those whose unit says so. A
results folder that lacks one, has text in a number column, or a file cut short is refused with
one line naming the file (exit 2), never drawn as if it were complete.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.csvread import Schema, read_table

_PROV = {"hardware": str, "world_size": int, "torch_version": str, "cuda_version": str, "git_commit": str}
STEPS = Schema("fp8-train steps", {
    **_PROV, "run": str, "precision": str, "backend": str, "seed": int, "step": int, "loss": float,
    "val_loss": float, "grad_norm": float, "update_ratio": float, "tokens_per_s": float, "peak_mem_MiB": float,
    "saved_act_MiB": float, "nonfinite": bool, "mfu": float, "batch": int, "seq_len": int, "d_model": int,
    "n_layers": int, "tokens_per_step": int},
    nonfinite=("loss", "val_loss", "grad_norm", "update_ratio"), finite=True,  # a step that went NaN: health data
    key=("run", "step"), nonneg=("loss", "val_loss", "grad_norm", "update_ratio", "mfu"))
FP8 = Schema("fp8-train FP8 statistics", {"run": str, "step": int, "module": str, "role": str, "format": str,
                                          "scale": float, "underflow_frac": float, "saturation_frac": float},
             nonfinite=("scale", "amax"), finite=True,  # a NaN amax: an overflow; TE may record no scale
             key=("run", "step", "module", "role"), nonneg=("amax", "scale"))
LAYERS = Schema("fp8-train layer health", {"run": str, "step": int, "layer": str, "act_amax": float},
                nonfinite=("act_amax", "grad_norm"), finite=True, key=("run", "step", "layer"),
                nonneg=("act_amax", "grad_norm", "param_norm", "update_ratio"))
EVENTS = Schema("fp8-train alerts", {"run": str, "step": int, "kind": str, "metric": str, "message": str,
                                     "action": str},
                allow_empty=True, nonfinite=("value", "threshold"), finite=True,  # a healthy run raises no alert
                key=("run", "step", "kind", "metric"))
SWEEP = Schema("fp8-train hidden-size sweep", {"d_model": int, "run": str, "precision": str, "tokens_per_s": float},
               finite=True, key=("d_model", "run"))
BENCH_STEP = Schema("fp8-train step-cost benchmark", {"d_model": int, "n_layers": int, "run": str, "precision": str,
                                                      "compiled": bool, "tokens_per_step": int, "step_time_s": float,
                                                      "model_tflops": float, "kernels_per_step": float,
                                                      "target_ratio": float, "meets_target": bool,
                                                      "cuda_version": str}, finite=True,
                    key=("d_model", "run", "fp8_scaling"), nonneg=("kernels_per_step", "ratio_to_first"))
BENCH_GEMM = Schema("fp8-train GEMM benchmark", {"op": str, "m": int, "k": int, "n": int, "time_us": float,
                                                 "tflops": float, "timing": str}, finite=True,
                    key=("op", "m", "k", "n"))
BENCH_KERNELS = Schema("fp8-train kernel counts", {"fp8_linear_version": str, "inductor_kernels": int,
                                                   "update_ops": int}, finite=True, key=("fp8_linear_version",),
                       nonneg=("inductor_kernels", "update_ops"))
BENCH_MONITOR = Schema("fp8-train monitoring benchmark", {"run": str, "d_model": int, "step_time_off_s": float,
                                                          "step_time_on_s": float, "overhead_pct": float,
                                                          "target_pct": float, "meets_target": bool}, finite=True,
                       key=("run", "d_model"))
BOUND = Schema("fp8-train FP8 bound", {  # per model shape and GPU: what FP8 GEMMs alone could give
    "hardware": str, "d_model": int, "n_layers": int, "seq_len": int, "tokens_per_step": int, "bf16_step_ms": float,
    "bf16_gemm_ms": float, "gemm_share": float, "fp8_gemm_ms": float, "bound_speedup": float}, finite=True,
    key=("d_model", "n_layers", "seq_len", "batch"), nonneg=("gemm_share", "bound_speedup"))
SCHEMAS = {"steps.csv": STEPS, "fp8.csv": FP8, "layers.csv": LAYERS, "events.csv": EVENTS, "sweep.csv": SWEEP,
           "bench_step.csv": BENCH_STEP, "bench_gemm.csv": BENCH_GEMM, "bench_monitor.csv": BENCH_MONITOR,
           "bench_kernels.csv": BENCH_KERNELS, "bound.csv": BOUND}


def read(path: Path) -> pd.DataFrame | None:
    """A result file of a preset folder, checked; None if the folder has no such file."""
    return read_table(path, SCHEMAS[path.name]) if path.exists() else None
