"""Generate PARALLELISM_GUIDE.md in distributed-training/, the decision guide (guide_template.md: its answer, the
matrix, the recipe as a flowchart, worked scenarios, rules of thumb, what its MFU assumes, calibration), and beside
it PLANNER_VALIDATION.md, the evidence the guide links (validation_template.md: more matrices, one experiment per
rule, the cost model term by term, accuracy against published runs and this repository's GPU rows, the planner
against PyTorch), around tables and sentences the planner computes now.

    make guide                                      # rewrite both in distributed-training/
    PYTHONPATH=distributed-training python -m planner.guide --out guide-draft.md   # elsewhere (+ its _validation.md)
    make guide CALIBRATE=results                    # for your cluster: PARALLELISM_GUIDE_<gpu>.md (calibrate.py)

Deterministic: the same code gives the same bytes (no dates, no machine names, no timings; the cost
model uses only +, -, x, / and exact frexp, so results do not depend on the CPU's math library).
Every number in the guide is a cost-model projection; no GPU was measured to produce it.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from common.collective_cost import collective_time_s, half_bandwidth_bytes
from common.config import parse_config
from common.csvread import BadResults
from common.hardware import get_preset
from planner.calibrate import calibrate
from planner.evidence import accuracy, against_pytorch, kept, own_runs, validation
from planner.evidence.prose import prose, table
from planner.model import stacks
from planner.model.cluster import make_cluster
from planner.model.memory import MEMORY_HEADROOM, usable_bytes
from planner.model.shapes import NAMED, named

from . import experiments, guide_answer, inputs
from .experiments import degrees, no_fit, plan, shape_of

HERE = Path(__file__).resolve().parent  # the templates lie here; the documents two folders up
TEMPLATE = HERE / "guide_template.md"
VALIDATION_TEMPLATE = HERE / "validation_template.md"
OUT = HERE.parents[1] / "PARALLELISM_GUIDE.md"
VALIDATION = "PLANNER_VALIDATION"
DEFAULT_LINKS = {"guide": OUT.name, "validation": f"{VALIDATION}.md", "mfu_plot": "planner/results/mfu_vs_gpus.png"}
LINKS = dict(DEFAULT_LINKS)  # what the documents link: each other by file name, and the MFU plot
MODELS = ("1B", "8B", "70B", "405B", "1T")
GPU_COUNTS = (8, 64, 512, 4096, 16384)
NETWORKS = (100, 200, 400, 800)


def short(res) -> str:
    """One matrix cell: degrees, ZeRO stage (R = full recompute), memory per GPU, MFU; or that nothing fits."""
    c = res.best
    if c is None:
        return "no fit"
    return f"{degrees(c)} Z{c.zero}{' R' if c.recompute == 'full' else ''}, {c.memory_gb.total:.0f} GB, " \
        f"{c.mfu:.0%}"


def near_tie_cell(res) -> str:
    """How many other plans lie within the model's error of the fastest, and the fastest if it was not chosen."""
    if not res.near_ties:
        return "-"
    cell = str(len(res.near_ties))
    fastest = max(res.near_ties, key=lambda t: t.vs_fastest)
    if res.best.vs_fastest < 0:
        cell += f"; fastest {fastest.tp}·{fastest.pp}·{fastest.dp}" \
            + (f"·{fastest.cp}" if fastest.cp > 1 else "") + f" ({-res.best.vs_fastest:.1%} faster)"
    return cell


def model_cell(model: str) -> str:
    """'8B (Llama 3.1 8B, 8.0B)': the size asked, the model it names (or a standard shape) and its exact count."""
    m = named(model)
    return f"{model} ({m.title if m else 'standard shape'}, {shape_of(model).params / 1e9:.1f}B)"


def matrix_rows(stack) -> list[list]:
    rows = []
    for model in MODELS:
        for gpus in GPU_COUNTS:
            res = plan(model, gpus, stack=stack)
            c = res.best
            if c is None:
                rows.append([model_cell(model), gpus, no_fit(res)] + [""] * 7)
                continue
            v = f", v={c.interleave}" if c.interleave > 1 else ""
            rows.append([model_cell(model), gpus, degrees(c), c.zero, f"{c.microbatch} × {c.num_microbatches}{v}",
                         c.recompute, f"{c.memory_gb.total:.0f}", f"{c.bubble_fraction:.0%}", f"{c.mfu:.1%}",
                         near_tie_cell(res)])
    return rows


def matrix_table(stack) -> str:
    return table(["model", "GPUs", "TP·PP·DP(·CP)", "ZeRO", "micro-batch × m", "recompute", "GB/GPU", "bubble",
                  f"MFU ({stack.name} stack)", "near-ties"], matrix_rows(stack))


def matrix_main() -> str:
    """The matrix of `make plan`'s stack (PyTorch): what the guide's answer, scenarios and plot describe."""
    return prose(stack_sentence(guide_answer.ANSWER)) + "\n\n" + matrix_table(guide_answer.ANSWER)


def matrix_shape() -> str:
    """What the main matrix's plans are, counted (a sentence the plans choose, not prose that could drift)."""
    found = [c for m in MODELS for g in GPU_COUNTS if (c := plan(m, g, stack=guide_answer.ANSWER).best)]
    kinds = {"data parallelism alone": sum(c.tp == c.pp == 1 for c in found),
             "TP with ZeRO data parallelism": sum(c.tp > 1 and c.pp == 1 for c in found),
             "TP x PP": sum(c.pp > 1 for c in found)}
    recompute = sum(c.recompute != "none" for c in found)
    zeros = sorted({c.zero for c in found})
    return prose(f"Of the {len(found)} cells that fit, " + ", ".join(f"{n} run {k}" for k, n in kinds.items() if n)
                 + f"; ZeRO stages {'/'.join(map(str, zeros))} appear, and {recompute} cells recompute activations.")


def stack_sentence(stack, practice: bool = True) -> str:
    """What a table is priced for: the stack's memory, collectives and kernels (stacks.py), named."""
    memory = ("Korthikanti's activations with sequence parallelism and ZeRO's accounting" if stack.runner is None
              else "what parallel-3d's at-scale study measures PyTorch holding (evidence, section 5)")
    text = f"Priced for the {stack.name} stack: {stack.title}; its memory is {memory}, and its MFU is that stack's."
    if practice:
        text += (" Published H100 practice for comparison: Megatron-Core's tables 41-48%, torchtitan's Llama 3 8B on 8 "
                 "H100s about 40% (anchors-2026 section 2.4).")
    return text


def matrix_megatron() -> str:
    """The main matrix's questions for the megatron stack: the stack the published runs ran, for comparison."""
    same = 0
    for model in MODELS:
        for gpus in GPU_COUNTS:
            c, other = plan(model, gpus, stack=stacks.MEGATRON).best, plan(model, gpus, stack=guide_answer.ANSWER).best
            same += bool(c and other) and degrees(other) == degrees(c) and other.zero == c.zero
    text = prose(
        stack_sentence(stacks.MEGATRON, practice=False) + f" In {same} of {len(MODELS) * len(GPU_COUNTS)} cells it "
        "is the plan above (degrees and ZeRO stage); elsewhere Megatron-Core's memory (sequence-sharded activations, "
        "fused kernels) or its collectives (TP overlapped with the GEMMs) choose another. `make plan ARGS=\"--params "
        "MODEL --gpus GPUS --stack megatron\"` prints it; this project has no runner for it.")
    return text + "\n\n" + matrix_table(stacks.MEGATRON)


def long_context_commands() -> str:
    """The long-sequence rows of section 3.6 as commands that print a runnable parallel-3d plan (context parallelism
    included), with the plan each prints."""
    out = []
    for model, gpus in (("8B", 64), ("70B", 512)):
        for seq in (65536, 131072):
            res = plan(model, gpus, seq=seq, tokens=2**22, stack=stacks.PYTORCH)
            c = res.best
            cmd = f"make plan ARGS=\"--params {model} --gpus {gpus} --seq {seq} --global-batch {2**22 // seq}\""
            got = f"{degrees(c)} ({experiments.knobs(c)}), {c.memory_gb.total:.0f} GB" if c else no_fit(res)
            out.append(f"- `{cmd}`: {got}")
    return prose("Run them: each command prints the plan for PyTorch's stack and the parallel-3d "
                 "command that runs it, context parallelism included (`--cp`, ring attention):") \
        + "\n\n" + "\n".join(out)


def matrix_notes() -> str:
    """A sentence for every main-matrix cell whose TP group leaves the NVLink domain, with the TP-8 price."""
    notes = []
    for model in MODELS:
        for gpus in GPU_COUNTS:
            c = plan(model, gpus, stack=guide_answer.ANSWER).best
            if c and c.tp > 8:
                alt = plan(model, gpus, pins=experiments.Pins(tp=8), stack=guide_answer.ANSWER).best
                notes.append(f"{model} on {gpus} GPUs: TP {c.tp}, {alt.step_s / c.step_s - 1:.1%} faster "
                             f"than the best TP-8 plan ({degrees(alt)}, {experiments.knobs(alt)})")
    if not notes:
        return "No plan in the table runs TP across nodes."
    return prose(
        "Plans with TP beyond the 8-GPU node: " + "; ".join(notes) + ". The model prices a DGX H100 node's eight "
        "400 Gb/s NICs as carrying a ring all-reduce almost as fast as NVLink (as nccl-tests measures), so a second "
        "node of TP costs little; it does not model NICs shared with DP and PP traffic or network jitter, which is "
        "why practitioners stop TP at the node. Where the margin is this small, prefer TP 8.")


def comm_constants() -> str:
    """The network figures the model uses, and what they give beside the published measurements."""
    h100, a100 = (make_cluster(get_preset(g), 8).net for g in ("h100", "a100"))
    half = {(name, n): float(half_bandwidth_bytes("all_reduce", n, 8, net)) / 2**20
            for name, net in (("A100", a100), ("H100", h100)) for n in (8, 32, 8192)}
    s = 16 * 2**30
    across = s / float(collective_time_s("all_reduce", s, 32, 8, h100)) * 2 * 31 / 32 / 1e9
    return prose(
        f"Across four DGX H100 nodes (8 × 400 Gb/s each) the model's all-reduce reaches {across:.0f} GB/s of "
        f"busbw at 16 GiB, where nccl-tests measures 370-380 GB/s. α_step = {h100.alpha_step_us:g} µs per ring "
        f"step and α_level = {h100.alpha_level_us:g} µs per tree level are effective latencies: they put the size "
        f"at which an all-reduce reaches half its bus bandwidth at {half['A100', 8]:.0f} MiB on 8 A100s, "
        f"{half['H100', 8]:.0f} MiB on 8 H100s, {half['H100', 32]:.0f} MiB on 32 H100s and "
        f"{half['H100', 8192]:.0f} MiB on 8192, where the published curves cross half their peak at about "
        "8 MiB (8 A100s), 16 MiB (8 H200s) and 64-256 MiB (NVIDIA's NVLSTree scan from 32 to 8192 H100s). "
        "Small messages are overpriced: an 8-GPU all-reduce of 32 KiB takes about 44 µs, NCCL's protocol ramp "
        "(LL, LL128, Simple) is what makes medium sizes slower than a straight line through that latency.")


def matrix_network() -> str:
    rows = []
    for model in MODELS:
        for gpus in GPU_COUNTS[1:4]:
            rows.append([model, gpus] + [short(plan(model, gpus, net=net)) for net in NETWORKS])
    return table(["model", "GPUs"] + [f"{n} Gb/s" for n in NETWORKS], rows)


def _no_pp_share(results) -> str:
    found = [r.best for r in results if r.best]
    return f"{sum(c.pp == 1 for c in found)} of {len(found)}"


def matrix_network_note() -> str:
    """How often the plan needs no pipeline, per network speed (the matrix_network cells)."""
    cells = {net: [plan(m, g, net=net) for m in MODELS for g in GPU_COUNTS[1:4]] for net in NETWORKS}
    return prose("Plans without a pipeline, by network: " + ", ".join(
        f"{_no_pp_share(cells[net])} at {net} Gb/s" for net in NETWORKS) + ".")


def matrix_domain_note() -> str:
    """How often the plan needs no pipeline, per NVLink domain (the matrix_domain cells)."""
    doms = {"PCIe only": 1, "8-GPU NVLink": 8, "NVL72": 72}
    cells = {k: [plan(m, g, gpu="gb200", domain=d) for m in MODELS for g in GPU_COUNTS[1:4]] for k, d in doms.items()}
    return prose("Plans without a pipeline, by domain: " + ", ".join(
        f"{_no_pp_share(cells[k])} with {k}" for k in doms) + ".")


def matrix_domain() -> str:
    rows = []
    for model in MODELS:
        for gpus in GPU_COUNTS[1:4]:
            rows.append([model, gpus] + [short(plan(model, gpus, gpu="gb200", domain=d)) for d in (1, 8, 72)])
    return table(["model", "GPUs", "PCIe only", "8-GPU NVLink", "NVL72"], rows)


def planner_vs_pytorch() -> str:
    """parallel-3d's at-scale study, rendered from that lab's CSVs (against_pytorch.py)."""
    return against_pytorch.render()


def _context_cluster():
    """The guide's cluster at one node: the context's GPU, calibrated when the guide is."""
    return experiments.cluster_for(experiments.CONTEXT.gpu, 8)


def usable() -> str:
    """The memory the search lets a plan fill on the guide's GPU, and where the figure comes from."""
    cl = _context_cluster()
    gb = usable_bytes(cl.memory_gb) / 1e9
    return (f"{MEMORY_HEADROOM:.0%} of the {cl.memory_gb:g} GB as CUDA reports it, {gb:.1f} "
            "GB (`--memory-headroom`; `planner/model/memory.py` gives the sources)")


def named_models() -> str:
    """The published models a --params size names (shapes.NAMED): the shape the guide's tables plan, with sources."""
    rows = []
    for size, m in NAMED.items():
        sh = m.shape(experiments.SEQ)
        rows.append([f"`--params {size}`", m.title, sh.layers, sh.hidden, sh.heads, sh.kv_heads,
                     f"{'SwiGLU ' if m.swiglu else ''}{m.ffn:,}", f"{m.vocab:,}", f"{sh.params / 1e9:.2f}B", m.source])
    return table(["size", "model", "layers", "hidden", "heads", "KV heads", "MLP", "vocabulary",
                  "parameters planned", "source"], rows)


def gpu_name() -> str:
    return get_preset(experiments.CONTEXT.gpu).label.split()[0]


def setting() -> str:
    """The opening's "unless a table says otherwise" hardware, from the context's cluster."""
    cl, p = _context_cluster(), get_preset(experiments.CONTEXT.gpu)
    link = "PCIe only" if cl.domain == 1 else \
        f"{cl.domain} GPUs per NVLink domain at {p.nvlink_gbps:g} GB/s per direction"
    text = f"{p.label} (the `{p.name}` row of `common/hardware.py`), {link}, {p.net_gbits:g} Gb/s of network per GPU"
    return text + (" (figures your measurements replaced are listed above)" if experiments.CONTEXT.calibrate else "")


BANNER = ("The tables are regenerated by `make guide` (seconds on one CPU core); the prose around them is "
          "hand-written, except the sentences that quote the planner's numbers, which are generated with the tables "
          "they come from. Other figures in the prose are published ones, cited where they appear. The guide's "
          "section 6 shows how to replace its assumptions with your own measurements.")
DEFAULTS = (("in-domain", "the NVLink bus rate and latency"), ("network rate", "the per-GPU network rate"),
            ("sustained matmul", "the sustained matmul rate"), ("parallel-3d", "the measured step-time factor"))


def gpu_results() -> str:
    """What GPU measurements this repository holds, read from the labs' results folders now."""
    runs = own_runs.all_runs()
    if not runs:
        return "No GPU result exists in this repository yet."
    labs = sorted({r.lab for r in runs})
    gpus = sorted({get_preset(r.gpu).label for r in runs})
    return (f"This repository holds {len(runs)} GPU rows ({', '.join(labs)}; {', '.join(gpus)}): the evidence "
            "document's section 4 puts each beside the planner's prediction for it, and none of them was used to fit "
            "the model.")


def opening() -> str:
    """The guide's first paragraph: a projection, what GPU results exist, and what a calibrated guide measured."""
    text = prose("**Every number in this guide is a cost-model projection made by [`planner/`]"
                 "(planner/README.md), not a measurement.** " + gpu_results() + " " + BANNER)
    parts = ["\n".join("> " + line for line in text.split("\n"))]
    ctx = experiments.CONTEXT
    if ctx.calibrate:
        notes = list(_context_cluster().notes)
        stayed = [what for key, what in DEFAULTS if not any(key in n for n in notes)]
        parts += ["", prose(f"**Calibrated for your cluster** (`make guide CALIBRATE=...`, "
                            f"{len(ctx.calibrate)} file(s)): the matrices and rules below are planned on "
                            f"{get_preset(ctx.gpu).label} with these figures from your measurements:"), ""]
        parts += [f"- {n}" for n in notes]
        parts += ["", prose("Everything else is the hardware table's and calibration.py's: " + ", ".join(
            stayed + ["peak FLOP/s and memory", "HBM efficiency and the per-kernel cost"]) + ".")]
    return "\n".join(parts)


SECTIONS = {"planner_vs_pytorch": planner_vs_pytorch, "comm_constants": comm_constants, "matrix_main": matrix_main,
            "matrix_megatron": matrix_megatron, "matrix_shape": matrix_shape, "named_models": named_models,
            "usable": usable, "bias_sentence": guide_answer.bias_sentence,
            "long_context_commands": long_context_commands,
            "matrix_notes": matrix_notes, "matrix_network": matrix_network,
            "matrix_domain": matrix_domain, "matrix_network_note": matrix_network_note,
            "matrix_domain_note": matrix_domain_note, "opening": opening, "setting": setting, "gpu_name": gpu_name,
            "domain": lambda: str(_context_cluster().domain),
            "guide_findings": guide_answer.findings_block, "scenarios": guide_answer.scenarios,
            "mfu_plot": lambda: guide_answer.mfu_caption(LINKS["mfu_plot"]), "validation_opening": opening,
            "guide_link": lambda: LINKS["guide"], "validation_link": lambda: LINKS["validation"],
            **experiments.SECTIONS, **accuracy.SECTIONS, **validation.SECTIONS}


def render(template: Path = TEMPLATE) -> str:
    """The template with every {{section}} filled; evidence the sections repeat is computed once (kept.py)."""
    text = template.read_text()
    with kept.one_render():
        return re.sub(r"\{\{(\w+)\}\}", lambda m: SECTIONS[m.group(1)]().rstrip(), text)


def validation_path(guide: Path) -> Path:
    """The evidence document beside a guide: PLANNER_VALIDATION[_<gpu>].md, or <name>_validation.md elsewhere."""
    if guide.name.startswith(OUT.stem):
        return guide.with_name(VALIDATION + guide.name[len(OUT.stem):])
    return guide.with_name(f"{guide.stem}_validation.md")


@dataclass(frozen=True)
class GuideConfig:
    out: str | None = field(default=None, metadata={"help": "where to write (default distributed-training/"
                                                             "PARALLELISM_GUIDE.md, PARALLELISM_GUIDE_<gpu>.md when "
                                                             "calibrated)"})
    calibrate: str | None = field(default=None, metadata={
        "help": "plan for your cluster: CSVs the labs measured (allreduce-bench sweeps, fp8-train bench_gemm.csv, "
                "parallel-3d runs), comma-separated paths or globs, or 'results' for every one the labs hold"})
    gpu: str | None = field(default=None, metadata={"help": "GPU preset to plan for (default: the GPU the "
                                                             "calibration rows were measured on, else h100)"})

    def __post_init__(self):
        if self.out and not Path(self.out).parent.is_dir():
            raise ValueError(f"--out {self.out}: the folder {Path(self.out).parent} does not exist")
        if self.gpu is not None:
            get_preset(self.gpu)  # an unknown preset is one line, exit 2

    def context(self) -> experiments.Context:
        """What to plan for; ValueError (exit 2) for files that cannot calibrate."""
        if not self.calibrate:
            return experiments.Context(self.gpu or "h100")
        auto = self.calibrate.strip() == "results"
        paths = calibrate.lab_results() if auto else calibrate.expand(self.calibrate)
        if not paths:
            raise ValueError("--calibrate results: no allreduce-bench sweep, GEMM benchmark or parallel-3d runs CSV in "
                             "the labs' results folders")
        gpu = self.gpu or calibrate.gpu_of(paths) or "h100"
        return experiments.Context(gpu, tuple(paths), strict=not auto)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(GuideConfig, argv, description=__doc__.split("\n\n")[0], prog="guide.py")
    try:
        inputs.check()  # every results file it reads, before anything is written: a damaged one is one line (exit 2)
        ctx = cfg.context()
        experiments.set_context(ctx)
        experiments.cluster_for(ctx.gpu, 8)  # a file that cannot calibrate fails here, before anything is written
    except ValueError as e:
        experiments.set_context(experiments.Context())
        print(f"guide.py: error: {e}", file=sys.stderr)
        return 2
    default = OUT.with_name(f"PARALLELISM_GUIDE_{ctx.gpu}.md") if ctx.calibrate else OUT
    out = Path(cfg.out) if cfg.out else default
    evidence, png = validation_path(out), guide_answer.plot_path(out)
    LINKS.update(guide=out.name, validation=evidence.name, mfu_plot=os.path.relpath(png, out.parent))
    try:
        with kept.one_render():  # the two documents and the plot quote the same evidence: priced once
            text, proof = render(TEMPLATE), render(VALIDATION_TEMPLATE)
            guide_answer.draw_mfu(png)
    except BadResults as e:  # a file inputs.check() does not read: still one line, and no document written
        print(f"guide.py: error: {e}", file=sys.stderr)
        return 2
    finally:
        experiments.set_context(experiments.Context())
        LINKS.update(DEFAULT_LINKS)
    out.write_text(text)
    evidence.write_text(proof)
    said = f", calibrated for {ctx.gpu} with {len(ctx.calibrate)} file(s)" if ctx.calibrate else ""
    print(f"wrote {out.name} ({len(text.splitlines())} lines) and {evidence.name} ({len(proof.splitlines())} lines)"
          f"{said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
