"""The step-cost benchmarks of REPORT.md: bench.py's CSVs (bench_step, bench_gemm, bench_kernels, bench_monitor)
and the hidden-size sweep, per results folder; a different, smaller model than the training comparison.

    lines = section(results / "h100_ws1", rel=lambda p: ..., written=plots)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from common.markdown import table as md_table
from common.plotting import describe_runs
from reporting import comparison, health_report
from reporting.report_plots import plot_crossover, speedups
from reporting.tables import read


def section(d: Path, rel: Callable[[Path], str], written: list[Path]) -> list[str]:
    """A folder's benchmark tables and plots (nothing where it has no benchmark file)."""
    b, g, k, sw = (read(d / n) for n in ("bench_step.csv", "bench_gemm.csv", "bench_kernels.csv", "sweep.csv"))
    lines = step_lines(b, d, rel, written) if b is not None and len(b) else []
    if sw is not None and len(sw):  # train.py --sweep-hidden: tokens/s per hidden size
        sp = speedups(sw.assign(step_time_s=sw["tokens_per_step"] / sw["tokens_per_s"]), "step_time_s")
        png = plot_crossover(sp, d / "crossover.png", describe_runs(sw))
        written.append(png)
        lines += [f"![crossover]({rel(png)})", ""]
    if g is not None and len(g):
        lines += ["GEMM paths (one GEMM per path and shape, best of the timed calls; "
                  f"{g['timing'].iloc[0]}):", "", "| op | M x K x N | us | TFLOP/s |", "|---|---|---|---|"]
        lines += [f"| {r.op} | {r.m}x{r.k}x{r.n} | {r.time_us:,.1f} | {r.tflops:.3g} |" for r in g.itertuples()] + [""]
    if k is not None and len(k):
        lines += ["Launch proxy (bench.py --parts kernels, CPU): kernels Inductor generates for one compiled "
                  "block's FP8 forward + backward, and operators the eager scale update dispatches for that "
                  "block's 6 FP8 linears. The shared scaling state makes the update one batched operation "
                  "whatever the number of layers; the saved column-major FP8 copies remove the backward's "
                  "re-layout passes:", "", "| fp8_linear.py | Inductor kernels | scale-update operators |",
                  "|---|---|---|"]
        lines += [f"| {r.fp8_linear_version} | {r.inductor_kernels} | {r.update_ops} |" for r in k.itertuples()] + [""]
    return lines + health_report.monitor_lines(d)


def step_lines(b: pd.DataFrame, d: Path, rel: Callable[[Path], str], written: list[Path]) -> list[str]:
    gpu = str(b["cuda_version"].iloc[0]) not in ("none", "nan")
    ref_prec = "bf16" if gpu else "fp32"
    sp = speedups(b, "step_time_s", ref_prec).set_index(["d_model", "run"]) if len(b) else pd.DataFrame()
    how = ("speedup = BF16 step time / step time, higher is better; range: median to fastest-step timings"
           if gpu else "step time / fp32 step time, lower is better (the CPU target is defined so)")
    targeted = b["target_ratio"].notna().any()
    lines = [f"Step cost ({b['n_layers'].iloc[0]} blocks, {b['tokens_per_step'].iloc[0]} tokens/step; "
             + ("CUDA events, median step" if gpu else "modes interleaved, median step; the FP8 runs include the "
                "bf16 emulation around their FP8 linears") + f"; {how}):", ""]
    head = ["d_model", "run", "backend, version", "compiled", "ms/step (fastest)", "model TFLOP/s",
            "speedup vs BF16" if gpu else "vs fp32", "kernels/step"] + (["target", "met"] if targeted else [])
    ref = b[b["precision"] == ref_prec].set_index("d_model")["step_time_s"]
    rows = []
    for r in b.itertuples():
        if gpu and (r.d_model, r.run) in sp.index:
            s = sp.loc[(r.d_model, r.run)]
            vs = f"{s['speedup']:.2f}x ({s['lo']:.2f}-{s['hi']:.2f})"
        elif gpu:
            vs = "1.00x (reference)" if r.precision == ref_prec else "no BF16 row"
        else:
            vs = f"{r.step_time_s / ref[r.d_model]:.2f}x" if r.d_model in ref.index else "no fp32 row"
        fastest = f" ({r.step_time_min_s * 1e3:.2f})" if hasattr(r, "step_time_min_s") else ""
        row = [r.d_model, r.run, f"{r.precision_backend}, "
               + comparison.version_cell(b[b["run"] == r.run], r.precision_backend),
               "compiled" if str(r.compiled).lower() == "true" else "eager", f"{r.step_time_s * 1e3:.2f}{fastest}",
               f"{r.model_tflops:.3g}", vs, "not counted" if pd.isna(r.kernels_per_step) else int(r.kernels_per_step)]
        if targeted:
            met = "yes" if str(r.meets_target).lower() == "true" else "**no**"
            row += ["", ""] if pd.isna(r.target_ratio) else [f"<= {r.target_ratio} vs fp32", met]
        rows.append(row)
    lines += md_table(head, rows).splitlines()
    lines.append("")
    if gpu and b["d_model"].nunique() > 1 and len(sp):
        png = plot_crossover(sp.reset_index(), d / "crossover.png", describe_runs(b))
        written.append(png)
        lines += [f"![FP8 speedup over BF16 per hidden size]({rel(png)})", ""] + crossover_lines(sp)
    return lines


def crossover_lines(sp: pd.DataFrame) -> list[str]:
    """The smallest hidden size from which each FP8 mode is faster than BF16 at every larger size measured."""
    out = []
    for run, g in sp.reset_index().groupby("run", sort=False):
        g = g.sort_values("d_model")
        wins = set(g.loc[g["speedup"] > 1, "d_model"])
        first = next((dm for dm in g["d_model"] if all(x in wins for x in g["d_model"] if x >= dm)), None)
        at = ", ".join(f"{v:.2f}x at {d}" for v, d in zip(g["speedup"], g["d_model"]))
        out.append(f"- {run}: " + (f"faster than BF16 from hidden {first} on" if first is not None else
                                   "not faster than BF16 at any measured size") + f" (speedup {at})")
    return out + [""]
