"""fsdp-scaling: DDP vs ZeRO-1/2/3 and HSDP on the common GPT, one torchrun launch per world size.

For every strategy (strategies.py) and scaling mode this measures, at the launch's world size N:
step time (median of timed optimizer steps after warm-up, max over ranks), tokens/s and tokens/s
per rank, MFU on GPU (common.model.mfu with the preset's peak; unknown on CPU), memory per rank
(CUDA max allocated on GPU; on CPU torch's memory tracker peak, plus the exact bytes of params,
grads and optimizer state), the losses, and the collectives of one step (CommDebugMode). On GPU it
also profiles a few steps with torch.profiler (overlap.py), explicit prefetch off and on.

    strong scaling  fixed global batch (--global-batch sequences per optimizer step), split over ranks
    weak scaling    fixed per-rank batch (--micro-batch x --grad-accum sequences per rank per step)
    effective batch = micro-batch x grad-accum x N sequences, recorded in every row

Scaling efficiency T(N) / (N T(1)) is computed by report.py from these rows (T = tokens/s).

Run (make builds the environment and loops over world sizes 1, 2, 4, ... NPROC):
    make fsdp-scaling                          # CPU preset: sweep + fake-PG study + report, < 5 min
    make fsdp-scaling-gpu                      # 1 GPU: overhead vs plain training, MFU, memory, overlap
    make fsdp-scaling-run GPU=h100 NPROC=8     # 8 GPUs: one launch per N in 1 2 4 8
    make fsdp-scaling-run NNODES=2 MASTER_ADDR=node0 GPU=h100   # every node; one launch at 16 ranks
    sbatch --nodes=4 slurm/lab.sbatch fsdp-scaling GPU=h100
    PYTHONPATH=distributed-training torchrun --standalone --nproc-per-node 4 \
        distributed-training/fsdp-scaling/bench.py --gpu cpu --strategies ddp,zero3 --modes weak

On 2 CPU cores N ranks share 2 cores: timings measure contention, and gloo's reduce-scatter is an
all-reduce underneath (pytorch/pytorch#118911). Correctness, memory and counts hold anywhere.
"""

from __future__ import annotations

import gc
import os
import sys
from dataclasses import replace

import torch
from torch.distributed.device_mesh import DeviceMesh
from tqdm import tqdm

import overlap
from common.config import parse_preset
from common.data import load_data
from common.dist import DistInfo, distributed, fail, from_rank0, planned_world, print0, reduce_across_ranks
from common.failures import entrypoint
from common.hardware import GPUPreset, device_kind, get_preset
from common.model import count_params, mfu
from common.results import NoWriter, provenance
from common.runner import (Run as OpenRun, RunPlan, Table, check_before_launch, experiment, hold_open, open_run,
                           saved_config)
from common.timing import time_iterations
from measure import CollectiveLog, instrumented_step
from memory_model import comm_plan, precision_for
from settings import (CONFIG_IGNORE, FSDP_STRATEGIES, LAB, OPERATIONAL, Config, check_world, describe_model, gpt_config,
                      hsdp_mesh_shape, preset)
from strategies import Trainer, build_mesh, micro_batches

BENCH_VERSION = "1"
COLUMNS = ["strategy", "mode", "model", "n_params", "precision", "optimizer", "replicate", "shard", "prefetch",
           "micro_batch", "grad_accum", "effective_batch", "seq_len", "tokens_per_step", "step_time_ms",
           "step_time_min_ms", "step_time_max_ms", "tokens_per_s", "tokens_per_s_per_rank", "mfu", "peak_mem_bytes",
           "mem_method", "param_bytes", "grad_bytes", "opt_bytes", "tracker_peak_bytes", "unsharded_peak_bytes",
           "act_peak_bytes", "loss_first", "loss_last", "warmup", "steps", "timing"]
KEY = ["strategy", "mode", "world_size", "nnodes"]
COMM_COLUMNS = ["strategy", "collective", "group_size", "grad_accum", "count", "payload_bytes", "bus_bytes_per_rank",
                "model_count", "model_payload_bytes"]
COMM_KEY = ["strategy", "collective", "group_size", "world_size", "nnodes"]


def resolve(cfg: Config) -> tuple[Config, GPUPreset]:
    """--gpu's hardware preset (auto: this machine's), and the one line when torch cannot use its GPUs."""
    hw = get_preset(cfg.gpu)
    device_kind(hw)
    return replace(cfg, gpu=hw.name), hw


def sweep_tag(cfg: Config, preset: GPUPreset, world: int, nnodes: int) -> str:
    """The sweep's identity in file names: the preset, its largest world size and its nodes (h100_ws8: the
    launches at 1, 2, 4 and 8 GPUs of one node; h100_ws16_n2). A sweep to 8 never replaces one to 1."""
    return preset.run_tag(max(*cfg.worlds, world), nnodes)


def run_plan(cfg: Config, hw: GPUPreset, world: int, nnodes: int) -> RunPlan:
    """The sweep's run folder, runs/scaling_<tag>/, and its two CSVs: one row per (strategy, mode, world size) and
    the collectives of one step."""
    tag = sweep_tag(cfg, hw, world, nnodes)
    return RunPlan.beside(cfg.results_dir(LAB), f"scaling_{tag}", [Table(f"scaling_{tag}.csv", COLUMNS, KEY),
                                                                    Table(f"comms_{tag}.csv", COMM_COLUMNS, COMM_KEY)],
                          config=saved_config(cfg), ignore=CONFIG_IGNORE)


def preflight(cfg: Config, hw: GPUPreset, then: list[str]) -> int:
    """Check the plan for every world size make will launch, then hand the sweep's run folder and its launches
    (`then`) to common.runner.hold_open: one sweep is one run folder, prepared once and locked until its last launch
    has ended, and a second sweep is refused whichever launch the first is in. A complete sweep is published by its
    last launch."""
    # make passes NNODES: each launch spreads its world over the nodes (HSDP's automatic shard group is the
    # ranks of one node); on one node the sweep's launches have 1, 2, 4, ... ranks.
    nnodes = int(os.environ.get("NNODES", 1))
    if os.environ.get("DT_LAUNCH_PHASE") != "ranks":  # under Slurm, the job's check phase checked the plan once
        for world in cfg.worlds:
            if world % nnodes:
                raise ValueError(f"--worlds {world} does not spread evenly over {nnodes} nodes")
            check_world(cfg, world, world // nnodes, nnodes)
    return hold_open(run_plan(cfg, hw, 1, nnodes), cfg, then, nnodes)


def changed(cfg: Config) -> list[str]:
    """Measurement flags that differ from the preset's sweep (then it is an experiment)."""
    return experiment(cfg, resolve(preset(cfg.gpu))[0], OPERATIONAL)


class Run:
    """One launch: the data, the writers, and a measurement per (strategy, mode)."""

    def __init__(self, cfg: Config, hw: GPUPreset, env: DistInfo, out: OpenRun):
        self.cfg, self.preset, self.env, self.out = cfg, hw, env, out
        self.tag = sweep_tag(cfg, hw, env.world_size, env.nnodes)
        self.data = load_data(cfg.data or None, max_bytes=2 << 20)
        self.gcfg = gpt_config(cfg, self.data.vocab_size)
        self.dtype = torch.bfloat16 if cfg.precision == "bf16" else None
        self.meshes: dict[tuple[int, ...], DeviceMesh] = {}
        self.rows, self.comms = out.writers  # rank 0's; NoWriter on the others (rank 0 decides what is done)

    def mesh(self, strategy: str) -> tuple[int, int] | None:
        env = self.env
        return hsdp_mesh_shape(env.world_size, self.cfg.hsdp_shard, env.local_world_size, env.nnodes) \
            if strategy == "hsdp" else None

    def micro_size(self, mode: str) -> int:
        return self.cfg.global_batch // (self.env.world_size * self.cfg.grad_accum) if mode == "strong" \
            else self.cfg.micro_batch

    def batches(self, step: int, micro: int) -> list:
        """This rank's rows of global batch `step`, split into grad-accum micro-batches."""
        cfg, env = self.cfg, self.env
        total = micro * cfg.grad_accum * env.world_size
        x, y = self.data.batch("train", step, total, self.gcfg.seq_len, cfg.seed, env.rank, env.world_size)
        return micro_batches(x, y, cfg.grad_accum)

    def trainer(self, strategy: str, prefetch: bool) -> Trainer:
        mesh = None
        if strategy in FSDP_STRATEGIES:
            shape = self.mesh(strategy) or (self.env.world_size,)
            if shape not in self.meshes:
                self.meshes[shape] = build_mesh(self.env.device, shape)
            mesh = self.meshes[shape]
        return Trainer(strategy, self.gcfg, self.env.device, optimizer=self.cfg.optimizer, lr=self.cfg.lr, mesh=mesh,
                       param_dtype=self.dtype, prefetch=prefetch, seed=self.cfg.seed)

    def measure(self, strategy: str, mode: str) -> dict:
        cfg, env, dev = self.cfg, self.env, self.env.device
        micro = self.micro_size(mode)
        tr = self.trainer(strategy, cfg.prefetch)
        losses: list[torch.Tensor] = []
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)

        def one_step() -> None:
            losses.append(tr.step(self.batches(len(losses), micro)))

        t = time_iterations(one_step, warmup=cfg.warmup, iters=cfg.steps, device=dev)
        cuda_peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0
        log_comms = mode == cfg.modes[0] and env.world_size > 1
        held, peak, log = instrumented_step(tr, self.batches(len(losses), micro), comms=log_comms)
        if log_comms:
            self.write_comms(strategy, tr, log)
        # Per-rank figures: the largest rank sets the memory a job needs. Losses: mean over ranks.
        mx = reduce_across_ranks([cuda_peak, held["param_bytes"], held["grad_bytes"], held["opt_bytes"],
                                  peak["total"], peak.get("max_unsharded_param", 0), peak.get("max_act", 0)], "max")
        first_last = reduce_across_ranks([losses[0].item(), losses[-1].item()], "mean")
        cuda_peak, pb, gb, ob, tracker, unsharded, act = (int(v) for v in mx)
        tokens = micro * cfg.grad_accum * env.world_size * self.gcfg.seq_len
        tps = tokens / t.median_s
        peak_tf = self.preset.peak_tflops("bf16") if cfg.precision == "bf16" else None
        mesh = self.mesh(strategy)
        row = {"strategy": strategy, "mode": mode, "model": describe_model(self.gcfg),
               "n_params": count_params(self.gcfg),
               "precision": cfg.precision, "optimizer": cfg.optimizer,
               "replicate": mesh[0] if mesh else 1,
               "shard": (mesh[1] if mesh else env.world_size) if tr.fsdp else 1,
               "prefetch": cfg.prefetch and tr.fsdp, "micro_batch": micro, "grad_accum": cfg.grad_accum,
               "effective_batch": micro * cfg.grad_accum * env.world_size, "seq_len": self.gcfg.seq_len,
               "tokens_per_step": tokens, "step_time_ms": t.median_s * 1e3, "step_time_min_ms": t.min_s * 1e3,
               "step_time_max_ms": t.max_s * 1e3, "tokens_per_s": tps, "tokens_per_s_per_rank": tps / env.world_size,
               "mfu": mfu(tps / env.world_size, self.gcfg, peak_tf),
               "peak_mem_bytes": cuda_peak if dev.type == "cuda" else tracker,
               "mem_method": "torch.cuda.max_memory_allocated" if dev.type == "cuda" else "torch MemTracker peak",
               "param_bytes": pb, "grad_bytes": gb, "opt_bytes": ob, "tracker_peak_bytes": tracker,
               "unsharded_peak_bytes": unsharded, "act_peak_bytes": act, "loss_first": first_last[0],
               "loss_last": first_last[1], "warmup": cfg.warmup, "steps": cfg.steps,
               "timing": f"{t.method}, {t.reduction}"}
        return row

    def write_comms(self, strategy: str, tr: Trainer, log: CollectiveLog) -> None:
        """Rows per (collective, group size) of one logged step, beside the analytic plan."""
        measured = log.per_kind()
        buckets = sum(r["count"] for r in measured if r["collective"] == "all_reduce") if strategy in ("ddp", "zero1") \
            else 1
        prec = precision_for(self.cfg.optimizer, 2 if self.dtype is not None and tr.fsdp else 4)
        plan = {(c["collective"], c["group_size"]): c for c in comm_plan(
            strategy, self.gcfg, self.env.world_size, prec, self.cfg.grad_accum, self.mesh(strategy), buckets)}
        for r in measured:
            want = plan.get((r["collective"], r["group_size"]), {})
            self.comms.write({"strategy": strategy, **r, "grad_accum": self.cfg.grad_accum,
                              "model_count": want.get("count", 0), "model_payload_bytes": want.get("payload_bytes", 0)})

    def plan(self, world: int) -> list[tuple[str, str]]:
        cfg = self.cfg
        return [(s, m) for s in cfg.strategies for m in cfg.modes if not (s == "single" and world > 1)]

    def complete(self) -> bool:
        """Every (strategy, mode) of every world size the sweep launches is in the run folder."""
        nnodes = self.env.nnodes
        return all(self.rows.done({"strategy": s, "mode": m, "world_size": w, "nnodes": nnodes})
                   for w in sorted(set(self.cfg.worlds) | {self.env.world_size}) for s, m in self.plan(w))

    def outcome(self) -> bool | None:
        """The sweep's outcome after this launch: complete (every launch's rows are in: publish), incomplete (the last
        launch ran and rows are missing), or None between launches (the run folder just stays for the next)."""
        if self.complete():
            return True
        return False if self.env.world_size >= max(self.cfg.worlds) else None

    def run(self) -> None:
        env, cfg = self.env, self.cfg
        todo = from_rank0([(s, m) for s, m in self.plan(env.world_size)
                           if not self.rows.done({"strategy": s, "mode": m})])
        for strategy, mode in tqdm(todo, disable=True if not env.is_main else None, desc=f"N={env.world_size}",
                                   leave=False):
            row = self.measure(strategy, mode)
            self.rows.write(row)
            gc.collect()  # DDP and FSDP hold reference cycles: free this trainer before the next one's peak
            if env.device.type == "cuda":
                torch.cuda.empty_cache()
            if env.is_main:
                tqdm.write(f"N={env.world_size} {strategy:6s} {mode:6s} step {row['step_time_ms']:8.1f} ms  "
                           f"{row['tokens_per_s']:9.0f} tok/s  peak {row['peak_mem_bytes'] / 2**20:7.1f} MiB  "
                           f"loss {row['loss_first']:.3f} -> {row['loss_last']:.3f}")
        if env.device.type == "cuda" and cfg.profile:
            self.profile()

    def profile(self) -> None:
        """GPU: each strategy's overlap profile (overlap.py), prefetch off and (FSDP2) on -> overlap_<tag>.csv."""
        cfg, env = self.cfg, self.env
        folder = self.out.folder
        writer = folder.writer(f"overlap_{self.tag}.csv", overlap.COLUMNS, overlap.KEY,
                               provenance(env, "1")) if folder is not None else NoWriter()
        micro = self.micro_size("strong")
        plan = [(s, p) for s in cfg.strategies if not (s == "single" and env.world_size > 1)
                for p in ((False, True) if s in FSDP_STRATEGIES else (False,))]
        todo = from_rank0([(s, p) for s, p in plan if not writer.done({"strategy": s, "prefetch": p})])
        for strategy, prefetch in todo:
            tr = self.trainer(strategy, prefetch)
            stats = overlap.profile_trainer(tr, lambda i: self.batches(i, micro))
            # Max over ranks: the slowest rank's exposed communication is what the step waits for.
            stats["exposed_comm_ms"], stats["comm_ms"] = reduce_across_ranks(
                [stats["exposed_comm_ms"], stats["comm_ms"]], "max")
            stats["exposed_fraction"] = stats["exposed_comm_ms"] / stats["comm_ms"] if stats["comm_ms"] else 0.0
            writer.write({"strategy": strategy, "prefetch": prefetch, **stats})
            del tr
            gc.collect()
            torch.cuda.empty_cache()



def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `--preflight ... -- COMMAND`: make's sweep, run by the preflight under the run folder's lock
    argv, then = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    cfg = parse_preset(Config, argv, preset, description=__doc__, prog="bench.py")
    world, local_world, nnodes = planned_world()
    try:
        if then and not cfg.preflight:
            raise ValueError("`-- COMMAND` (the sweep to run under the run folder's lock) goes with --preflight")
        cfg, hw = resolve(cfg)
        if cfg.preflight:
            return preflight(cfg, hw, then)
        check_world(cfg, world, local_world, nnodes)
        check_before_launch(run_plan(cfg, hw, world, nnodes), cfg, mode="append")  # the launcher's check pass
    except ValueError as e:  # before any process group: one line, exit 2, nothing written
        fail(str(e), code=2)
    with distributed(device="cpu" if hw.name == "cpu" else "auto", timeout_s=cfg.timeout_s) as env:
        print0(f"fsdp-scaling: N={env.world_size} ({env.nnodes} node(s), {env.backend}, {hw.label})")
        # the make sweep's launches append to the folder the preflight prepared; one plain launch starts afresh
        mode = "append" if (cfg.resume or cfg.append) else "fresh"
        with open_run(run_plan(cfg, hw, env.world_size, env.nnodes), cfg, env, provenance(env, BENCH_VERSION),
                      changed(cfg), mode=mode) as out:
            sweep = Run(cfg, hw, env, out)
            sweep.run()
            out.complete = sweep.outcome()
    return 0


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
