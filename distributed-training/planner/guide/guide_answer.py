"""The guide's answer, first: what the planner recommends where (from its decision matrix), how far to trust it
(published runs and this repository's own GPU rows), the worked scenarios, and the projected-MFU plot with the
published runs overlaid. Wording: guide_answer_template.md, picked by what the plans and CSVs show
(common.findings); guide.py renders these as the guide's {{guide_findings}}, {{scenarios}} and {{mfu_plot}}, and
draws the plot (rendering itself writes no file).

    findings_block()      # the guide's first lines (<= 8)
    scenarios()           # 7B/8, 70B/64 over 8 nodes at 400 Gb/s, 405B/1024, 1T/4096, each answered with
                          # the stack `make plan` prices by default (PyTorch), as its "Check it" command prints
    draw_mfu(plot_path(guide)); mfu_caption(link)   # planner/results/mfu_vs_gpus.png and its caption

Every number is a cost-model projection except the published runs (cited in published.py) and this repository's
GPU rows (own_runs.py reads them from the labs' CSVs now).
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import NamedTuple

from common.findings import Finding, Sentences, block
from common.hardware import get_preset
from common.plotting import new_figure, save
from planner.evidence import explain_rows, own_runs, published
from planner.evidence.prose import prose
from planner.model.shapes import named
from planner.model.stacks import PYTORCH

from . import experiments
from .experiments import degrees, plan, shape_of

HERE = Path(__file__).resolve().parent
S = Sentences(HERE / "guide_answer_template.md")
RESULTS = HERE.parent / "results"  # the planner's results/
SCENARIOS = (("7B", 8, None, "scenario.one_node"), ("70B", 64, 400, "scenario.nodes"),
             ("405B", 1024, None, "scenario.plain"), ("1T", 4096, None, "scenario.plain"))
ANSWER = PYTORCH  # the stack `make plan` prices by default: the guide's answer, scenarios, first matrix and plot
ANSWER_MODELS = ("8B", "70B", "405B")  # the opening's models (the matrix adds 1B and 1T)
MATRIX_MODELS = ("1B", "8B", "70B", "405B", "1T")


def regime(c) -> str:
    """The kind of layout a plan is, in a learner's shorthand (degrees are listed per span)."""
    if c.pp > 1:
        return "TP x PP"
    if c.tp > 1:
        return "TP + ZeRO"
    return "DDP" if c.zero == 0 else f"ZeRO-{c.zero} alone"


def _range(values: list[int], name: str, joiner: str = " ") -> str:
    lo, hi = min(values), max(values)
    return f"{name}{joiner}{lo}" if lo == hi else f"{name}{joiner}{lo}-{hi}"


def model_line(model: str, counts: tuple[int, ...]) -> str:
    """'8B: ZeRO-3 alone on 8-64 GPUs, TP 2 + ZeRO-2 on 512, TP 4 x PP 4 on 4,096' from the plans of `make plan`'s
    stack; GPU counts where nothing fits are left out."""
    spans: list[tuple[str, list[int], list]] = []
    for gpus in counts:
        c = plan(model, gpus, stack=ANSWER).best
        if c is None:
            continue
        if spans and spans[-1][0] == regime(c):
            spans[-1][1].append(gpus)
            spans[-1][2].append(c)
        else:
            spans.append((regime(c), [gpus], [c]))
    parts = []
    for i, (what, gpus, plans) in enumerate(spans):
        zero = "ZeRO-" + "/".join(str(z) for z in sorted({c.zero for c in plans}))
        if what == "TP x PP":
            label = f"{_range([c.tp for c in plans], 'TP')} x {_range([c.pp for c in plans], 'PP')}"
        elif what == "TP + ZeRO":
            label = f"{_range([c.tp for c in plans], 'TP')} + {zero}"
        else:
            label = what
        at = f"{gpus[0]:,}" + (f"-{gpus[-1]:,}" if len(gpus) > 1 else "")
        parts.append(f"{label} on {at}" + (" GPUs" if i == 0 else ""))
    return f"{model}: " + ", ".join(parts)


def spelled(c) -> str:
    """TP·PP·DP(·CP) = 1·1·8, ZeRO-3, micro-batch 2 x 16, no recompute."""
    v = f", {c.interleave} interleaved chunks" if c.interleave > 1 else ""
    rec = {"none": "no recompute", "op": "per-op recompute", "full": "full recompute"}.get(c.recompute,
                                                                                            f"{c.recompute} recompute")
    head = "TP·PP·DP·CP" if c.cp > 1 else "TP·PP·DP"
    zero = "DDP (ZeRO-0)" if c.zero == 0 else f"ZeRO-{c.zero}"
    return f"{head} = {degrees(c)}, {zero}, micro-batch {c.microbatch} x {c.num_microbatches}{v}, {rec}"


class Lean(NamedTuple):
    """Which way a set of signed throughput errors leans: + means projected faster than measured."""
    n: int
    slower: int  # runs measured slower than projected (error > 0)
    median: float
    lo: float
    hi: float

    @property
    def key(self) -> str:
        """optimistic when most runs are slower than projected and the signed median agrees; pessimistic the other
        way; even otherwise (the accuracy sentence's predicate)."""
        if self.slower * 2 > self.n and self.median > 0:
            return "optimistic"
        if (self.n - self.slower) * 2 > self.n and self.median < 0:
            return "pessimistic"
        return "even"


def lean(errors: list[float]) -> Lean:
    return Lean(len(errors), sum(e > 0 for e in errors), statistics.median(errors), min(errors), max(errors))


def held_out_errors() -> list[float]:
    """The signed throughput error of every held-out published run (published.compare)."""
    return [r["error"] for r in published.compare() if r["role"] == "held-out" and r["error"] is not None]


def own_errors() -> list[float]:
    """The signed error of every GPU row of this repository the model prices (training steps, blocks, GEMMs; every
    row counts: explain_rows.compare)."""
    runs = [r for r in own_runs.all_runs() if r.kind != "collective"]
    if not runs:
        return []
    return [c.error for c in explain_rows.compare(runs, explain_rows.measured_calibration()) if c.error is not None]


def bias_sentence() -> str:
    """The guide's body: the held-out error told as a lean, not a band (the same predicate as the opening's)."""
    held = lean(held_out_errors())
    return S(f"bias.{held.key}", k=held.slower if held.key != "pessimistic" else held.n - held.slower, n=held.n,
             median=held.median, lo=held.lo, hi=held.hi)


def accuracy_sentence() -> str:
    held = lean(held_out_errors())
    text = S(f"accuracy.{held.key}", k=held.slower if held.key != "pessimistic" else held.n - held.slower,
             n=held.n, median=held.median, lo=held.lo, hi=held.hi)
    own = own_errors()
    if not own:
        return text + " " + S("accuracy.no_own")
    mine = lean(own)
    return text + " " + S("accuracy.own", n=mine.n, median=mine.median, lo=mine.lo, hi=mine.hi)


GLOSSARY = "../docs/glossary.md"  # from distributed-training/, where the guide lies


def linked(text: str) -> str:
    """The first TP, PP and ZeRO of `text` linked to their glossary entries (a link renders as its text)."""
    for term, anchor in (("ZeRO", "zero"), ("TP", "tp"), ("PP", "pp")):
        text = re.sub(rf"\b{term}\b", f"[{term}]({GLOSSARY}#{anchor})", text, count=1)
    return text


def findings() -> list[Finding]:
    gpu = get_preset(experiments.CONTEXT.gpu).label
    counts = (8, 64, 512, 4096)
    lines = [model_line(m, counts) for m in ANSWER_MODELS]
    plans = [(c.mfu, m, g) for m in MATRIX_MODELS for g in counts if (c := plan(m, g, stack=ANSWER).best)]
    (lo, lo_m, lo_g), (hi, hi_m, hi_g) = min(plans), max(plans)
    answer = S("answer", gpu=gpu, lines=linked("; ".join(lines)), lo=lo, lo_at=f"{lo_m}, {lo_g:,} GPUs", hi=hi,
               hi_at=f"{hi_m}, {hi_g:,}")
    return [Finding("Answer", answer),
            Finding("How far to trust it", accuracy_sentence()),
            Finding("What it means", S("meaning")),
            Finding("Not measured yet", S("missing"))]


def findings_block() -> str:
    return "\n".join(block(findings(), one_screen=True)).rstrip()


def _hidden(c) -> str:
    """Whether the plan's data-parallel traffic hides behind compute (a predicate over its own terms)."""
    exposed = c.dp_comm_s - c.dp_hidden_s
    if c.dp_comm_s == 0 or exposed <= 0.01 * c.step_s:
        return S("hidden.all")
    return S("hidden.part", exposed=exposed / c.dp_comm_s, exposed_s=exposed)


def _why(c, model: str, gpus: int, net: float | None) -> str:
    if c.cp > 1:
        alt = plan(model, gpus, net=net, pins=experiments.Pins(cp=1), stack=ANSWER).best
        text = S("why.cp", cp=c.cp, pp=c.pp, tp=c.tp, m=c.num_microbatches, v=c.interleave,
                 bubble=c.bubble_fraction)
        return text + (" " + S("why.cp_alt", alt=spelled(alt), x=alt.step_s / c.step_s - 1) if alt else "")
    if c.pp > 1:
        flat = plan(model, gpus, net=net, pins=experiments.Pins(pp=1), stack=ANSWER).best
        if flat is None:
            return S("why.pp", pp=c.pp, tp=c.tp, v=c.interleave, bubble=c.bubble_fraction)
        return S("why.pp_faster", pp=c.pp, tp=c.tp, v=c.interleave, bubble=c.bubble_fraction, alt=spelled(flat),
                 x=c.tokens_per_s / flat.tokens_per_s - 1)
    if c.tp > 1:
        return S("why.tp", tp=c.tp, zero=c.zero, dp=c.dp, hidden=_hidden(c))
    params = shape_of(model).params / 1e9
    if c.zero < 2:
        return S("why.ddp", zero1=" + ZeroRedundancyOptimizer (ZeRO-1)" if c.zero else "", params=params, dp=c.dp)
    return S("why.dp", dp=c.dp, zero=c.zero, params=params, hidden=_hidden(c))


def _ties(res) -> str:
    ties = sorted(res.near_ties, key=lambda t: -t.vs_fastest)
    if not ties:
        return S("ties.none")
    fastest = ties[0]
    faster = -res.best.vs_fastest
    others = "1 other plan lies" if len(ties) == 1 else f"{len(ties)} other plans lie"
    if faster > 0:
        return S("ties.rule", others=others, alt=degrees(fastest), x=faster)
    return S("ties.some", others=others, alt=degrees(fastest), x=fastest.vs_fastest)


def command(model: str, gpus: int, net: float | None) -> str:
    """The scenario's "Check it" command: `make plan` with no flag but the scenario's, so it prices `make plan`'s
    default stack, as the scenario does."""
    net_arg = f" --inter-node-gbps {net:g}" if net else ""
    return f'make plan ARGS="--params {model} --gpus {gpus}{net_arg}"'


def scenario(model: str, gpus: int, net: float | None, key: str) -> str:
    res = plan(model, gpus, net=net, stack=ANSWER)
    c = res.best
    cmd = f"`{command(model, gpus, net)}`"
    nodes = gpus // experiments.cluster_for(experiments.CONTEXT.gpu, gpus).domain
    if c is None:
        return S("scenario.no_fit", model=model, gpus=gpus, cmd=cmd)
    return S(key, model=model, gpus=gpus, nodes=nodes, net=net or 0, layout=spelled(c),
             mem=c.memory_gb.total, mfu=c.mfu, tps=c.tokens_per_s_per_gpu, step=c.step_s,
             tokens=c.global_batch * experiments.SEQ, why=_why(c, model, gpus, net), ties=_ties(res), cmd=cmd)


def scenarios() -> str:
    return "\n\n".join(prose(scenario(*s)) for s in SCENARIOS)


def plot_path(guide: Path) -> Path:
    """Where a guide's MFU plot goes: planner/results/ for the committed guide (its GPU in the name when
    calibrated), beside the guide anywhere else."""
    if guide.parent.resolve() == HERE.parents[1].resolve():  # the committed guide's folder
        ctx = experiments.CONTEXT
        return RESULTS / (f"mfu_vs_gpus_{ctx.gpu}.png" if ctx.calibrate else "mfu_vs_gpus.png")
    return guide.with_name(f"{guide.stem}_mfu.png")


def mfu_caption(link: str) -> str:
    return f"![projected MFU against GPU count]({link})\n\n" + S("plot.caption")


def model_label(model: str) -> str:
    """'8B (Llama 3.1 8B)' for a named model, '1B (standard shape)' for another."""
    m = named(model)
    return f"{model} ({m.title})" if m else f"{model} (standard shape)"


def draw_mfu(path: Path) -> Path:
    """Projected MFU against GPU count per model (the matrix's plans), published H100 runs overlaid."""
    fig, ax = new_figure(figsize=(7.5, 4.8))
    counts = (8, 64, 512, 1024, 4096, 16384)
    colours = {}
    for model in MATRIX_MODELS:
        pts = [(g, c.mfu * 100) for g in counts if (c := plan(model, g, stack=ANSWER).best)]
        line, = ax.plot([g for g, _ in pts], [m for _, m in pts], "-o", ms=4, label=model_label(model))
        colours[model] = line.get_color()
    sizes = {m: shape_of(m).params for m in MATRIX_MODELS}
    for case, r in zip(published.cases(), published.compare(), strict=True):
        if not r["gpu"].startswith("h100") or r["config"] is None or r["error"] is None:
            continue
        planned = r["config"].mfu * 100  # the planner's projection of the same run, under its own setup
        measured = planned / (1 + r["error"])  # the published rate in the planner's MFU convention
        size = min(sizes, key=lambda m: abs(math.log(sizes[m] / case.shape.params)))  # the nearest model's colour
        ax.plot([r["gpus"]] * 2, [measured, planned], color=colours[size], lw=0.8, alpha=0.7)
        ax.plot(r["gpus"], planned, "o", ms=6, mfc="white", color=colours[size])
        ax.plot(r["gpus"], measured, "*", ms=11, color=colours[size], mec="black", mew=0.5)
    ax.plot([], [], "*", ms=11, color="white", mec="black", label="published run (colour: nearest model)")
    ax.plot([], [], "o", ms=6, mfc="white", color="0.3", label="planner, same run and setup")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    ax.set(xlabel="GPUs", ylabel="MFU (% of the dense bf16 peak)", ylim=(0, 70),
           title=f"PROJECTION: the planner's best plan per model, {ANSWER.name} stack (make plan's), on "
                 f"{get_preset(experiments.CONTEXT.gpu).label}")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    return save(fig, path, "PROJECTION (planner cost model; stars: published runs, published.py, converted to the same "
                           "MFU convention: 6N + 12·L·h·s FLOPs per token over the dense bf16 peak)")
