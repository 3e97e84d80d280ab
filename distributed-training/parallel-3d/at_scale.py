"""The planner against PyTorch at real sizes: the planner's choice for real models, built and stepped by the
real code (engine.py) as one rank of the full world, in one CPU process, in seconds.

For each study MODEL@GPUS (default 8B@64, 70B@512, 405B@4096 on H100s) the planner picks the degrees exactly as
`make plan ARGS="--params MODEL --gpus GPUS"` prints them (planner_bridge.best_plan: the pytorch stack, the guide's
batch rule; TP, PP, DP, CP, ZeRO, micro-batch, interleave, recompute). Then this process joins PyTorch's fake process group (torch.testing._internal.distributed.
fake_pg, private) as rank r of the full world, and under FakeTensorMode (torch._subclasses, private):
tensors carry shapes and dtypes but no data, so a 405B model "fits" and nothing is computed; every
collective is issued with its real shapes and returns at once. The GPT is built on the meta device,
cut into this rank's stages, given DTensor TP + SP, checkpointing and FSDP2 exactly as in a real run,
materialised as fake tensors, given its optimizer state, and stepped once through the real pipelining
schedule with bf16 MixedPrecisionPolicy. Measured on that step, per rank:

    state bytes      parameters, gradients (after backward, before the optimizer) and AdamW state,
                     per storage (footprint.state_bytes): what the planner's FSDP2 state terms predict
    peak bytes       the most the step allocates at once beyond what existed before it (footprint.PeakTracker):
                     gathered parameters, gradients, activations, communication buffers; the rank's peak is
                     its parameters and optimizer state plus this (the gradients are allocated during the
                     step), against the planner's pytorch-stack memory (planner/model/torch_memory.py) and, for
                     contrast, its megatron-stack memory (Korthikanti's activations, ZeRO's accounting)
    collectives      count, payload and bus bytes per mesh dimension (comms.CollectiveLog) against the
                     planner's bus bytes (planner_bridge.predict) and the design's counts (design.py)

Two ranks per study when it has a pipeline: the first rank of the first stage (embeddings) and of the
last stage (LM head); the planner prices the larger of the two.

One deviation from a real run: torch 2.13's pipelining votes between stages on its shape-inference mode
before the first step, and reads the vote with .item(), which FakeTensorMode cannot answer. Every stage
here has static shapes (the vote's outcome is known: static), so the vote is skipped (skip_p2p_vote).
The sends and receives themselves run through the fake group like every collective; the gloo runs
(train.py, tests) check the same transfers with real data at small scale.

    make parallel-3d-at-scale
    PYTHONPATH=distributed-training python distributed-training/parallel-3d/at_scale.py --studies 8B@64,70B@512

One context-parallel plan too (--cp-studies, default 8B@64/cp2): the planner's choice for 8B on 64 GPUs,
with CP 2 carved out of its DP and the sequence twice as long, so every rank holds as many tokens as in the
8B@64 study (Llama 3's long-context recipe: CP 16 at 131,072 tokens keeps the 8,192 of its short stage per
rank). FSDP2 shards over the same 64 ranks (dp x cp), so the state bytes should equal 8B@64's; the ring's
K/V and dK/dV transfers are counted per step against common/cp_bytes.ring_bytes, and against the planner's
CP bus bytes and its pytorch-stack memory for that plan (planner_bridge.predict with cp). Those rows go to
at_scale_cp.csv, beside the no-CP study.

Rows go to runs/at_scale/ first and are merged into results/ by study when the run completes (as train.py's: its
docstring says where each runner's rows go). The preset, preset(), plans for H100s; --gpu another GPU is an
experiment (its rows would share the studies' keys).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import sys
import time
import traceback
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend

import explain as ex
import planner_bridge as pb
from comms import CollectiveLog, bus_factor, mesh_groups
from common.config import parse_preset
from common.dist import DistInfo, fail
from common.failures import entrypoint
from common.hardware import cpu_model
from common.results import provenance
from common.cp_bytes import ring_bytes
from common.runner import RunFlags, RunPlan, Table, check_before_launch, experiment, open_run, saved_config
from design import predicted_counts, predicted_payloads
from engine import Batch, Engine
from footprint import PeakTracker
from parallelize import build_mesh
from settings import LAB, Layout, Variant
from pipeline_stages import stage_specs

BENCH_VERSION = "1"
MEM_KEYS = ("params", "grads", "optimizer", "activations", "buffers", "total")
COLUMNS = ["study", "role", "rank", "world", "layers", "hidden", "heads", "vocab", "seq", "n_params",
           "tp", "pp", "dp", "microbatch", "num_microbatches", "interleave", "recompute", "planner_zero", "run_zero",
           "stage_indices", "stage_layers", "param_bytes", "grad_bytes", "opt_bytes", "peak_bytes",
           *[f"planner_{k}_bytes" for k in MEM_KEYS], "megatron_total_bytes",
           "planner_state_bytes", "explained_state_bytes",
           *[f"{d}_{x}" for d in ("tp", "pp", "dp") for x in ("count", "payload_bytes", "bus_bytes")],
           *[f"{p}_{d}_bus_bytes" for p in ("planner", "explained", "design") for d in ("tp", "pp", "dp")],
           "counts_match_design", "wall_s"]
KEY = ["study", "role"]
CP_COLUMNS = ["study", "role", "baseline_study", "rank", "world", "layers", "hidden", "heads", "kv_heads", "vocab", "seq",
              "n_params", "tp", "pp", "dp", "cp", "microbatch", "num_microbatches", "interleave", "recompute", "run_zero",
              "stage_layers", "param_bytes", "grad_bytes", "opt_bytes", "peak_bytes",
              *[f"{d}_{x}" for d in ("tp", "pp", "dp", "cp") for x in ("count", "payload_bytes", "bus_bytes")],
              *[f"design_{d}_bus_bytes" for d in ("tp", "pp", "dp", "cp")], "ring_formula_bytes",
              "planner_cp_bus_bytes", *[f"planner_{k}_bytes" for k in MEM_KEYS], "counts_match_design", "wall_s"]
TERM_COLUMNS = ["study", "role", "quantity", "term", "bytes"]
TERM_KEY = ["study", "role", "quantity", "term"]


@dataclass(frozen=True)
class AtScaleConfig(RunFlags):
    studies: tuple[str, ...] = field(default=("8B@64", "70B@512", "405B@4096"),
                                     metadata={"help": "MODEL@GPUS: the model --params MODEL names (8B: Llama 3.1 8B)"})
    cp_studies: tuple[str, ...] = field(default=("8B@64/cp2",),
                                        metadata={"help": "MODEL@GPUS/cpN: that study's plan with N-way CP taken out "
                                                          "of its DP, at an N times longer sequence"})

    def __post_init__(self):
        for s in self.studies:
            model, _, gpus = s.partition("@")
            if not model or not gpus.isdigit() or int(gpus) < 1:
                raise ValueError(f"--studies entry {s!r} is not MODEL@GPUS (e.g. 70B@512)")
        for s in self.cp_studies:
            base, _, cp = s.partition("/cp")
            if "@" not in base or not cp.isdigit() or int(cp) < 2:
                raise ValueError(f"--cp-studies entry {s!r} is not MODEL@GPUS/cpN with N >= 2 (e.g. 8B@64/cp2)")


def preset() -> AtScaleConfig:
    """The studies on the GPU the planner plans for: H100s (--gpu, the run flag, names another)."""
    return AtScaleConfig(gpu="h100")


def skip_p2p_vote(schedule) -> None:
    """Skip torch 2.13's pipeline warm-up vote (see the module docstring): every stage is static."""
    if not hasattr(schedule, "_warmup_p2p"):
        return
    from torch.distributed.pipelining._utils import InferenceMode

    def static(stages, has_backward, p2p_done):  # noqa: ARG001 - the replaced method's signature
        for st in stages:
            st._inference_mode = InferenceMode.STATIC

    schedule._warmup_p2p = static


def prime_optimizer(eng: Engine) -> None:
    """Create the optimizer state as a first step would (AdamW allocates its moments on its first step), without
    running a first schedule: the measured step is then the first, and its only cost, in the fake world."""
    for p in eng.params:
        p.grad = torch.zeros_like(p)
    eng.optimizer_step()


def run_zero(planner_zero: int) -> int:
    """What FSDP2 runs for the planner's stage: 3 as 3; 0, 1 and 2 as 2 (no reshard after forward), the only
    FSDP2 mode that does not gather parameters twice per micro-batch (ZeRO-0/1 are not FSDP2 modes)."""
    return 3 if planner_zero == 3 else 2


def measure(g, d: pb.Degrees, rank: int) -> dict:
    """Rank `rank` of the full world (d's ranks) on the fake group: the optimizer state made, one step measured."""
    cp = d.cp
    layout = Layout(d.tp, d.pp, d.dp, d.microbatch, d.num_microbatches, cp)
    variant = Variant(d.zero, d.recompute, d.interleave)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=layout.world)
    try:
        mesh = build_mesh("cpu", d.pp, d.dp, d.tp, cp)
        fake = FakeTensorMode(allow_non_fake_inputs=True)
        # Built on the meta device outside the fake mode (FSDP2 computes mesh coordinates with data-dependent
        # ops), materialised and stepped inside it.
        eng = Engine(g, layout, variant, mesh, torch.device("cpu"), param_dtype=torch.bfloat16, init="fake",
                     fake_mode=fake, stage_layers=d.stage_layers)
        if eng.schedule is not None:
            skip_p2p_vote(eng.schedule)
        with fake:
            rows = d.microbatch * d.num_microbatches
            batch = Batch(torch.randint(0, g.vocab_size, (rows, g.seq_len)),
                          torch.randint(0, g.vocab_size, (rows, g.seq_len)))
            prime_optimizer(eng)
            log = CollectiveLog(mesh_groups(mesh))
            with log, PeakTracker() as mem:
                eng.train_step(batch)
        payloads = {(t.dim, t.kind): t.payload_bytes for t in log.totals()}
        design = predicted_payloads(g, layout, variant, eng.specs, 2, 2, 4, **eng.design())
        design_counts = predicted_counts(layout, variant, eng.specs, **eng.design())
        counts_ok = +log.counts() == design_counts and payloads == design
        out = {**eng.last_state, "peak_bytes": mem.peak_bytes, "counts_match_design": counts_ok,
               "stage_indices": ";".join(str(s.index) for s in eng.specs),
               "stage_layers": ";".join(str(len(s.layers)) for s in eng.specs)}
        sizes = {"tp": d.tp, "pp": d.pp, "dp": layout.shard_group, "cp": cp}
        for d_ in ("tp", "pp", "dp", "cp"):
            mine = [t for t in log.totals() if t.dim == d_]
            out[f"{d_}_count"] = sum(t.count for t in mine if t.kind != "recv")
            out[f"{d_}_payload_bytes"] = sum(t.payload_bytes for t in mine if t.kind != "recv")
            out[f"{d_}_bus_bytes"] = sum(t.bus_bytes for t in mine)
            out[f"design_{d_}_bus_bytes"] = sum(v * bus_factor(k, sizes[d_]) for (dim, k), v in design.items()
                                                if dim == d_)
        out["dp_all_gathers"] = design_counts.get(("dp", "all_gather"), 0)
        out["dp_reduce_scatters"] = design_counts.get(("dp", "reduce_scatter"), 0)
        return out
    finally:
        dist.destroy_process_group()


def isolated(fn, *args):
    """fn(*args) in a forked child: every measurement joins its own fake world, and nothing a process group,
    a device mesh or DTensor caches survives into the next one."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)

    def target():
        try:
            child.send((True, fn(*args)))
        except BaseException:  # noqa: BLE001 - report everything to the parent
            child.send((False, traceback.format_exc()))
        finally:
            os._exit(0)

    proc = ctx.Process(target=target)
    proc.start()
    ok, value = parent.recv()
    proc.join()
    if not ok:
        raise RuntimeError(f"the measurement failed in its child process:\n{value}")
    return value


def terms_for(g, d: pb.Degrees, pp_rank: int, pred: pb.Prediction, m: dict) -> list[ex.Term]:
    specs = stage_specs(g.n_layers, d.pp, d.interleave, pp_rank, d.stage_layers)
    piped = d.pp > 1
    reductions = d.num_microbatches if not piped else 1
    return (ex.state_terms(g, d, specs, pred)
            + ex.tp_terms(g, d, specs, pred, reductions, 4 if piped else 2)
            + ex.pp_terms(g, d, specs)
            + ex.dp_terms(g, d, specs, pred.bus_bytes["dp"], m["design_dp_bus_bytes"], m["dp_all_gathers"],
                          m["dp_reduce_scatters"]))


def study_rows(study: str, gpu: str) -> tuple[list[dict], list[dict]]:
    """The study's rows (one per measured rank) and its terms (one per named difference per rank)."""
    model, _, gpus = study.partition("@")
    g, planned, _ = pb.best_plan(model, int(gpus), gpu)
    d = planned._replace(zero=run_zero(planned.zero))
    pred = pb.predict(g, d, gpu)
    roles = [("first", 0)] + ([("last", (d.pp - 1) * d.dp * d.cp * d.tp)] if d.pp > 1 else [])
    megatron = megatron_total(g, d)
    rows, terms = [], []
    for role, rank in roles:
        t0 = time.perf_counter()
        m = isolated(measure, g, d, rank)
        pp_rank = rank // (d.dp * d.cp * d.tp)
        named = terms_for(g, d, pp_rank, pred, m)
        terms += [{"study": study, "role": role, "quantity": t.quantity, "term": t.name, "bytes": t.bytes}
                  for t in named]
        explained = {q: sum(t.bytes for t in named if t.quantity == q) for q in ("state", "tp", "pp", "dp")}
        planner_state = pred.state_bytes
        rows.append({"planner_state_bytes": planner_state, "megatron_total_bytes": megatron,
                     "explained_state_bytes": planner_state + explained["state"],
                     **{f"explained_{q}_bus_bytes": pred.bus_bytes[q] + explained[q] for q in ("tp", "pp", "dp")},
                     "study": study, "role": role, "rank": rank, "world": d.gpus, "layers": g.n_layers,
                     "hidden": g.d_model, "heads": g.n_heads, "vocab": g.vocab_size, "seq": g.seq_len,
                     "n_params": pb.shape_of(g).params, "tp": d.tp, "pp": d.pp, "dp": d.dp,
                     "microbatch": d.microbatch, "num_microbatches": d.num_microbatches, "interleave": d.interleave,
                     "recompute": d.recompute, "planner_zero": planned.zero, "run_zero": d.zero,
                     **{k: v for k, v in m.items() if k in COLUMNS},
                     **{f"planner_{k}_bytes": pred.memory_bytes[k] for k in MEM_KEYS},
                     **{f"planner_{k}_bus_bytes": pred.bus_bytes[k] for k in ("tp", "pp", "dp")},
                     "wall_s": round(time.perf_counter() - t0, 2)})
    return rows, terms


def main(argv: list[str] | None = None) -> int:
    cfg = parse_preset(AtScaleConfig, argv, preset, keys=(), description=__doc__.split("\n\n")[0], prog="at_scale.py")
    ignore = ("resume", "promote", "studies", "cp_studies")  # which studies is what, not how: rows merge by study
    plan = RunPlan.beside(cfg.results_dir(LAB), "at_scale", [
        Table("at_scale.csv", COLUMNS, KEY), Table("at_scale_terms.csv", TERM_COLUMNS, TERM_KEY, config=False),
        Table("at_scale_cp.csv", CP_COLUMNS, KEY, config=False)], config=saved_config(cfg), ignore=ignore)
    try:
        check_before_launch(plan, cfg)
    except ValueError as e:
        fail(str(e), code=2)
    torch.set_num_threads(1)
    env = DistInfo(0, 0, 1, 1, torch.device("cpu"), "fake")
    prov = {**provenance(env, BENCH_VERSION), "hardware": f"{cpu_model()}, one process as one rank of a fake group",
            "backend": "fake"}
    changed = experiment(cfg, preset(), ignore[2:])
    with open_run(plan, cfg, None, prov, changed, preset_publishes="merge") as run:
        writer, term_writer, cp_writer = run.writers
        for study in cfg.studies:
            if not writer.done({"study": study, "role": "first"}):
                measure_study(study, cfg.gpu, writer, term_writer)
        for study in cfg.cp_studies:
            if not cp_writer.done({"study": study, "role": "first"}):
                rows = cp_study_rows(study, cfg.gpu)
                cp_writer.write_many(rows)
                for r in rows:
                    state = r["param_bytes"] + r["grad_bytes"] + r["opt_bytes"]
                    print(f"{study:10s} {r['role']:5s} TP{r['tp']} PP{r['pp']} DP{r['dp']} CP{r['cp']} s{r['seq']}: "
                          f"state {state / 1e9:7.3f} GB, peak +{r['peak_bytes'] / 1e9:6.2f} GB, ring "
                          f"{r['cp_payload_bytes'] / 1e9:.2f} GB sent (formula {r['ring_formula_bytes'] / 1e9:.2f}), "
                          f"collectives {'=' if r['counts_match_design'] else '!='} design, {r['wall_s']:.0f} s",
                          flush=True)
    return 0


def cp_study_rows(study: str, gpu: str) -> list[dict]:
    """MODEL@GPUS/cpN: the planner's plan for MODEL@GPUS with dp / N and N-way CP at an N times longer sequence."""
    base, _, n = study.partition("/cp")
    model, _, gpus = base.partition("@")
    cp = int(n)
    g0, planned, _ = pb.best_plan(model, int(gpus), gpu)
    if planned.dp % cp:
        raise ValueError(f"--cp-studies {study}: the planner's DP {planned.dp} for {base} does not divide by {cp}")
    d = planned._replace(zero=run_zero(planned.zero), dp=planned.dp // cp, cp=cp)
    g = dataclasses.replace(g0, seq_len=g0.seq_len * cp)
    pred = pb.predict(g, d, gpu)
    roles = [("first", 0)] + ([("last", (d.pp - 1) * d.dp * cp * d.tp)] if d.pp > 1 else [])
    rows = []
    for role, rank in roles:
        t0 = time.perf_counter()
        m = isolated(measure, g, d, rank)
        specs = stage_specs(g.n_layers, d.pp, d.interleave, rank // (d.dp * cp * d.tp), d.stage_layers)
        ring = ring_bytes(d.microbatch, g.seq_len, g.kv_heads // d.tp, g.head_dim, cp, 2)
        full = d.recompute == "full"
        rows.append({"study": study, "role": role, "baseline_study": base, "rank": rank, "world": d.gpus * cp,
                     "layers": g.n_layers, "hidden": g.d_model, "heads": g.n_heads, "kv_heads": g.kv_heads,
                     "vocab": g.vocab_size, "seq": g.seq_len, "n_params": pb.shape_of(g).params, "tp": d.tp, "pp": d.pp,
                     "dp": d.dp, "cp": cp, "microbatch": d.microbatch, "num_microbatches": d.num_microbatches,
                     "interleave": d.interleave, "recompute": d.recompute, "run_zero": d.zero,
                     **{k: v for k, v in m.items() if k in CP_COLUMNS},
                     "ring_formula_bytes": d.num_microbatches * sum(len(s.layers) for s in specs)
                     * (ring.total + full * ring.forward), "planner_cp_bus_bytes": pred.bus_bytes["cp"],
                     **{f"planner_{k}_bytes": pred.memory_bytes[k] for k in MEM_KEYS},
                     "wall_s": round(time.perf_counter() - t0, 2)})
    return rows


def megatron_total(g, d: pb.Degrees) -> float:
    """The same degrees priced for the megatron stack (Korthikanti's activations, ZeRO's accounting, fp32 gradients):
    what the planner said of these plans before it priced PyTorch's stack."""
    from planner.model import memory

    deg = pb._planner_degrees(d)
    split = pb.lab_split(g, d)
    return float(memory.memory_breakdown(pb.shape_of(g), deg, grad_bytes=pb.GRAD_BYTES, split=split).total)


def measure_study(study: str, gpu: str, writer, term_writer) -> None:
    rows, terms = study_rows(study, gpu)
    term_writer.write_many(terms)
    writer.write_many(rows)
    for r in rows:
        state = r["param_bytes"] + r["grad_bytes"] + r["opt_bytes"]
        print(f"{study:10s} {r['role']:5s} TP{r['tp']} PP{r['pp']} DP{r['dp']} Z{r['run_zero']}: state "
              f"{state / 1e9:7.3f} GB (planner {r['planner_state_bytes'] / 1e9:7.3f}, explained "
              f"{r['explained_state_bytes'] / 1e9:7.3f}), peak +{r['peak_bytes'] / 1e9:6.2f} GB, collectives "
              f"{'=' if r['counts_match_design'] else '!='} design, {r['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(entrypoint(main))
