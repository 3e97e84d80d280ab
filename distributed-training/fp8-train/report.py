"""REPORT.md and its plots, from the committed CSVs alone (results/<folder>/*.csv).

    make fp8-train-report          # or: PYTHONPATH=distributed-training python distributed-training/fp8-train/report.py

The prose is report_template.md; each {{name}} in it is filled by the section function of that name
in SECTIONS (one more section = one function and one placeholder). Results folders are discovered,
not named: every folder under results/ with a steps.csv is grouped by model identity
(comparison.py), so the runs of one model meet in one table whichever folder holds them. A folder of
runs with injected faults is a health demo (health_report.py), not a comparison.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd

import comparison
import health_report
import scale_stats
from common.config import parse_config
from common.csvread import BadResults, check_configs, guard_report, read_json, results_folder
from common.markdown import table as md_table
from common.plotting import describe_runs
from comparison import Folder, ModelKey, is_gpu, model_key, summarize
from planner import vs_measured
from report_plots import plot_crossover, plot_loss, plot_scales, speedups
from tables import SCHEMAS, read as _read

LAB = Path(__file__).resolve().parent
OWN_PLOTS = ("loss", "scales", "crossover")  # PNG names the report writes; stale ones are removed


@dataclass(frozen=True)
class ReportConfig:
    results: str = field(default=str(LAB / "results"), metadata={"help": "folder of result folders"})
    out: str = field(default=str(LAB / "REPORT.md"), metadata={"help": "report path (plots go beside the CSVs)"})


class Context(NamedTuple):
    results: Path
    root: Path  # REPORT.md's folder: links are relative to it
    dirs: list[Path]  # every result folder
    folders: dict[str, Folder]  # those with a steps.csv
    models: dict[ModelKey, list[Folder]]  # comparison folders (no injected faults) by model
    bounds: pd.DataFrame | None  # every folder's bound.csv rows
    written: list[Path]  # plots written this time


def _rel(p: Path, ctx: Context) -> str:
    return os.path.relpath(p, ctx.root)


# What the report reads from a run's saved config (comparison.py), each of its kind when present.
CONFIG_KINDS = {"n_heads": int, "steps": int, "data": str, "data_fingerprint": str, "skipped_runs": list,
                "fp8_backend": str, "fp8_scaling": str, "torchao_recipe": str, "mx_scale_rule": str}


def load(results: Path, root: Path) -> Context:
    check_configs(results)
    dirs = sorted(p for p in results.iterdir() if p.is_dir() and not p.name.startswith("."))
    for d in dirs:  # every result file checked before anything is drawn (one line, exit 2)
        for name in SCHEMAS:
            _read(d / name)
    folders = {}
    for d in dirs:
        steps = _read(d / "steps.csv")
        if steps is not None:
            saved = d / "steps.config.json"
            cfg = read_json(saved, "the config saved beside steps.csv", CONFIG_KINDS) if saved.exists() else {}
            folders[d.name] = Folder(d.name, steps, cfg, _read(d / "fp8.csv"))
    if not folders:
        raise BadResults("no result folder with a steps.csv in the results folder; run `make fp8-train-run`")
    models: dict[ModelKey, list[Folder]] = {}
    for f in folders.values():
        if not health_report.has_faults(f.steps):
            models.setdefault(model_key(f.steps, f.config), []).append(f)
    bound = [b for d in dirs if (b := _read(d / "bound.csv")) is not None and len(b)]
    return Context(results, root, dirs, folders, models, pd.concat(bound, ignore_index=True) if bound else None, [])


# ---- sections ---------------------------------------------------------------------------------

def head(ctx: Context) -> list[str]:
    gpu = [f.name for f in ctx.folders.values() if is_gpu(f.steps)]
    ran = {b for f in ctx.folders.values() for b in f.steps["precision_backend"]}
    not_ran = [name for key, name in (("te", "TransformerEngine"), ("torchao", "torchao"))
               if not any(b.split("-")[0] == key for b in ran)]
    lines = [f"Models compared: {len(ctx.models)}; result folders: {', '.join(f'`{d.name}`' for d in ctx.dirs)}."]
    lines += ["GPU results: " + (", ".join(f"`{n}`" for n in gpu) + "." if gpu else
                                 "**none yet** -- no GPU number appears below; `make fp8-train GPU=h100` on an "
                                 "H100/H200 adds them.")]
    if not_ran:
        lines += [f"{' and '.join(not_ran)}: written against the documentation, no run of it is in these results."]
    return [" ".join(lines)]


CPU_NOTE = ("On CPU, bf16 is **emulated** (operands of every Linear and attention rounded to bf16, fp32 GEMMs; CPUs "
            "without bf16 units run real bf16 GEMMs ~50x slower than fp32), and FP8 runs are FP8 linears inside that "
            "emulated bf16. So CPU tokens/s show the cost of emulation, not FP8 speed, and no FP8 bound or target "
            "applies. CPU memory is the activations autograd saved for backward (no allocator counters on CPU); the "
            "emulation's own rounded copies inflate bf16's, and the emulated FP8 engine keeps fp32 copies (native "
            "keeps FP8 bytes): a memory comparison that means something needs a GPU run.")


def models(ctx: Context) -> list[str]:
    out = []
    order = sorted(ctx.models.items(), key=lambda kv: (not is_gpu(kv[1][0].steps), kv[0].hardware, kv[0].d_model))
    for key, folders in order:
        out += model_section(ctx, key, folders)
    return out


def model_section(ctx: Context, key: ModelKey, folders: list[Folder]) -> list[str]:
    runs = [r for f in folders for r in summarize(f)]
    gpu = is_gpu(folders[0].steps)
    band = comparison.bf16_band(runs)
    bound = comparison.bound_for(key, ctx.bounds) if gpu else None
    steps = pd.concat([f.steps for f in folders], ignore_index=True)
    footer = describe_runs(steps, {"model": f"d{key.d_model}-L{key.n_layers}", "tokens/step": key.batch * key.seq_len})
    out = [f"### {key.hardware}: d_model {key.d_model}, {key.n_layers} layers (world size {key.world_size})", "",
           f"Model: {key.describe()}; data {folders[0].config.get('data', key.data)}. Folders: "
           + ", ".join(f"`{f.name}`" for f in folders) + f"; torch {_joined(steps, 'torch_version')}, commit "
           f"{_joined(steps, 'git_commit')}.", ""]
    out += [CPU_NOTE, ""] if not gpu else []
    out += comparison.table(runs, band, gpu, bound)
    out += band_lines(band, runs)
    if gpu:
        out += ["Targets (issue 23; tokens/s as in the table):", ""] + comparison.targets(key, runs, band, bound)
        out += bound_lines(bound)
    home = ctx.results / folders[0].name
    curves = {(f.name, run): g.sort_values("step") for f in folders for run, g in f.steps.groupby("run")}
    png = plot_loss(runs, curves, band, _plot_path(ctx, home, "loss", key), footer)
    ctx.written.append(png)
    out += [f"![loss curves and final validation loss against the BF16 band]({_rel(png, ctx)})", ""]
    fp8 = {f.name: f.fp8 for f in folders}
    missing = {id(r): scale_stats.missing_roles(r, fp8[r.folder]) for r in runs if r.fp8}
    png = plot_scales(runs, fp8, missing, _plot_path(ctx, home, "scales", key), footer)
    if png is not None:
        ctx.written.append(png)
        out += ["Per-tensor scales over steps (one line per module, colour = role), and every role's scale and "
                "amax, or why it was not recorded:", "", f"![scales]({_rel(png, ctx)})", ""]
        out += scale_stats.table(runs, {f.name: f for f in folders})
    bad = [f"{r.name} ({r.folder}) step {s}" for r in runs for s in r.nonfinite]
    out += ["NaN/Inf steps: " + (", ".join(bad) if bad else "none") + ".", ""]
    skipped = comparison.skipped(folders, runs)
    return out + (["Runs a preset asked for that could not run:", ""] + skipped + [""] if skipped else [])


def band_lines(band: comparison.Band, runs: list[comparison.Run]) -> list[str]:
    seeds = band.seeds
    if len(seeds) < 2:
        return [f"BF16 band: {len(seeds)} distinct seed(s), no band; losses are shown without a verdict.", ""]
    lo, hi = band.limits("final_val")
    flo, fhi = band.limits("final_loss")
    out = [f"BF16 band over {len(seeds)} distinct seeds ({', '.join(f's{r.seed} from `{r.folder}`' for r in seeds)}): "
           f"final val [{lo:.4f}, {hi:.4f}] (width {hi - lo:.4f}), final loss [{flo:.4f}, {fhi:.4f}]."]
    for r in band.repeats:
        first = next(s for s in seeds if s.seed == r.seed)
        out.append(f"{r.name} was run again in `{r.folder}`: final val {r.final_val:.4f} against {first.final_val:.4f} "
                   f"in `{first.folder}` ({r.final_val - first.final_val:+.4f}), the same seed and settings, so that "
                   f"difference is run-to-run nondeterminism ({abs(r.final_val - first.final_val) / (hi - lo):.0%} of "
                   "the band's width); it is shown, not counted as another seed.")
    return [" ".join(out), ""] + paired_lines(band, runs)


def paired_lines(band: comparison.Band, runs: list[comparison.Run]) -> list[str]:
    """Each run against the BF16 run of its own seed: same initial weights, same batches, so the closest
    reference (a paired difference), with the BF16 repeat's difference as its noise floor."""
    ref = {r.seed: r for r in band.seeds}
    pairs = [(r, ref[r.seed]) for r in runs if r.precision != "bf16" and r.seed in ref]
    if not pairs:
        return []
    parts = [f"{r.name} ({r.folder}) {r.final_val - b.final_val:+.4f}" for r, b in pairs]
    floor = [f"{abs(r.final_val - ref[r.seed].final_val):.4f}" for r in band.repeats if r.seed in ref]
    return ["Paired with the BF16 run of the same seed (same initial weights and batches), final val differences: "
            + ", ".join(parts) + "." + (f" A BF16 repeat of that seed differs by {', '.join(floor)}: differences "
                                        "of that size are run-to-run noise." if floor else ""), ""]


def bound_lines(b: pd.Series | None) -> list[str]:
    if b is None:
        return ["FP8 bound: not measured for this model (no bound.csv row of its shape and GPU).", ""]
    return [f"FP8 bound (bound.csv): BF16 step {b['bf16_step_ms']:.1f} ms, of which GEMMs {b['bf16_gemm_ms']:.1f} ms "
            f"({b['gemm_share']:.0%}); the same GEMMs in FP8 {b['fp8_gemm_ms']:.1f} ms; so FP8 GEMMs alone can make "
            f"the step at most {b['bound_speedup']:.2f}x faster.", ""]


def benchmarks(ctx: Context) -> list[str]:
    out = []
    for d in ctx.dirs:
        lines = bench_section(ctx, d)
        out += [f"### `{d.name}`", ""] + lines if lines else []
    return out or ["No benchmark results (`make fp8-train-bench`)."]


def health(ctx: Context) -> list[str]:
    return [line for d in ctx.dirs for line in health_report.section(d, ctx.root)]


def planner(ctx: Context) -> list[str]:
    """The planner's prediction beside every GPU row (planner.vs_measured: one pricing function for all labs)."""
    return [vs_measured.section("fp8-train", ctx.results)]


SECTIONS: dict[str, Callable[[Context], list[str]]] = {"head": head, "models": models, "benchmarks": benchmarks,
                                                       "planner": planner, "health": health}


# ---- benchmarks --------------------------------------------------------------------------------

def bench_section(ctx: Context, d: Path) -> list[str]:
    b, g, k, sw = (_read(d / n) for n in ("bench_step.csv", "bench_gemm.csv", "bench_kernels.csv", "sweep.csv"))
    lines = bench_step_lines(ctx, b, d) if b is not None and len(b) else []
    if sw is not None and len(sw):  # train.py --sweep-hidden: tokens/s per hidden size
        sp = speedups(sw.assign(step_time_s=sw["tokens_per_step"] / sw["tokens_per_s"]), "step_time_s")
        png = plot_crossover(sp, d / "crossover.png", describe_runs(sw))
        ctx.written.append(png)
        lines += [f"![crossover]({_rel(png, ctx)})", ""]
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


def bench_step_lines(ctx: Context, b: pd.DataFrame, d: Path) -> list[str]:
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
        ctx.written.append(png)
        lines += [f"![FP8 speedup over BF16 per hidden size]({_rel(png, ctx)})", ""] + crossover_lines(sp)
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


# ---- plumbing ----------------------------------------------------------------------------------

def _joined(df: pd.DataFrame, col: str) -> str:
    return "/".join(sorted({str(v) for v in df[col].dropna()})) if col in df else "?"


def _plot_path(ctx: Context, home: Path, name: str, key: ModelKey) -> Path:
    """<home folder>/<name>.png; a second model homed in the same folder gets its shape in the name."""
    path = home / f"{name}.png"
    return path if path not in ctx.written else home / f"{name}_d{key.d_model}_l{key.n_layers}.png"


def _remove_stale(ctx: Context) -> None:
    """PNGs this report wrote before that no section draws any more (e.g. a folder whose runs joined a model)."""
    for d in ctx.dirs:
        for p in d.glob("*.png"):
            if p.stem.split("_")[0] in OWN_PLOTS and p not in ctx.written:
                p.unlink()


@guard_report
def main(argv: list[str] | None = None) -> int:
    args = parse_config(ReportConfig, argv, description=__doc__, prog="report.py")
    results = results_folder(args.results, "run `make fp8-train-run`")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise BadResults(f"--out {out}: the folder {out.parent} does not exist")
    ctx = load(results, out.parent)
    text = (LAB / "report_template.md").read_text()
    for name, section in SECTIONS.items():
        text = text.replace("{{" + name + "}}", "\n".join(section(ctx)).rstrip())
    _remove_stale(ctx)
    out.write_text(text.rstrip() + "\n")
    print(f"wrote {out.name} ({len(ctx.dirs)} result folders, {len(ctx.models)} models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
