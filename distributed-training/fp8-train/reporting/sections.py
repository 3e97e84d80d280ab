"""REPORT.md's sections, one function per {{name}} of report_template.md, over every results folder at once.

    load            every result file checked first (tables.py: one line, exit 2), then grouped: the folders with
                    a steps.csv by model identity (comparison.py), the folders with injected faults apart (a
                    health demo, health_report.py), every folder's bound.csv and events.csv
    SECTIONS        provenance, findings, answer, story, models, scales audit, benchmarks, health, planner, CPU
                    caveats: each returns its lines, drawing its plots beside the CSVs it reads
    main            the template filled in, PNGs no section draws any more removed

What it reads and the command: report.py, whose docstring is this generator's --help.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd

from common.config import parse_config
from common.csvread import BadResults, check_configs, guard_report, read_json, results_folder
from common.findings import block
from common.plotting import describe_runs
from planner.evidence import vs_measured
from precision import backends
from reporting import answer_plots, bench_report, comparison, findings, health_report, scale_stats, story
from reporting.comparison import Folder, ModelKey, is_gpu, model_key, summarize
from reporting.report_plots import plot_loss, plot_scales
from reporting.tables import SCHEMAS, read as _read

LAB = Path(__file__).resolve().parents[1]  # the lab: results/, REPORT.md
HERE = Path(__file__).resolve().parent
OWN_PLOTS = ("loss", "scales", "crossover", "answer", "underflow")  # PNGs the report writes; stale ones are removed


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
    events: dict[str, pd.DataFrame | None]  # every folder's events.csv
    facts: list[findings.Facts]  # per model: what the answer and the story are made of


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
    events = {d.name: _read(d / "events.csv") for d in dirs}
    ctx = Context(results, root, dirs, folders, models, pd.concat(bound, ignore_index=True) if bound else None, [],
                  events, [])
    ctx.facts.extend(model_facts(ctx, key, fs) for key, fs in models.items())
    return ctx


def model_facts(ctx: Context, key: ModelKey, folders: list[Folder]) -> findings.Facts:
    runs = [r for f in folders for r in summarize(f)]
    curves = {(f.name, run): g.sort_values("step") for f in folders for run, g in f.steps.groupby("run")}
    gpu = is_gpu(folders[0].steps)
    bound = comparison.bound_for(key, ctx.bounds) if gpu else None
    return findings.model_facts(key, runs, comparison.bf16_band(runs), gpu, curves,
                                {f.name: f.fp8 for f in folders}, {f.name: ctx.events.get(f.name) for f in folders},
                                {f.name: f.config for f in folders},
                                None if bound is None else float(bound["bound_speedup"]))


# ---- sections ---------------------------------------------------------------------------------

def provenance(ctx: Context) -> list[str]:
    gpu = [f.name for f in ctx.folders.values() if is_gpu(f.steps)]
    ran = {b for f in ctx.folders.values() for b in f.steps["precision_backend"]}
    ran_packages = {be.package for be in map(backends.lookup, ran) if be is not None}
    not_ran = [name for package, name in backends.libraries() if package not in ran_packages]
    lines = [f"Models compared: {len(ctx.models)}; result folders: {', '.join(f'`{d.name}`' for d in ctx.dirs)}."]
    lines += ["GPU results: " + (", ".join(f"`{n}`" for n in gpu) + "." if gpu else
                                 "**none yet** -- no GPU number appears below; `make fp8-train GPU=h100` on an "
                                 "H100/H200 adds them.")]
    if not_ran:
        lines += [f"{' and '.join(not_ran)}: written against the documentation, no run of it is in these results."]
    return [" ".join(lines)]


def _findings(ctx: Context) -> list[str]:
    missing = [key for key, fs in ctx.models.items() if is_gpu(fs[0].steps) and comparison.bound_for(
        key, ctx.bounds) is None]
    multi = any(key.world_size > 1 for key, fs in ctx.models.items() if is_gpu(fs[0].steps))
    return block(findings.opening(ctx.facts, missing, multi))


def _primary(ctx: Context) -> tuple[ModelKey, list[Folder], findings.Facts]:
    f = findings.primary(ctx.facts)
    return f.key, ctx.models[f.key], f


def answer(ctx: Context) -> list[str]:
    """The plot that carries the answer, its caption, then the answer's model's table."""
    key, folders, f = _primary(ctx)
    footer = describe_runs(pd.concat([x.steps for x in folders], ignore_index=True),
                           {"model": f"d{key.d_model}-L{key.n_layers}"})
    png = answer_plots.plot_answer(f, _plot_path(ctx, ctx.results / folders[0].name, "answer", key), footer)
    out = []
    if png is not None:
        ctx.written.append(png)
        caption = ("each FP8 run's final validation loss minus that of the BF16 run of its own seed, beside the "
                   "grey band of run-to-run noise; then its tokens/s over BF16's and its peak memory per GPU."
                   if f.gpu else "each low-precision run's final validation loss minus that of the BF16 run of its "
                                 "own seed, beside the grey band of run-to-run noise (CPU: speed and memory are "
                                 "emulation, not findings).")
        out += [f"![the answer: loss cost, speed and memory]({_rel(png, ctx)})", "",
                f"*What to see:* {caption} Bars right of the grey band are differences the noise does not explain.",
                ""]
    return out + [f"**The comparison behind it** ({key.describe()}):", ""] + model_table(ctx, key, folders)


def story_section(ctx: Context) -> list[str]:
    pngs = {}
    for f in ctx.facts:
        folders = ctx.models[f.key]
        footer = describe_runs(pd.concat([x.steps for x in folders], ignore_index=True),
                               {"model": f"d{f.key.d_model}-L{f.key.n_layers}"})
        png = answer_plots.plot_underflow(f, _plot_path(ctx, ctx.results / folders[0].name, "underflow", f.key),
                                          footer)
        if png is not None:
            ctx.written.append(png)
            pngs[(f.key, "underflow")] = _rel(png, ctx)
    demo = [name for name, fo in ctx.folders.items() if health_report.has_faults(fo.steps)]
    return story.render(ctx.facts, pngs, {n: fo.steps for n, fo in ctx.folders.items()}, ctx.events, demo)


CPU_NOTE = ("On CPU, bf16 is **emulated** (operands of every Linear and attention rounded to bf16, fp32 GEMMs; CPUs "
            "without bf16 units run real bf16 GEMMs ~50x slower than fp32), and FP8 runs are FP8 linears inside that "
            "emulated bf16. So CPU tokens/s show the cost of emulation, not FP8 speed, and no FP8 bound or target "
            "applies. CPU memory is the activations autograd saved for backward (no allocator counters on CPU); the "
            "emulation's own rounded copies inflate bf16's, and the emulated FP8 engine keeps fp32 copies (native "
            "keeps FP8 bytes): a memory comparison that means something needs a GPU run.")


def models(ctx: Context) -> list[str]:
    return [line for key, folders in _ordered(ctx) for line in model_section(ctx, key, folders)]


def model_table(ctx: Context, key: ModelKey, folders: list[Folder]) -> list[str]:
    """The model's one table and the band it is judged against."""
    runs = [r for f in folders for r in summarize(f)]
    gpu = is_gpu(folders[0].steps)
    band = comparison.bf16_band(runs)
    bound = comparison.bound_for(key, ctx.bounds) if gpu else None
    return comparison.table(runs, band, gpu, bound) + band_lines(band, runs)


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
    if key == _primary(ctx)[0]:
        out += ["Its table is at the top of this report.", ""]
    else:
        out += (["CPU: tokens/s and memory measure the emulation, not FP8 (appendix, CPU caveats).", ""]
                if not gpu else []) + model_table(ctx, key, folders)
    if gpu:
        out += ["Targets (issue 23; tokens/s as in the table):", ""] + comparison.targets(key, runs, band, bound)
        out += bound_lines(bound)
    home = ctx.results / folders[0].name
    curves = {(f.name, run): g.sort_values("step") for f in folders for run, g in f.steps.groupby("run")}
    png = plot_loss(runs, curves, band, _plot_path(ctx, home, "loss", key), footer)
    ctx.written.append(png)
    out += [f"![loss curves and final validation loss against the BF16 band]({_rel(png, ctx)})", "",
            "*What to see:* the validation loss of every low-precision run against the grey BF16 band of distinct "
            "seeds, over steps (middle) and at the end (right; hollow: a seed run twice).", ""]
    fp8 = {f.name: f.fp8 for f in folders}
    missing = {id(r): scale_stats.missing_roles(r, fp8[r.folder]) for r in runs if r.fp8}
    png = plot_scales(runs, fp8, missing, _plot_path(ctx, home, "scales", key), footer)
    if png is not None:
        ctx.written.append(png)
        out += [f"![scales]({_rel(png, ctx)})", "",
                "*What to see:* every FP8 tensor's scale over steps, one line per module, colour = role; delayed "
                "scaling starts each at 1 and follows its amax history, current scaling follows each tensor's own "
                "amax. A role a backend does not expose is named in its panel (the appendix says why).", ""]
    bad = [f"{r.name} ({r.folder}) step {s}" for r in runs for s in r.nonfinite]
    out += ["NaN/Inf steps: " + (", ".join(bad) if bad else "none") + ".", ""]
    skipped = comparison.skipped(folders, runs)
    return out + (["Runs a preset asked for that could not run:", ""] + skipped + [""] if skipped else [])


def scales_audit(ctx: Context) -> list[str]:
    """Every role's scale and amax per run, or why it was not recorded (the appendix)."""
    out = []
    for key, folders in _ordered(ctx):
        runs = [r for f in folders for r in summarize(f)]
        rows = scale_stats.table(runs, {f.name: f for f in folders})
        out += [f"**{key.hardware}, d_model {key.d_model}:**", ""] + rows if rows else []
    return out or ["No FP8 run recorded a per-tensor scale."]


def cpu_caveats(ctx: Context) -> list[str]:
    return [CPU_NOTE] if any(not is_gpu(fs[0].steps) for fs in ctx.models.values()) else ["No CPU comparison here."]


def _ordered(ctx: Context) -> list[tuple[ModelKey, list[Folder]]]:
    return sorted(ctx.models.items(), key=lambda kv: (not is_gpu(kv[1][0].steps), kv[0].hardware, kv[0].d_model))


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
    return [" ".join(out), ""]  # each run against its own seed's BF16 run: the story section (story.py)


def bound_lines(b: pd.Series | None) -> list[str]:
    if b is None:
        return ["FP8 bound: not measured for this model (no bound.csv row of its shape and GPU).", ""]
    return [f"FP8 bound (bound.csv): BF16 step {b['bf16_step_ms']:.1f} ms, of which GEMMs {b['bf16_gemm_ms']:.1f} ms "
            f"({b['gemm_share']:.0%}); the same GEMMs in FP8 {b['fp8_gemm_ms']:.1f} ms; so FP8 GEMMs alone can make "
            f"the step at most {b['bound_speedup']:.2f}x faster.", ""]


def benchmarks(ctx: Context) -> list[str]:
    out = []
    for d in ctx.dirs:
        lines = bench_report.section(d, lambda p: _rel(p, ctx), ctx.written)
        out += [f"### `{d.name}`", ""] + lines if lines else []
    return out or ["No benchmark results (`make fp8-train-bench`)."]


def health(ctx: Context) -> list[str]:
    return [line for d in ctx.dirs for line in health_report.section(d, ctx.root)]


def planner(ctx: Context) -> list[str]:
    """The planner's prediction beside every GPU row (planner.vs_measured: one pricing function for all labs)."""
    return [vs_measured.section("fp8-train", ctx.results, "###")]


SECTIONS: dict[str, Callable[[Context], list[str]]] = {
    "findings": _findings, "answer": answer, "story": story_section, "provenance": provenance, "models": models,
    "benchmarks": benchmarks, "planner": planner, "health": health, "scales_audit": scales_audit,
    "cpu_caveats": cpu_caveats}


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
def main(argv: list[str] | None = None, description: str | None = None) -> int:
    args = parse_config(ReportConfig, argv, description=description, prog="report.py")
    results = results_folder(args.results, "run `make fp8-train-run`")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise BadResults(f"--out {out}: the folder {out.parent} does not exist")
    ctx = load(results, out.parent)
    text = (HERE / "report_template.md").read_text()
    for name, section in SECTIONS.items():
        text = text.replace("{{" + name + "}}", "\n".join(section(ctx)).rstrip())
    _remove_stale(ctx)
    out.write_text(text.rstrip() + "\n")
    print(f"wrote {out.name} ({len(ctx.dirs)} result folders, {len(ctx.models)} models)")
    return 0

