"""The guide's answer, first: what the planner recommends where (from its decision matrix), how far to trust it
(published runs and this repository's own GPU rows), the worked scenarios, and the projected-MFU plot with the
published runs overlaid. Wording: guide_answer_template.md, picked by what the plans and CSVs show
(common.findings); guide.py renders these as the guide's {{guide_findings}}, {{scenarios}} and {{mfu_plot}}, and
draws the plot (rendering itself writes no file).

    findings_block()      # the guide's first lines (<= 8)
    scenarios()           # 7B/8, 70B/64 over 8 nodes at 400 Gb/s, 405B/1024, 1T/4096, each answered
    draw_mfu(plot_path(guide)); mfu_caption(link)   # planner/results/mfu_vs_gpus.png and its caption

Every number is a cost-model projection except the published runs (cited in published.py) and this repository's
GPU rows (own_runs.py reads them from the labs' CSVs now).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from common.findings import Finding, Sentences, block, listing
from common.hardware import get_preset
from common.plotting import new_figure, save
from planner.evidence import explain_rows, own_runs, published, unexplained
from planner.evidence.prose import prose

from . import experiments
from .experiments import degrees, plan, shape_of

HERE = Path(__file__).resolve().parent
S = Sentences(HERE / "guide_answer_template.md")
RESULTS = HERE.parent / "results"  # the planner's results/
SCENARIOS = (("7B", 8, None, "scenario.one_node"), ("70B", 64, 400, "scenario.nodes"),
             ("405B", 1024, None, "scenario.plain"), ("1T", 4096, None, "scenario.plain"))


def regime(c: dict) -> str:
    """The kind of layout a plan is, in a learner's words (degrees and stages are listed per span)."""
    if c.pp > 1:
        return "TP x PP"
    return "TP with ZeRO data parallelism" if c.tp > 1 else f"ZeRO-{c.zero} data parallelism alone"


def _range(values: list[int], name: str) -> str:
    lo, hi = min(values), max(values)
    return f"{name} {lo}" if lo == hi else f"{name} {lo}-{hi}"


def model_line(model: str, counts: tuple[int, ...]) -> str:
    """'8B: ZeRO-3 data parallelism alone on 8-64 GPUs, TP with ZeRO data parallelism (TP 4-8, ZeRO-2) on
    512-4,096' from the matrix's plans; GPU counts where nothing fits are left out."""
    spans: list[tuple[str, list[int], list[dict]]] = []
    for gpus in counts:
        c = plan(model, gpus).best
        if c is None:
            continue
        if spans and spans[-1][0] == regime(c):
            spans[-1][1].append(gpus)
            spans[-1][2].append(c)
        else:
            spans.append((regime(c), [gpus], [c]))
    parts = []
    for what, gpus, plans in spans:
        detail = [] if what.endswith("alone") else [_range([c.tp for c in plans], "TP")]
        detail += [_range([c.pp for c in plans], "PP")] if what == "TP x PP" else []
        if not what.endswith("alone"):
            detail += ["ZeRO-" + "/".join(str(z) for z in sorted({c.zero for c in plans}))]
        at = f"{gpus[0]:,}" + (f"-{gpus[-1]:,}" if len(gpus) > 1 else "")
        parts.append(f"{what}" + (f" ({', '.join(detail)})" if detail else "") + f" on {at} GPUs")
    return f"{model}: " + listing(parts)


def spelled(c: dict) -> str:
    """TP·PP·DP(·CP) = 1·1·8, ZeRO-3, micro-batch 2 x 16, no recompute."""
    v = f", {c.interleave} interleaved chunks" if c.interleave > 1 else ""
    rec = "no recompute" if c.recompute == "none" else f"{c.recompute} recompute"
    head = "TP·PP·DP·CP" if c.cp > 1 else "TP·PP·DP"
    return (f"{head} = {degrees(c)}, ZeRO-{c.zero}, micro-batch {c.microbatch} x {c.num_microbatches}{v}, "
            f"{rec}")


def own_rows() -> tuple[int, float | None, int]:
    """This repository's GPU rows: (rows counted, their median |error|, rows superseded by a later commit)."""
    runs = [r for r in own_runs.all_runs() if r.kind != "collective"]
    if not runs:
        return 0, None, 0
    rows = explain_rows.compare(runs, explain_rows.measured_calibration())
    claimed = [c.error for c in rows if c.error is not None and not unexplained.outside(c.run)]
    return len(claimed), statistics.median(abs(e) for e in claimed) if claimed else None, len(rows) - len(claimed)


def accuracy_sentence() -> str:
    held = [r["error"] for r in published.compare() if r["role"] == "held-out" and r["error"] is not None]
    n, med, outside = own_rows()
    text = S("accuracy.published", n=len(held), median=statistics.median(abs(e) for e in held), lo=min(held),
             hi=max(held))
    if n:
        return text + " " + S("accuracy.own", n=n, median=med, outside=outside)
    return text + " " + S("accuracy.no_own")


def findings() -> list[Finding]:
    ctx = experiments.CONTEXT
    gpu = get_preset(ctx.gpu).label
    counts = (8, 64, 512, 4096)
    lines = [model_line(m, counts) for m in ("8B", "70B", "405B", "1T")]
    mfus = [c.mfu for m in ("1B", "8B", "70B", "405B", "1T") for g in counts if (c := plan(m, g).best)]
    return [Finding("Question", S("question")),
            Finding("Answer", S("answer", gpu=gpu, lines="; ".join(lines), lo=min(mfus), hi=max(mfus))),
            Finding("How far to trust it", accuracy_sentence()),
            Finding("What it means", S("meaning")),
            Finding("Not measured yet", S("missing"))]


def findings_block() -> str:
    return "\n".join(block(findings())).rstrip()


def _why(c: dict, model: str, gpus: int, net: float | None) -> str:
    if c.cp > 1:
        alt = plan(model, gpus, net=net, pins=experiments.Pins(cp=1)).best
        text = S("why.cp", cp=c.cp, pp=c.pp, tp=c.tp, m=c.num_microbatches, v=c.interleave,
                 bubble=c.bubble_fraction)
        return text + (" " + S("why.cp_alt", alt=spelled(alt), x=alt.step_s / c.step_s - 1) if alt else "")
    if c.pp > 1:
        return S("why.pp", pp=c.pp, tp=c.tp, v=c.interleave, bubble=c.bubble_fraction)
    if c.tp > 1:
        return S("why.tp", tp=c.tp, zero=c.zero, dp=c.dp)
    return S("why.dp", dp=c.dp, zero=c.zero, params=shape_of(model).params / 1e9)


def _ties(res) -> str:
    ties = sorted(res.near_ties, key=lambda t: -t.vs_fastest)
    if not ties:
        return S("ties.none")
    fastest = ties[0]
    faster = -res.best.vs_fastest
    if faster > 0:
        return S("ties.rule", n=len(ties), alt=degrees(fastest), x=faster)
    return S("ties.some", n=len(ties), alt=degrees(fastest), x=fastest.vs_fastest)


def scenario(model: str, gpus: int, net: float | None, key: str) -> str:
    res = plan(model, gpus, net=net)
    c = res.best
    net_arg = f" --inter-node-gbps {net:g}" if net else ""
    cmd = f'`make plan ARGS="--params {model} --gpus {gpus}{net_arg}"`'
    nodes = gpus // experiments.cluster_for(experiments.CONTEXT.gpu, gpus).domain
    if c is None:
        return S("scenario.no_fit", model=model, gpus=gpus, cmd=cmd)
    return S(key, model=model, gpus=gpus, nodes=nodes, net=net or 0, layout=spelled(c),
             mem=c.memory_gb.total, mfu=c.mfu, tps=c.tokens_per_s_per_gpu, step=c.step_s,
             tokens=c.global_batch * experiments.SEQ, why=_why(c, model, gpus, net), ties=_ties(res), cmd=cmd,
             params=shape_of(model).params / 1e9)


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


def draw_mfu(path: Path) -> Path:
    """Projected MFU against GPU count per model (the matrix's plans), published H100 runs overlaid."""
    fig, ax = new_figure(figsize=(7.5, 4.8))
    counts = (8, 64, 512, 1024, 4096, 16384)
    colours = {}
    for model in ("1B", "8B", "70B", "405B", "1T"):
        pts = [(g, c.mfu * 100) for g in counts if (c := plan(model, g).best)]
        line, = ax.plot([g for g, _ in pts], [m for _, m in pts], "-o", ms=4, label=f"{model}: planner")
        colours[model] = line.get_color()
    for r in published.compare():
        if not r["gpu"].startswith("h100") or r["config"] is None or r["error"] is None:
            continue
        planned = r["config"].mfu * 100  # the planner's projection of the same run, under its own setup
        measured = planned / (1 + r["error"])  # the published rate in the planner's MFU convention
        size = next((m for m in ("405B", "70B") if m in r["name"]), "8B")
        ax.plot([r["gpus"]] * 2, [measured, planned], color=colours[size], lw=0.8, alpha=0.7)
        ax.plot(r["gpus"], planned, "o", ms=6, mfc="white", color=colours[size])
        ax.plot(r["gpus"], measured, "*", ms=11, color=colours[size], mec="black", mew=0.5)
    ax.plot([], [], "*", ms=11, color="white", mec="black", label="published run (colour: nearest model)")
    ax.plot([], [], "o", ms=6, mfc="white", color="0.3", label="planner, same run and setup")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    ax.set(xlabel="GPUs", ylabel="MFU (% of the dense bf16 peak)", ylim=(0, 70),
           title=f"PROJECTION: the planner's best plan per model on {get_preset(experiments.CONTEXT.gpu).label}")
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    return save(fig, path, "PROJECTION (planner cost model; stars: published runs, published.py, converted to the same "
                           "MFU convention: 6N + 12·L·h·s FLOPs per token over the dense bf16 peak)")
