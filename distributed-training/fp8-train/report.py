"""REPORT.md and its plots, from the committed CSVs alone (results/<preset>/*.csv).

    make fp8-train-report          # or: PYTHONPATH=distributed-training python distributed-training/fp8-train/report.py

Definitions used below (each defined here once):
    final loss       mean training loss over the last 10% of steps (smooths batch-to-batch noise)
    final val loss   validation loss at the last step, on the same fixed validation batches for every run
    noise band       [min, max] of the BF16 runs' final val loss over their seeds; a run "matches BF16
                     within noise" only if its final val loss lies inside the band
    tokens/s         median over the run's steps after the first 10% (warm-up, compile)
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

import health_report
from common.config import parse_config
from common import predicted
from common.csvread import BadResults, guard_report, results_folder
from common.plotting import describe_runs, new_figure, save
from tables import SCHEMAS, read as _read

LAB = Path(__file__).resolve().parent
ROLE_STYLE = {"input": "tab:blue", "weight": "tab:green", "grad_output": "tab:red"}


@dataclass(frozen=True)
class ReportConfig:
    results: str = field(default=str(LAB / "results"), metadata={"help": "folder of per-preset result folders"})
    out: str = field(default=str(LAB / "REPORT.md"), metadata={"help": "report path (plots go beside the CSVs)"})


def summarize(steps: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for run, g in steps.groupby("run", sort=False):
        g = g.sort_values("step")
        n = len(g)
        tail = g.iloc[-max(1, n // 10):]
        warm = g.iloc[n // 10:] if n >= 10 else g
        val = g["val_loss"].dropna()
        mem = g["peak_mem_MiB"].dropna()
        act = g["saved_act_MiB"].dropna()
        rows.append(dict(run=run, precision=g["precision"].iloc[0], backend=g["precision_backend"].iloc[0],
                         compiled=str(g["compiled"].iloc[0]).lower() == "true" if "compiled" in g else False,
                         seed=int(g["seed"].iloc[0]), steps=n, tokens_per_step=int(g["tokens_per_step"].iloc[0]),
                         final_loss=tail["loss"].mean(), final_val=val.iloc[-1] if len(val) else math.nan,
                         tokens_per_s=warm["tokens_per_s"].median(), peak_mem=mem.max() if len(mem) else math.nan,
                         saved_act=act.median() if len(act) else math.nan, nonfinite=int(g["nonfinite"].sum()),
                         mfu=warm["mfu"].median() if "mfu" in warm and warm["mfu"].notna().any() else math.nan))
    return pd.DataFrame(rows)


def noise_band(summary: pd.DataFrame) -> tuple[float, float] | None:
    ref = summary[summary["precision"] == "bf16"]["final_val"].dropna()
    return (ref.min(), ref.max()) if len(ref) >= 2 else None


def verdict(row, band) -> str:
    if band is None or math.isnan(row.final_val):
        return "n/a (needs >= 2 BF16 seeds)"
    lo, hi = band
    if lo <= row.final_val <= hi:
        return "within BF16 noise"
    return f"outside ({row.final_val - (hi if row.final_val > hi else lo):+.4f} from band)"


def table(summary: pd.DataFrame, band, device_is_gpu: bool, pool: pd.DataFrame) -> list[str]:
    """`pool`: this folder's runs plus same-model BF16 runs of sibling folders (the BF16 reference)."""
    bf16 = pool[(pool["precision"] == "bf16")]["tokens_per_s"]
    base = bf16.median() if len(bf16) else math.nan
    mem_head = "peak memory (MiB)" if device_is_gpu else "saved activations (MiB)"
    # MFU against the BF16 peak, for BF16/FP16 runs only (torchtitan skips it for FP8); targets: >= 50% BF16
    # MFU and FP8/BF16 tokens/s >= 1.3 at the h100 preset (issue 6).
    out = [f"| run | precision | backend | compiled | tokens/step | tokens/s | vs BF16 | MFU | {mem_head} | "
           "final loss | final val | vs BF16 noise |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary.itertuples():
        mem = r.peak_mem if device_is_gpu else r.saved_act
        mfu = "" if math.isnan(r.mfu) else f"{r.mfu:.1%}"
        out.append(f"| {r.run} | {r.precision} | {r.backend} | {'yes' if r.compiled else 'no'} | "
                   f"{r.tokens_per_step} | {r.tokens_per_s:,.0f} | "
                   f"{r.tokens_per_s / base:.2f}x | {mfu} | {mem:.1f} | {r.final_loss:.4f} | {r.final_val:.4f} | "
                   f"{verdict(r, band) if r.precision != 'bf16' else 'reference'} |")
    return out


TARGETS = ("FP8 (torchao) / BF16 tokens/s >= 1.3 at hidden 4096", "native FP8 within 15% of torchao (tokens/s)",
           "BF16 MFU >= 50%", "TE FP8 / BF16 tokens/s >= 1.3 at hidden 4096")


def targets(summary: pd.DataFrame, pool: pd.DataFrame, d_model: int) -> list[str]:
    """The GPU targets (issues 6, 12, 14) against this preset's runs; 'not measured' where a run is missing."""
    tps = lambda prec, be: summary[(summary.precision == prec) & (summary.backend == be)]["tokens_per_s"]  # noqa
    ao, nat, te = tps("fp8", "torchao"), tps("fp8", "native"), tps("fp8", "te")
    bf16 = pool[pool.precision == "bf16"]["tokens_per_s"]
    mfu = pool[pool.precision == "bf16"]["mfu"].dropna()
    base = bf16.median() if len(bf16) else math.nan

    def row(name, value, ok, fmt):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return f"| {name} | not measured | |"
        return f"| {name} | {fmt(value)} | {'met' if ok else '**not met**'} |"

    at = "" if d_model == 4096 else f" (measured at hidden {d_model})"
    r_ao = ao.median() / base if len(ao) else None
    r_nat = nat.median() / ao.median() if len(nat) and len(ao) else None
    r_te = te.median() / base if len(te) else None
    return ["| target | measured | |", "|---|---|---|",
            row(TARGETS[0] + at, r_ao, r_ao is not None and r_ao >= 1.3, "{:.2f}x".format),
            row(TARGETS[1], r_nat, r_nat is not None and r_nat >= 0.85, "{:.2f}x of torchao".format),
            row(TARGETS[2], mfu.median() if len(mfu) else None, len(mfu) and mfu.median() >= 0.5, "{:.1%}".format),
            row(TARGETS[3] + at, r_te, r_te is not None and r_te >= 1.3, "{:.2f}x".format), ""]


def plot_loss(steps: pd.DataFrame, summary: pd.DataFrame, out: Path, footer: str) -> Path:
    fig, (ax, axv) = new_figure(1, 2)
    bf = steps[steps["precision"] == "bf16"]
    if bf["run"].nunique() >= 2:
        smooth = bf.pivot_table(index="step", columns="run", values="loss").rolling(10, min_periods=1).mean()
        ax.fill_between(smooth.index, smooth.min(axis=1), smooth.max(axis=1), color="0.8", label="BF16 seed band")
        vals = bf.dropna(subset=["val_loss"]).pivot_table(index="step", columns="run", values="val_loss")
        axv.fill_between(vals.index, vals.min(axis=1), vals.max(axis=1), color="0.8", label="BF16 seed band")
    for run, g in steps.groupby("run", sort=False):
        if g["precision"].iloc[0] == "bf16" and g["seed"].iloc[0] != summary["seed"].min():
            continue
        ax.plot(g["step"], g["loss"].rolling(10, min_periods=1).mean(), label=run, lw=1.1)
        v = g.dropna(subset=["val_loss"])
        axv.plot(v["step"], v["val_loss"], marker="o", ms=3, label=run, lw=1.1)
    ax.set(xlabel="step", ylabel="train loss (10-step mean)", title="training loss")
    axv.set(xlabel="step", ylabel="validation loss", title="validation loss")
    lo = steps["loss"].quantile(0.02)
    ax.set_ylim(lo - 0.1, steps.groupby("run")["loss"].apply(lambda s: s.iloc[len(s) // 10:].max()).max() + 0.1)
    axv.legend()
    return save(fig, out / "loss.png", footer)


def plot_scales(fp8: pd.DataFrame, out: Path, footer: str) -> Path | None:
    runs = list(fp8["run"].unique())
    if not runs:
        return None
    cols = min(2, len(runs))
    fig, axes = new_figure((len(runs) + cols - 1) // cols, cols, squeeze=False)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs):
        g = fp8[fp8["run"] == run]
        for (module, role), h in g.groupby(["module", "role"]):
            ax.plot(h["step"], h["scale"], color=ROLE_STYLE.get(role, "0.5"), lw=0.7, alpha=0.6)
        for role, c in ROLE_STYLE.items():
            ax.plot([], [], color=c, label=role)
        ax.set(yscale="log", xlabel="step", ylabel="scale (fp8_max / amax)", title=f"{run}: per-tensor scales")
        ax.legend()
    return save(fig, out / "scales.png", footer)


def plot_sweep(sweep: pd.DataFrame, out: Path, footer: str) -> Path:
    fig, ax = new_figure()
    bf = sweep[sweep["precision"] == "bf16"].set_index("d_model")["tokens_per_s"]
    for run, g in sweep[sweep["precision"] != "bf16"].groupby("run"):
        g = g.set_index("d_model")
        ax.plot(g.index, g["tokens_per_s"] / bf.reindex(g.index), marker="o", label=run)
    ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
    ax.set(xscale="log", xlabel="hidden size (d_model)", ylabel="tokens/s relative to BF16", title="FP8 crossover")
    ax.legend()
    return save(fig, out / "crossover.png", footer)


def fp8_table(fp8: pd.DataFrame) -> list[str]:
    out = ["| run | role | format | median scale | min scale | mean underflow | max underflow | max saturation |",
           "|---|---|---|---|---|---|---|---|"]
    for (run, role), g in fp8.groupby(["run", "role"], sort=False):
        u, s = g["underflow_frac"].dropna(), g["saturation_frac"].dropna()
        f = lambda x, fn: f"{fn(x):.2%}" if len(x) else "n/a"  # noqa: E731
        sc = g["scale"].dropna()
        if sc.empty:  # compiled dynamic-scaling runs: no backward hooks, so no gradient amax was recorded
            out.append(f"| {run} | {role} | {g['format'].iloc[0]} | not recorded | | | | |")
            continue
        out.append(f"| {run} | {role} | {g['format'].iloc[0]} | {sc.median():.3g} | {sc.min():.3g} | "
                   f"{f(u, pd.Series.mean)} | {f(u, pd.Series.max)} | {f(s, pd.Series.max)} |")
    return out


MODEL_KEY = ["hardware", "d_model", "n_layers", "seq_len", "tokens_per_step"]


def sibling_bf16(d: Path, all_steps: dict[Path, pd.DataFrame | None]) -> pd.DataFrame:
    """BF16 runs of the same model, hardware and length in other result folders (another invocation of the
    same preset, e.g. the TransformerEngine runs made after the main ones): more samples for the noise band."""
    steps = all_steps[d]
    key, last = steps[MODEL_KEY].iloc[0].tolist(), steps["step"].max()
    out = []
    for other, s in all_steps.items():
        if other == d or s is None or s.empty or s[MODEL_KEY].iloc[0].tolist() != key or s["step"].max() != last:
            continue
        bf = s[s["precision"] == "bf16"]
        out.append(bf.assign(run=bf["run"] + f" ({other.name})"))
    return pd.concat(out, ignore_index=True) if out else steps.iloc[0:0]


def preset_section(d: Path, root: Path, all_steps: dict[Path, pd.DataFrame | None]) -> list[str]:
    """One preset folder's comparison; `all_steps`: every folder's steps.csv, read once by main()."""
    steps, fp8 = all_steps[d], _read(d / "fp8.csv")
    if steps is None:
        return []
    cfg = json.loads((d / "steps.config.json").read_text()) if (d / "steps.config.json").exists() else {}
    gpu = _is_gpu(steps)
    footer = describe_runs(steps, {"tokens/step": int(steps["tokens_per_step"].iloc[0])})
    summary = summarize(steps)
    sib = sibling_bf16(d, all_steps)
    pool = pd.concat([summary, summarize(sib)], ignore_index=True) if len(sib) else summary
    band = noise_band(pool)
    lines = [f"## Preset `{d.name}`: {steps['hardware'].iloc[0]}", "",
             f"Model: d_model {steps['d_model'].iloc[0]}, n_layers {steps['n_layers'].iloc[0]}, "
             f"seq {steps['seq_len'].iloc[0]}, {steps['tokens_per_step'].iloc[0]} tokens/step, "
             f"{summary['steps'].max()} steps; data {cfg.get('data', '?')}; "
             f"world size {steps['world_size'].iloc[0]}, torch {steps['torch_version'].iloc[0]}, "
             f"commit {steps['git_commit'].iloc[0]}.", ""]
    if not gpu:
        lines += ["On CPU, bf16 is **emulated** (operands of every Linear and attention rounded to bf16, fp32 GEMMs; "
                  "CPUs without bf16 units run real bf16 GEMMs ~50x slower than fp32), and FP8 runs are FP8 linears "
                  "inside that emulated bf16. So CPU tokens/s show the cost of emulation, not FP8 speed. CPU memory "
                  "is the activations autograd saved for backward (no allocator counters on CPU); the emulation's "
                  "own rounded copies inflate bf16's, and the emulated FP8 engine keeps fp32 copies (native keeps "
                  "FP8 bytes): a memory comparison that means something needs a GPU run.", ""]
    lines += table(summary, band, gpu, pool) + [""]
    if gpu:
        lines += ["Targets (tokens/s: median after the first 10% of steps; MFU against the BF16 dense peak, "
                  "BF16 runs only; the BF16 reference includes same-model runs of sibling folders):", ""]
        lines += targets(summary, pool, int(steps["d_model"].iloc[0]))
    if band:
        others = sorted(set(sib["run"])) if len(sib) else []
        lines += [f"BF16 noise band (final val loss over {int((pool.precision == 'bf16').sum())} BF16 runs"
                  + (f", including {', '.join(others)} from a sibling folder of the same model" if others else "")
                  + f"): [{band[0]:.4f}, {band[1]:.4f}].", ""]
    lines += [f"![loss curves]({_rel(plot_loss(steps, summary, d, footer), root)})", ""]
    if fp8 is not None and len(fp8):
        lines += ["Per-tensor FP8 scales over steps (one line per module, colour = role) and how well they fit:", "",
                  f"![scales]({_rel(plot_scales(fp8, d, footer), root)})", ""] + fp8_table(fp8) + [""]
    sweep = _read(d / "sweep.csv")
    if sweep is not None and len(sweep):
        lines += [f"![crossover]({_rel(plot_sweep(sweep, d, describe_runs(sweep)), root)})", ""]
    elif not gpu:
        lines += ["Hidden-size crossover: measured on GPU presets only (bench.py at hidden 1024-8192).", ""]
    bad = steps[steps["nonfinite"].astype(str).str.lower() == "true"]
    lines += ["NaN/Inf steps: " + ("none." if bad.empty else ", ".join(f"{r.run} step {r.step}" for r in
                                                                        bad.itertuples())), ""]
    skipped = cfg.get("skipped_runs") or []
    if skipped:
        lines += ["Preset runs not run here:", ""] + [f"- {s}" for s in skipped] + [""]
    lines += bench_section(d, root) + health_report.monitor_lines(d)
    return lines


def _rel(p: Path, root: Path) -> str:
    return os.path.relpath(p, root)


def bench_section(d: Path, root: Path) -> list[str]:
    b, g, k = _read(d / "bench_step.csv"), _read(d / "bench_gemm.csv"), _read(d / "bench_kernels.csv")
    lines = []
    if b is not None and len(b):
        lines += bench_step_lines(b, d, root)
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
        lines += [f"| {r.fp8_linear_version} | {r.inductor_kernels} | {r.update_ops} |" for r in k.itertuples()]
        lines.append("")
    return lines


def bench_step_lines(b: pd.DataFrame, d: Path, root: Path) -> list[str]:
    gpu = str(b["cuda_version"].iloc[0]) not in ("none", "nan")
    ref_prec = "bf16" if gpu else "fp32"
    ref = b[b["precision"] == ref_prec].set_index("d_model")["step_time_s"]
    lines = [f"Step cost (bench.py, {b['n_layers'].iloc[0]} blocks, {b['tokens_per_step'].iloc[0]} tokens/step; "
             + ("modes one after another, CUDA events, median step" if gpu else
                "modes interleaved, median step; the FP8 runs include the bf16 emulation around their FP8 linears")
             + "):", "", f"| d_model | run | compiled | ms/step | model TFLOP/s | vs {ref_prec} | kernels/step | "
             "target | met |", "|---|---|---|---|---|---|---|---|---|"]
    for r in b.itertuples():
        vs = f"{r.step_time_s / ref[r.d_model]:.2f}x" if r.d_model in ref.index else ""
        tgt = "" if pd.isna(r.target_ratio) else f"<= {r.target_ratio} vs fp32"
        met = "" if pd.isna(r.target_ratio) else ("yes" if str(r.meets_target).lower() == "true" else "**no**")
        kern = "" if pd.isna(r.kernels_per_step) else f"{int(r.kernels_per_step)}"
        comp = "yes" if str(r.compiled).lower() == "true" else "no"
        lines.append(f"| {r.d_model} | {r.run} | {comp} | {r.step_time_s * 1e3:.2f} | {r.model_tflops:.3g} | {vs} | "
                     f"{kern} | {tgt} | {met} |")
    lines.append("")
    if gpu and b["d_model"].nunique() > 1:
        sweep = b.rename(columns={"precision_backend": "backend"})
        lines += [f"![crossover]({_rel(plot_sweep(sweep, d, describe_runs(b)), root)})", ""]
        lines += crossover_lines(b)
    return lines


def crossover_lines(b: pd.DataFrame) -> list[str]:
    """The smallest hidden size from which each FP8 mode is faster than BF16 at every larger size measured."""
    ref = b[b["precision"] == "bf16"].set_index("d_model")["step_time_s"]
    out = []
    for run, g in b[b["precision"] != "bf16"].groupby("run", sort=False):
        g = g.set_index("d_model").sort_index()
        wins = [dm for dm in g.index if dm in ref.index and g.loc[dm, "step_time_s"] < ref[dm]]
        first = next((dm for dm in g.index if all(x in wins for x in g.index if x >= dm)), None)
        out.append(f"- {run}: " + (f"faster than BF16 from hidden {first} on" if first is not None else
                                   "not faster than BF16 at any measured size"))
    return out + [""]


def check_folders(dirs: list[Path]) -> None:
    """Every result file of every preset folder, checked before anything is drawn (one line, exit 2)."""
    for d in dirs:
        for name in SCHEMAS:
            _read(d / name)
    if not any((d / "steps.csv").exists() for d in dirs):
        raise BadResults("no preset folder with a steps.csv in the results folder; run `make fp8-train-run`")


@guard_report
def main(argv: list[str] | None = None) -> int:
    args = parse_config(ReportConfig, argv, description=__doc__, prog="report.py")
    results = results_folder(args.results, "run `make fp8-train-run`")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise BadResults(f"--out {out}: the folder {out.parent} does not exist")
    dirs = sorted(p for p in results.iterdir() if p.is_dir() and not p.name.startswith("."))
    check_folders(dirs)
    all_steps = {d: _read(d / "steps.csv") for d in dirs}
    sections = []
    for d, steps in all_steps.items():  # a folder of runs with injected faults is a health demo, not a comparison
        if steps is not None and not health_report.has_faults(steps):
            sections += preset_section(d, out.parent, all_steps)
        sections += health_report.section(d, out.parent)
    gpu_runs = [d.name for d, steps in all_steps.items() if _is_gpu(steps)]
    ran = sorted({b for steps in all_steps.values() for b in _backends(steps)} & {"te", "torchao"})
    not_ran = [name for key, name in (("te", "TransformerEngine"), ("torchao", "torchao")) if key not in ran]
    head = ["# fp8-train report", "",
            "Generated by `report.py` from the CSVs in `results/`; definitions are in its docstring."
            + (f" {' and '.join(not_ran)}: written against the documentation, no run of it is in these results."
               if not_ran else ""), "",
            "GPU runs: " + (", ".join(gpu_runs) if gpu_runs else "**none yet** -- no GPU number appears below; "
                           "`make fp8-train GPU=h100` on an H100/H200 adds them. Against the GPU targets ("
                           + "; ".join(TARGETS) + "): not measured."), ""]
    sections += ["", predicted.section("fp8-train", results)]  # the planner's prediction beside every GPU row
    out.write_text("\n".join(head + sections).rstrip() + "\n")
    print(f"wrote {out.name} ({len(dirs)} result folders)")
    return 0


def _backends(steps: pd.DataFrame | None) -> set[str]:
    return set() if steps is None or "precision_backend" not in steps else set(steps["precision_backend"])


def _is_gpu(steps: pd.DataFrame | None) -> bool:
    return steps is not None and str(steps["cuda_version"].iloc[0]) not in ("none", "nan")


if __name__ == "__main__":
    sys.exit(main())
