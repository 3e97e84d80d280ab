"""REPORT.md's sections, one function per {{name}} of report_template.md, over every results folder at once.

    load            every result file checked first (tables.py: one line, exit 2), then grouped: the folders with
                    a steps.csv by model identity (comparison.py), the folders with injected faults apart (a
                    health demo, health_report.py), every folder's bound.csv and events.csv; each model's facts
                    (evidence.py)
    SECTIONS        the opening, the answer's plot, one model_template.md per model (H100, H200, CPU alike), the
                    benchmarks, health, the appendix: each returns its lines, drawing its plots beside its CSVs
    main            common.findings.fill of the skeleton; PNGs no section draws any more removed

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
from common.findings import block, fill, listing
from common.plotting import describe_runs
from precision import backends
from reporting import bench_report, comparison, evidence, findings, health_report, scale_stats
from reporting.comparison import Folder, ModelKey, is_gpu, model_key, summarize
from reporting.findings import S, short_gpu, then
from reporting.plots import plot_answer, plot_loss, plot_scales, plot_underflow
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
    models: dict[ModelKey, list[Folder]]  # comparison folders (no injected faults) by model, GPU first
    bounds: pd.DataFrame | None  # every folder's bound.csv rows
    written: list[Path]  # plots written this time
    events: dict[str, pd.DataFrame | None]  # every folder's events.csv
    facts: dict[ModelKey, evidence.Facts]  # per model: what the sentences are picked by

    def rel(self, p: Path) -> str:
        return os.path.relpath(p, self.root)

    def plot_path(self, key: ModelKey, name: str) -> Path:
        """<the model's first folder>/<name>.png; a second model homed in the same folder gets its shape in the name."""
        path = self.results / self.models[key][0].name / f"{name}.png"
        return path if path not in self.written else path.with_name(f"{name}_d{key.d_model}_l{key.n_layers}.png")

    def footer(self, key: ModelKey) -> str:
        steps = pd.concat([f.steps for f in self.models[key]], ignore_index=True)
        return describe_runs(steps, {"model": f"d{key.d_model}-L{key.n_layers}",
                                     "tokens/step": key.batch * key.seq_len})


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
        if (steps := _read(d / "steps.csv")) is not None:
            saved = d / "steps.config.json"
            cfg = read_json(saved, "the config saved beside steps.csv", CONFIG_KINDS) if saved.exists() else {}
            folders[d.name] = Folder(d.name, steps, cfg, _read(d / "fp8.csv"))
    if not folders:
        raise BadResults("no result folder with a steps.csv in the results folder; run `make fp8-train-run`")
    models: dict[ModelKey, list[Folder]] = {}
    for f in folders.values():
        if not health_report.has_faults(f.steps):
            models.setdefault(model_key(f.steps, f.config), []).append(f)
    models = dict(sorted(models.items(), key=lambda kv: (not is_gpu(kv[1][0].steps), kv[0].hardware, kv[0].d_model)))
    bound = [b for d in dirs if (b := _read(d / "bound.csv")) is not None and len(b)]
    ctx = Context(results, root, dirs, folders, models, pd.concat(bound, ignore_index=True) if bound else None, [],
                  {d.name: _read(d / "events.csv") for d in dirs}, {})
    ctx.facts.update({key: model_facts(ctx, key) for key in models})
    return ctx


def _bound(ctx: Context, key: ModelKey) -> pd.Series | None:
    return comparison.bound_for(key, ctx.bounds) if is_gpu(ctx.models[key][0].steps) else None


def model_facts(ctx: Context, key: ModelKey) -> evidence.Facts:
    folders = ctx.models[key]
    runs = [r for f in folders for r in summarize(f)]
    curves = {(f.name, run): g.sort_values("step") for f in folders for run, g in f.steps.groupby("run")}
    bound = _bound(ctx, key)
    return evidence.model_facts(key, runs, comparison.bf16_band(runs), is_gpu(folders[0].steps), curves,
                                {f.name: f.fp8 for f in folders}, {f.name: ctx.events.get(f.name) for f in folders},
                                {f.name: f.config for f in folders},
                                None if bound is None else float(bound["bound_speedup"]))


def _picture(ctx: Context, png: Path | None, alt: str, caption: str) -> list[str]:
    if png is None:
        return []
    ctx.written.append(png)
    return [f"![{alt}]({ctx.rel(png)})", "", caption, ""]


# ---- sections ---------------------------------------------------------------------------------------------------

def opening(ctx: Context) -> list[str]:
    missing = [key for key in ctx.models if is_gpu(ctx.models[key][0].steps) and _bound(ctx, key) is None]
    multi = any(key.world_size > 1 for key, f in ctx.facts.items() if f.gpu)
    return block(findings.opening(list(ctx.facts.values()), missing, multi), one_screen=True)


def answer(ctx: Context) -> list[str]:
    """The plot that carries the answer, for the answer's model."""
    f = findings.primary(list(ctx.facts.values()))
    png = plot_answer(f, ctx.plot_path(f.key, "answer"), ctx.footer(f.key))
    return _picture(ctx, png, "the answer: loss gap over training, speed and memory", findings.caption_answer(f))


def model_section(ctx: Context, key: ModelKey) -> str:
    f, folders = ctx.facts[key], ctx.models[key]
    steps = pd.concat([x.steps for x in folders], ignore_index=True)
    joined = lambda col: "/".join(sorted({str(v) for v in steps[col].dropna()})) if col in steps else "?"  # noqa: E731
    bound = _bound(ctx, key)
    fp8 = {x.name: x.fp8 for x in folders}
    shown = findings.shown_runs(f)
    missing = {id(r): scale_stats.missing_roles(r, fp8[r.folder]) for r in shown}
    curves = {(x.name, run): g.sort_values("step") for x in folders for run, g in x.steps.groupby("run")}
    plots = _picture(ctx, plot_loss(f, curves, ctx.plot_path(key, "loss"), ctx.footer(key)),
                     "loss curves and final validation loss", findings.caption_loss(f))
    plots += _picture(ctx, plot_scales(shown, fp8, missing, ctx.plot_path(key, "scales"), ctx.footer(key)),
                      "FP8 scales over steps", findings.caption_scales(f, shown, any(missing.values())))
    plots += _picture(ctx, plot_underflow(f, ctx.plot_path(key, "underflow"), ctx.footer(key)),
                      "underflow per role over steps", findings.caption_underflow(f) if len(f.underflow) else "")
    skipped = comparison.skipped(folders, f.runs)
    notes = [findings.damaged_sentence(f), "", S("nan", steps=listing(f.nonfinite)) if f.nonfinite else "", "",
             S("skipped", runs="; ".join(skipped)) if skipped else ""]
    return fill(HERE / "model_template.md",
                title=S("model.title", gpu=short_gpu(key.hardware), d=key.d_model, layers=key.n_layers,
                        ws=key.world_size),
                about=S("model.about", model=key.describe(), data=folders[0].config.get("data", key.data),
                        folders=", ".join(f"`{x.name}`" for x in folders), torch=joined("torch_version"),
                        commit=joined("git_commit")) + ("" if f.gpu else "\n\n" + S("model.cpu")),
                table=comparison.table(f.runs, f.band, f.gpu, bound),
                loss=findings.loss_paragraph(f), early=findings.early_paragraph(f),
                memory=findings.memory_sentence(f),
                targets=comparison.targets(key, f.runs, bound, {evidence.ident(r): None if f.noise is None else
                                                                 not f.beyond(float(f.gap(r).iloc[-1]))
                                                                 for r in f.low()}) if f.gpu else [],
                bound=("" if not f.gpu or bound is None else S(
                    "bound", step=bound["bf16_step_ms"], gemm=bound["bf16_gemm_ms"], share=bound["gemm_share"],
                    fp8=bound["fp8_gemm_ms"], b=bound["bound_speedup"])),
                plots=plots, underflow=findings.underflow_paragraph(f), notes=[n for n in notes if n is not None])


def models(ctx: Context) -> list[str]:
    return [model_section(ctx, key) for key in ctx.models]


def benchmarks(ctx: Context) -> list[str]:
    out = []
    for d in ctx.dirs:
        lines = bench_report.section(d, ctx.rel, ctx.written)
        out += [f"### `{d.name}`", ""] + lines if lines else []
    return out or [S("bench.none")]


def health(ctx: Context) -> list[str]:
    return health_report.section(ctx.dirs, ctx.root, list(ctx.facts.values()))


def provenance(ctx: Context) -> list[str]:
    gpu = [f"`{f.name}`" for f in ctx.folders.values() if is_gpu(f.steps)]
    ran = {be.package for b in {b for f in ctx.folders.values() for b in f.steps["precision_backend"]}
           if (be := backends.lookup(b)) is not None}
    unused = [name for package, name in backends.libraries() if package not in ran]
    return [S("provenance", models=len(ctx.models), folders=", ".join(f"`{d.name}`" for d in ctx.dirs),
              gpu=", ".join(gpu) if gpu else S("provenance.no_gpu"),
              unused=then("provenance.unused", names=" and ".join(unused)) if unused else "")]


def scales_audit(ctx: Context) -> list[str]:
    """Every FP8 run's scales and amaxes, or why a cell was not recorded (the appendix): one table for all models."""
    damaged = {k: S("damaged.cell", what=findings.damage_words(v)) for f in ctx.facts.values()
               for k, v in f.damaged.items()}
    rows = scale_stats.table([r for f in ctx.facts.values() for r in f.runs], ctx.folders, damaged)
    return [S("scales.lead"), ""] + rows if rows else [S("scales.none")]


SECTIONS: dict[str, Callable[[Context], list[str]]] = {
    "findings": opening, "answer": answer, "models": models, "benchmarks": benchmarks, "health": health,
    "provenance": provenance, "scales_audit": scales_audit,
    "predicted": lambda ctx: [S("predicted")]}


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
    text = fill(HERE / "report_template.md", **{name: section(ctx) for name, section in SECTIONS.items()})
    _remove_stale(ctx)
    out.write_text(text)
    print(f"wrote {out.name} ({len(ctx.dirs)} result folders, {len(ctx.models)} models)")
    return 0
