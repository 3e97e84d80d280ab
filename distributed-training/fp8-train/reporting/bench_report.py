"""The step-cost benchmarks of REPORT.md: bench.py's CSVs (bench_step, bench_gemm, bench_kernels, bench_monitor)
and the hidden-size sweep, per results folder; a different, smaller model than the training comparison. The
words are findings_template.md's [bench.*] sentences.

    lines = section(results / "h100_ws1", rel=lambda p: ..., written=plots)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from common.markdown import table as md_table
from common.plotting import describe_runs
from reporting import comparison
from reporting.findings import S, short_gpu
from reporting.plots import plot_crossover, speedups
from reporting.tables import read

SLOWER = 0.9  # a GEMM's largest shape below 90% of a smaller shape's rate is noted (one timed call: no spread)
FALLBACK = 100  # a CPU GEMM path 100x slower than fp32's at the same shape times a fallback, not the arithmetic


def section(d: Path, rel: Callable[[Path], str], written: list[Path]) -> list[str]:
    """A folder's benchmark tables and plots (nothing where it has no benchmark file)."""
    b, g, k, sw = (read(d / n) for n in ("bench_step.csv", "bench_gemm.csv", "bench_kernels.csv", "sweep.csv"))
    lines = step_lines(b, d, rel, written) if b is not None and len(b) else []
    if sw is not None and len(sw):  # train.py --sweep-hidden: tokens/s per hidden size
        sp = speedups(sw.assign(step_time_s=sw["tokens_per_step"] / sw["tokens_per_s"]), "step_time_s")
        lines += crossover(sp, d, describe_runs(sw), rel, written)
    if g is not None and len(g):
        lines += gemm_lines(g)
    if k is not None and len(k):
        lines += [S("bench.kernels"), "", md_table(["fp8_linear.py", "Inductor kernels", "scale-update operators"], [
            [r.fp8_linear_version, r.inductor_kernels, r.update_ops] for r in k.itertuples()]), ""]
    return lines + monitor_lines(d)


def crossover(sp: pd.DataFrame, d: Path, footer: str, rel: Callable[[Path], str], written: list[Path]) -> list[str]:
    png = plot_crossover(sp, d / "crossover.png", footer)
    written.append(png)
    how = "interquartile range" if (sp["spread"] == "IQR").all() else "median to fastest-step timings"
    return [f"![FP8 speedup over BF16 per hidden size]({rel(png)})", "", S("bench.crossover", folder=d.name,
                                                                           spread=how), ""] + crossover_lines(sp)


def step_lines(b: pd.DataFrame, d: Path, rel: Callable[[Path], str], written: list[Path]) -> list[str]:
    gpu = str(b["cuda_version"].iloc[0]) not in ("none", "nan")
    ref_prec = "bf16" if gpu else "fp32"
    sp = speedups(b, "step_time_s", ref_prec).set_index(["d_model", "run"]) if len(b) else pd.DataFrame()
    ref = b[b["precision"] == ref_prec].set_index("d_model")["step_time_s"]
    targeted = b["target_ratio"].notna().any()
    rows = []
    for r in b.itertuples():
        if gpu:
            s = sp.loc[(r.d_model, r.run)] if (r.d_model, r.run) in sp.index else None
            vs = f"{s['speedup']:.2f}x ({s['lo']:.2f}-{s['hi']:.2f})" if s is not None else \
                "1.00x (reference)" if r.precision == ref_prec else "no BF16 row"
        else:
            vs = f"{r.step_time_s / ref[r.d_model]:.2f}x" if r.d_model in ref.index else "no fp32 row"
        fastest = f" ({r.step_time_min_s * 1e3:.2f})" if hasattr(r, "step_time_min_s") else ""
        rows.append([r.d_model, r.run, f"{r.precision_backend}, " + comparison.version_cell(
            b[b["run"] == r.run], r.precision_backend), "compiled" if str(r.compiled).lower() == "true" else "eager",
            f"{r.step_time_s * 1e3:.2f}{fastest}", f"{r.model_tflops:.3g}", vs,
            "not counted" if pd.isna(r.kernels_per_step) else int(r.kernels_per_step)] + (
            [] if not targeted else ["", ""] if pd.isna(r.target_ratio) else
            [f"<= {r.target_ratio} vs fp32", "yes" if str(r.meets_target).lower() == "true" else "**no**"]))
    head = ["d_model", "run", "backend, version", "compiled", "ms/step (fastest)", "model TFLOP/s",
            "speedup vs BF16" if gpu else "vs fp32", "kernels/step"] + (["target", "met"] if targeted else [])
    lines = [S("bench.step.gpu" if gpu else "bench.step.cpu", hardware=short_gpu(str(b["hardware"].iloc[0])),
               blocks=b["n_layers"].iloc[0], tokens=b["tokens_per_step"].iloc[0]), "", md_table(head, rows), ""]
    if gpu and b["d_model"].nunique() > 1 and len(sp):
        lines += crossover(sp.reset_index(), d, describe_runs(b), rel, written)
    return lines


def crossover_lines(sp: pd.DataFrame) -> list[str]:
    """The smallest hidden size from which each FP8 mode is faster than BF16 at every larger size measured."""
    out = []
    for run, g in sp.reset_index().groupby("run", sort=False):
        g = g.sort_values("d_model")
        wins = set(g.loc[g["speedup"] > 1, "d_model"])
        first = next((dm for dm in g["d_model"] if all(x in wins for x in g["d_model"] if x >= dm)), None)
        at = ", ".join(f"{v:.2f}x at {d}" for v, d in zip(g["speedup"], g["d_model"]))
        out.append(f"- {run}: " + (S("bench.faster", first=first) if first is not None else S("bench.never"))
                   + f" (speedup {at})")
    return out + [""]


def gemm_lines(g: pd.DataFrame) -> list[str]:
    """One row per shape, one column per GEMM path (TFLOP/s and microseconds); the notes the rows call for."""
    g = g.assign(shape=[f"{r.m}x{r.k}x{r.n}" for r in g.itertuples()], flops=g["m"] * g["k"] * g["n"])
    ops = list(dict.fromkeys(g["op"]))
    rows = [[shape] + [f"{c['tflops'].iloc[0]:.3g} ({c['time_us'].iloc[0]:,.1f} us)" if len(c := h[h["op"] == op])
                       else "-" for op in ops] for shape, h in g.groupby("shape", sort=False)]
    notes = []
    cpu = str(g["cuda_version"].iloc[0]) in ("none", "nan") if "cuda_version" in g else False
    for op, h in g.groupby("op", sort=False):
        h = h.sort_values("flops")
        fp32 = g[(g["op"] == "fp32 torch.mm") & (g["shape"] == h["shape"].iloc[0])]["time_us"]
        x = h["time_us"].iloc[0] / fp32.iloc[0] if len(fp32) else 0
        if cpu and x > FALLBACK:
            notes.append(S("bench.gemm.fallback", op=op, us=h["time_us"].iloc[0], shape=h["shape"].iloc[0], x=x))
        small = h.iloc[:-1].sort_values("tflops").tail(1)
        if len(small) and h["tflops"].iloc[-1] < SLOWER * small["tflops"].iloc[0]:
            notes.append(S("bench.gemm.slower", op=op, big=h["tflops"].iloc[-1], bshape=h["shape"].iloc[-1],
                           small=small["tflops"].iloc[0], sshape=small["shape"].iloc[0],
                           pct=1 - h["tflops"].iloc[-1] / small["tflops"].iloc[0]))
    lead = S("bench.gemm", timing=g["timing"].iloc[0], hardware=short_gpu(str(g["hardware"].iloc[0])))
    return [lead, "", md_table(["M x K x N", *ops], rows), ""] + \
        ([" ".join(notes), ""] if notes else [])


def monitor_lines(d: Path) -> list[str]:
    m = read(d / "bench_monitor.csv")
    if m is None or not len(m):
        return []
    rows = [[r.run, r.d_model, f"{r.step_time_off_s * 1e3:.1f}", f"{r.step_time_on_s * 1e3:.1f}",
             f"{r.overhead_pct:+.1f}%", f"< {r.target_pct:g}%", "yes" if str(r.meets_target).lower() == "true"
             else "**no**"] for r in m.itertuples()]
    return [S("bench.monitor"), "", md_table(["run", "d_model", "off ms", "on ms", "overhead", "target", "met"], rows),
            ""]
