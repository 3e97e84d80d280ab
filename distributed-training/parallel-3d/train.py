"""parallel-3d: train the common GPT with TP x PP x DP (x CP) from PyTorch's own parts and the hand-rolled ring
attention, and hold each run against the planner's prediction for it.

One torchrun launch = one set of degrees (TP x PP x DP x CP = the world) and one or more schedule variants
(--zero, --recompute, --interleave: every combination is measured in turn). Per variant, one row in
results/runs_<preset>.csv: the degrees, stages and their layers, micro-batching, recompute, step time
(median of timed optimizer steps after warm-up, max over ranks), tokens/s, MFU (GPU, bf16 peak of the
preset), memory per rank (GPU: torch.cuda.max_memory_allocated; CPU: the exact state bytes plus the
step's tracked peak, footprint.py; the largest rank), the first and last losses, whether the collectives
of a step matched the design (design.py) on every rank, and beside them the planner's prediction for
the same configuration (planner_bridge.py): memory per GPU, and on a GPU preset step time, bubble and
exposed communication. results/comms_<preset>.csv holds the collectives of one step per pipeline rank,
per mesh dimension and kind, with the design's count.

Where rows go (common.runner): the lab's results are unions of launches (the one-process baseline, a
TP x PP x DP launch, another day other degrees, a GPU node its preset's files), so each launch writes into its
own run folder under a lock,

    train.py        runs/<preset>_ws<N>[_n<nodes>]_tp<t>pp<p>dp<d>[cp<c>]/   runs_<preset>.csv, comms_<preset>.csv
    activations.py  runs/activations_<preset>_ws<N>/                         activations_<preset>.csv
    at_scale.py     runs/at_scale/                                           at_scale*.csv
    ranking.py      runs/ranking_cpu/                                        ranking*_cpu.csv

(file names as in results/), and a complete launch of the preset's measurement settings is published by
merging: its rows replace the rows with the same key in results/ (same degrees and variant, world size
and nodes; same TP degree, recompute and shape; same study) and every other row stays. Degrees, schedule
variants, the TP degrees of the activation study and the studies chosen are what a launch measures, not
how: they never make it an experiment. Any other measurement flag does (--steps, --model, --stage-layers,
...): the run stays in runs/ and says how to publish it. --promote replace|merge|no as everywhere;
--resume continues an interrupted launch's folder; a fresh launch keeps an unpublished earlier one as
runs/<name>@<UTC time>/.

    make parallel-3d                              # CPU: 1-rank baseline + TP2 x PP2 x DP2 on 8 gloo ranks + studies
    make parallel-3d TP=1 PP=1 DP=2 CP=2          # CPU: context parallelism, ring attention over 2 ranks
    make parallel-3d TP=2 PP=2 DP=2 GPU=h100      # one node of 8 GPUs
    make parallel-3d TP=2 PP=1 DP=1 CP=4 GPU=h100 ARGS="--seq 8192"   # CP on one node: s/4 tokens per rank
    make parallel-3d-gpu                          # 1 GPU: the bf16 baseline + the activation study + report
    make parallel-3d-run TP=8 PP=2 DP=1 NNODES=2 MASTER_ADDR=node0 GPU=h100     # every node
    sbatch --nodes=2 slurm/lab.sbatch parallel-3d TP=8 PP=2 DP=1 GPU=h100
    OMP_NUM_THREADS=1 PYTHONPATH=distributed-training python -m torch.distributed.run --standalone \\
        --nproc-per-node 8 distributed-training/parallel-3d/train.py --gpu cpu --tp 2 --pp 2 --dp 2

The command `make plan` prints for its chosen configuration runs here unchanged (real shapes: built on
the meta device, each shard given the one-process model's values: init_weights.py). On 2 CPU cores 8
ranks share 2 cores and gloo runs over loopback: the step times are core contention, not scaling;
correctness, memory and bytes hold anywhere.
"""

from __future__ import annotations

import gc
import os

import torch
import torch.distributed as dist
from tqdm import tqdm

import planner_bridge as pb
from comms import CollectiveLog, mesh_groups
from common.config import parse_preset
from common.data import load_data
from common.dist import DistInfo, distributed, fail, from_rank0, launched_by_torchrun, planned_world, print0
from common.failures import entrypoint
from common.hardware import GPUPreset
from common.model import count_params, mfu
from common.results import provenance
from common.runner import RunPlan, Table, check_before_launch, experiment, open_run, saved_config
from common.timing import time_iterations
from design import predicted_counts
from engine import Batch, Engine
from footprint import PeakTracker
from parallelize import build_mesh
from settings import (CONFIG_IGNORE, LAB, OPERATIONAL, PRESET_KEYS, Config, Layout, Variant, check, gpt_config, preset,
                      resolve, torchrun_world, variants)
from pipeline_stages import split_layers

BENCH_VERSION = "1"
COLUMNS = ["preset", "variant", "tp", "pp", "dp", "cp", "zero", "recompute", "interleave", "schedule", "stage_layers",
           "microbatch", "num_microbatches", "global_batch", "model", "n_params", "precision", "optimizer", "step_time_ms",
           "step_time_min_ms", "step_time_max_ms", "tokens_per_s", "tokens_per_s_per_rank", "mfu", "peak_mem_bytes",
           "mem_method", "param_bytes", "grad_bytes", "opt_bytes", "loss_first", "loss_last", "counts_match_design",
           "planner_state_bytes", "planner_activation_bytes", "planner_total_bytes", "planner_step_s",
           "planner_bubble_fraction", "planner_exposed_comm_s", "warmup", "steps", "timing"]
KEY = ["variant", "tp", "pp", "dp", "cp", "world_size", "nnodes"]
COMM_COLUMNS = ["preset", "variant", "tp", "pp", "dp", "cp", "pp_rank", "dim", "kind", "count", "payload_bytes", "bus_bytes",
                "design_count"]
COMM_KEY = ["variant", "tp", "pp", "dp", "cp", "pp_rank", "dim", "kind", "world_size", "nnodes"]


def run_tag(preset: GPUPreset, layout: Layout, nnodes: int) -> str:
    """The launch's run folder, e.g. cpu_ws8_tp2pp2dp2, cpu_ws4_tp1pp1dp2cp2 (files inside keep results/' names)."""
    cp = f"cp{layout.cp}" + ("" if layout.cp_kind == "ring" else f"-{layout.cp_kind}") if layout.cp > 1 else ""
    return f"{preset.run_tag(layout.world, nnodes)}_tp{layout.tp}pp{layout.pp}dp{layout.dp}{cp}"


def run_plan(cfg: Config, hw: GPUPreset, layout: Layout, nnodes: int) -> RunPlan:
    """The launch's run folder and its two CSVs (named as in results/, where its rows are merged)."""
    return RunPlan.beside(cfg.results_dir(LAB), run_tag(hw, layout, nnodes),
                          [Table(f"runs_{hw.tag}.csv", COLUMNS, KEY), Table(f"comms_{hw.tag}.csv", COMM_COLUMNS, COMM_KEY)],
                          config=saved_config(cfg), ignore=CONFIG_IGNORE)


def changed(cfg: Config) -> list[str]:
    """Measurement flags that differ from the preset's for these degrees (then the launch is an experiment: it stays
    in runs/)."""
    return experiment(cfg, resolve(preset(cfg.gpu, pp=cfg.pp, cp=cfg.cp))[0], OPERATIONAL)


class Run:
    """One launch: the data, the mesh, the writers, and a measurement per variant."""

    def __init__(self, cfg: Config, hw: GPUPreset, env: DistInfo, layout: Layout, data, gcfg, writers):
        self.cfg, self.preset, self.env, self.layout, self.data, self.gcfg = cfg, hw, env, layout, data, gcfg
        self.dtype = torch.bfloat16 if cfg.precision == "bf16" else None
        self.mesh = build_mesh(env.device.type, layout.pp, layout.dp, layout.tp, layout.cp)
        self.rows, self.comms = writers  # rank 0's; NoWriter on the others

    def batch(self, step: int) -> Batch:
        lay, g = self.layout, self.gcfg
        dp_rank = self.mesh["dp"].get_local_rank()
        x, y = self.data.batch("train", step, lay.global_batch, g.seq_len, self.cfg.seed, dp_rank, lay.dp)
        return Batch(x, y)

    def measure(self, v: Variant) -> tuple[dict, list[dict]]:
        cfg, env, dev, lay = self.cfg, self.env, self.env.device, self.layout
        eng = Engine(self.gcfg, lay, v, self.mesh, dev, param_dtype=self.dtype, optimizer=cfg.optimizer, lr=cfg.lr,
                     seed=cfg.seed, stage_layers=cfg.stage_layers)
        losses: list[float] = []
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)

        def one_step() -> None:
            losses.append(eng.step(self.batch(len(losses))))

        t = time_iterations(one_step, warmup=cfg.warmup, iters=cfg.steps, device=dev)
        cuda_peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0
        # One more step, instrumented: its collectives, the tracked peak and the state bytes.
        log = CollectiveLog(mesh_groups(self.mesh))
        with log, PeakTracker() as mem:
            eng.train_step(self.batch(len(losses)))
        state = eng.last_state
        tracked = sum(state.values()) - state["grad_bytes"] + mem.peak_bytes  # params + optimizer held, + the step
        ok = +log.counts() == predicted_counts(lay, v, eng.specs, **eng.design())
        mx = torch.tensor([cuda_peak, tracked, state["param_bytes"], state["grad_bytes"], state["opt_bytes"],
                           0 if ok else 1], dtype=torch.float64, device=dev)
        dist.all_reduce(mx, op=dist.ReduceOp.MAX)
        cuda_peak, tracked, pb_, gb, ob, bad = (int(x) for x in mx.tolist())
        comm_rows = self._comm_rows(v, eng, log)
        del eng
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        tokens = lay.global_batch * self.gcfg.seq_len
        tps = tokens / t.median_s
        peak_tf = self.preset.peak_tflops("bf16") if cfg.precision == "bf16" else None
        row = {"preset": self.preset.name, "variant": v.name, "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp,
               "zero": v.zero,
               "recompute": v.recompute,
               "interleave": v.interleave, "schedule": self.schedule_name(v),
               "stage_layers": ";".join(map(str, split_layers(self.gcfg.n_layers, lay.pp * v.interleave,
                                                              cfg.stage_layers))),
               "microbatch": lay.microbatch, "num_microbatches": lay.num_microbatches,
               "global_batch": lay.global_batch, "model": describe_model(self.gcfg),
               "n_params": count_params(self.gcfg), "precision": cfg.precision, "optimizer": cfg.optimizer,
               "step_time_ms": t.median_s * 1e3, "step_time_min_ms": t.min_s * 1e3, "step_time_max_ms": t.max_s * 1e3,
               "tokens_per_s": tps, "tokens_per_s_per_rank": tps / env.world_size,
               "mfu": mfu(tps / env.world_size, self.gcfg, peak_tf),
               "peak_mem_bytes": cuda_peak if dev.type == "cuda" else tracked,
               "mem_method": "torch.cuda.max_memory_allocated" if dev.type == "cuda"
               else "state bytes + tracked step peak (footprint.py)",
               "param_bytes": pb_, "grad_bytes": gb, "opt_bytes": ob, "loss_first": losses[0], "loss_last": losses[-1],
               "counts_match_design": not bad, **self.prediction(v), "warmup": cfg.warmup,
               "steps": cfg.steps, "timing": f"{t.method}, {t.reduction}"}
        return row, comm_rows

    def schedule_name(self, v: Variant) -> str:
        if self.layout.pp == 1:
            return "accumulate"
        if v.interleave > 1:
            return f"interleaved-1F1B(v={v.interleave})"
        return "1F1B" if self.layout.num_microbatches >= self.layout.pp else "GPipe"

    def prediction(self, v: Variant) -> dict:
        lay = self.layout
        d = pb.Degrees(lay.tp, lay.pp, lay.dp, v.zero, lay.microbatch, lay.num_microbatches, v.interleave,
                       v.recompute, self.cfg.stage_layers, lay.cp, lay.cp_kind)
        p = pb.predict(self.gcfg, d, self.preset.name if self.preset.name != "cpu" else None)
        mem = p.memory_bytes
        out = {"planner_state_bytes": p.state_bytes,
               "planner_activation_bytes": mem["activations"], "planner_total_bytes": mem["total"],
               "planner_step_s": None, "planner_bubble_fraction": None, "planner_exposed_comm_s": None}
        if p.times_s is not None:
            ts = p.times_s
            out.update(planner_step_s=ts["step_s"], planner_bubble_fraction=ts["bubble_fraction"],
                       planner_exposed_comm_s=sum(ts[f"{k}_comm_s"] - ts[f"{k}_hidden_s"]
                                                  for k in ("tp", "pp", "dp", "cp")))
        return out

    def _comm_rows(self, v: Variant, eng: Engine, log: CollectiveLog) -> list[dict]:
        """One rank per pipeline stage reports (dp, cp and tp rank 0); rank 0 receives them all."""
        lay = self.layout
        mine = []
        if all(self.mesh[d].get_local_rank() == 0 for d in ("dp", "cp", "tp")):
            design = predicted_counts(lay, v, eng.specs, **eng.design())
            mine = [{"variant": v.name, "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "pp_rank": eng.pp_rank,
                     "dim": t.dim,
                     "kind": t.kind, "count": t.count, "payload_bytes": t.payload_bytes, "bus_bytes": t.bus_bytes,
                     "design_count": design.get((t.dim, t.kind), 0)} for t in log.totals()]
        gathered: list = [None] * self.env.world_size if self.env.is_main else None
        dist.gather_object(mine, gathered, dst=0)
        return [r for rows in (gathered or []) for r in rows]

    def complete(self) -> bool:
        return all(self.rows.done(self.key(v)) for v in variants(self.cfg))

    def measure_all(self) -> None:
        env = self.env
        todo = [v for v in variants(self.cfg) if not self.rows.done(self.key(v))]
        for v in tqdm(from_rank0(todo), disable=not env.is_main, desc=degrees(self.layout), leave=False):
            row, comm_rows = self.measure(v)
            self.rows.write(row)
            self.comms.write_many(comm_rows)
            if env.is_main:
                tqdm.write(f"{v.name:22s} step {row['step_time_ms']:8.1f} ms {row['tokens_per_s']:9.0f} tok/s  "
                           f"peak {row['peak_mem_bytes'] / 2**20:8.2f} MiB  loss {row['loss_first']:.4f} -> "
                           f"{row['loss_last']:.4f}  collectives {'=' if row['counts_match_design'] else '!='} design")

    def key(self, v: Variant) -> dict:
        lay = self.layout
        return {"variant": v.name, "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp}


def degrees(layout: Layout) -> str:
    """TP2 x PP2 x DP2, and x CP2 with context parallelism."""
    cp = f" x CP{layout.cp}" if layout.cp > 1 else ""
    return f"TP{layout.tp} x PP{layout.pp} x DP{layout.dp}{cp}"


def describe_model(g) -> str:
    return f"d{g.d_model}-L{g.n_layers}-h{g.n_heads}-kv{g.kv_heads}-f{g.ffn}-T{g.seq_len}-V{g.vocab_size}"


def main(argv: list[str] | None = None) -> int:
    cfg = parse_preset(Config, argv, preset, PRESET_KEYS, description=__doc__.split("\n\n")[0], prog="train.py")
    try:
        cfg, hw = resolve(cfg)
        data = load_data(cfg.data or None, max_bytes=2 << 20)
        gcfg = gpt_config(cfg, data.vocab_size)
        layout = check(cfg, gcfg, torchrun_world(cfg))
        if layout.world > 1 and not launched_by_torchrun() and os.environ.get("DT_CHECK_ARGS") != "1":
            raise ValueError(f"{degrees(layout)} needs {layout.world} ranks: launch it with torchrun (make parallel-3d "
                             f"TP={layout.tp} PP={layout.pp} DP={layout.dp} CP={layout.cp})")
        check_before_launch(run_plan(cfg, hw, layout, planned_world()[2]), cfg)  # make's check pass, or this process
    except ValueError as e:  # before any process group: one line, exit 2, nothing written
        fail(str(e), code=2)
    with distributed(device="cpu" if hw.name == "cpu" else "auto", timeout_s=cfg.timeout_s) as env:
        print0(f"parallel-3d: {degrees(layout)} = {env.world_size} ranks "
               f"({env.nnodes} node(s), {env.backend}, {hw.label}), model {describe_model(gcfg)}, "
               f"{layout.num_microbatches} micro-batches of {layout.microbatch}")
        with open_run(run_plan(cfg, hw, layout, env.nnodes), cfg, env, provenance(env, BENCH_VERSION), changed(cfg),
                      preset_publishes="merge") as out:
            run = Run(cfg, hw, env, layout, data, gcfg, out.writers)
            run.measure_all()
            out.complete = run.complete()
    return 0


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
