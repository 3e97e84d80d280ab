"""Memory and communication per rank at 8 ... 1024 ranks, measured in one CPU process.

The real GPT is wrapped by the real DDP / ZeroRedundancyOptimizer / FSDP2 code on PyTorch's fake
process group (`init_process_group("fake")`, torch.testing._internal.distributed.fake_pg, a private
module): this process *is* rank 0 of a W-rank job, every collective is issued with its real
shapes and returns without moving data. Parameters, gradients and optimizer state are real tensors
of their real per-rank sizes, so what rank 0 holds is measured exactly, and CommDebugMode counts
the collectives a step issues. The numbers computed from garbage (the gathered values are never
filled in) are ignored; only sizes and counts are kept.

For each (strategy, W) one row in results/at_scale.csv: measured bytes per category beside the
analytic model (memory_model.py: ZeRO's per-stage formula for what each strategy holds between steps
and FSDP's largest-unit term, with the exact variant that counts FSDP2's padding and
ZeroRedundancyOptimizer's whole-tensor partition; and the paper's stage of the strategy's name, which
differs for zero2: FSDP2 shards its parameters between steps, the paper's ZeRO-2 replicates them),
the tracker's peak by category, and collective counts and bytes per step beside the model.

    make fsdp-scaling-run                                  # runs this after the torchrun sweep
    PYTHONPATH=distributed-training python distributed-training/fsdp-scaling/at_scale.py \\
        --scale-worlds 8,64,512 --model small
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend

import memory_model as mm
from common.config import parse_preset
from common.dist import DistInfo, fail, print0
from common.failures import entrypoint
from common.hardware import cpu_model
from common.model import GPTConfig, count_params
from common.results import provenance
from common.runner import RunPlan, Table, check_before_launch, experiment, open_run, saved_config
from measure import instrumented_step
from settings import CONFIG_IGNORE, LAB, OPERATIONAL, Config, describe_model, gpt_config, preset as sweep_preset
from strategies import Trainer

BENCH_VERSION = "1"
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "hsdp")
COLUMNS = ["strategy", "world_size", "backend", "replicate", "shard", "model", "n_params", "optimizer",
           "param_bytes", "grad_bytes", "opt_bytes", "opt_bytes_worst_rank",
           "model_param_bytes", "model_grad_bytes", "model_opt_bytes", "paper_model_state_bytes",
           "exact_model_state_bytes",
           "unsharded_peak_bytes", "model_unsharded_bytes", "tracker_peak_bytes",
           "all_gathers", "reduce_scatters", "all_reduces", "broadcasts", "payload_bytes", "bus_bytes_per_rank",
           "model_payload_bytes", "model_bus_bytes_per_rank", "wall_s"]
KEY = ["strategy", "world_size"]


def measure_one(strategy: str, world: int, cfg: Config, gcfg: GPTConfig | None = None) -> dict:
    """Build the strategy as rank 0 of `world` fake ranks; two warm-up steps, then one instrumented step.
    The model is --model (the preset's: tiny, whatever the GPU: sizes, not speed, matter here) unless `gcfg` is
    given."""
    gcfg = gcfg or gpt_config(cfg)
    mesh = (world // cfg.node_size, cfg.node_size) if strategy == "hsdp" else None
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        t0 = time.perf_counter()
        tr = Trainer(strategy, gcfg, torch.device("cpu"), optimizer=cfg.optimizer, lr=cfg.lr, mesh_shape=mesh,
                     seed=cfg.seed)
        g = torch.Generator().manual_seed(cfg.seed)
        seq = torch.randint(0, gcfg.vocab_size, (1, gcfg.seq_len + 1), generator=g)
        micro = [(seq[:, :-1], seq[:, 1:])]  # one sequence: sizes, not throughput, are measured here
        for _ in range(2):  # creates the optimizer state; DDP rebuilds its buckets (a broadcast) in step 2
            tr.step(micro)
        held, peak, log = instrumented_step(tr, micro)
        worst = held["opt_bytes"]
        if strategy == "zero1":  # the rank owning the most elements bounds ZeRO-1's memory
            partition = tr.opt._partition_parameters()  # per rank: its param groups (private, torch 2.x)
            sizes = [sum(p.numel() for grp in groups for p in grp["params"]) for groups in partition]
            worst = held["opt_bytes"] * max(sizes) / max(1, sizes[0]) if sizes[0] else held["opt_bytes"]
        n_buckets = sum(1 for c in log.calls if c[0] == "all_reduce") if strategy in ("ddp", "zero1") else 1
    finally:
        dist.destroy_process_group()
    prec = mm.precision_for(cfg.optimizer)
    shard = mesh[1] if mesh else world
    ideal = mm.model_states(strategy, gcfg, world, prec, shard=shard)
    exact = mm.model_states(strategy, gcfg, world, prec, shard=shard, padded=True)
    plan = mm.comm_plan(strategy, gcfg, world, prec, accum=1, mesh=mesh, n_buckets=n_buckets)
    return {"strategy": strategy, "world_size": world, "backend": "fake", "replicate": world // shard if mesh else 1,
            "shard": shard if strategy in ("zero2", "zero3", "hsdp") else 1, "model": describe_model(gcfg),
            "n_params": count_params(gcfg), "optimizer": cfg.optimizer, **held, "opt_bytes_worst_rank": worst,
            "model_param_bytes": ideal["param"], "model_grad_bytes": ideal["grad"], "model_opt_bytes": ideal["opt"],
            "paper_model_state_bytes": mm.paper_model_states(strategy, gcfg, shard, prec),
            "exact_model_state_bytes": sum(exact.values()), "unsharded_peak_bytes": peak.get("max_unsharded_param", 0),
            "model_unsharded_bytes": mm.unsharded_peak(strategy, gcfg, prec, shard),
            "tracker_peak_bytes": peak["total"],
            **{k: v for k, v in log.summary().items()}, "model_payload_bytes": sum(c["payload_bytes"] for c in plan),
            "model_bus_bytes_per_rank": mm.bus_bytes(plan), "wall_s": round(time.perf_counter() - t0, 3)}


def preset(gpu: str = "auto") -> Config:
    """The sweep's preset for --gpu with the tiny model: one CPU process stands in for every rank at any GPU."""
    return replace(sweep_preset(gpu), model="tiny")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_preset(Config, argv, preset, description=__doc__, prog="at_scale.py")
    # --resume (given to the whole make sweep) continues this study's folder, or starts one
    mode = "append" if cfg.resume else "fresh"
    plan = RunPlan.beside(cfg.results_dir(LAB), "at_scale", [Table("at_scale.csv", COLUMNS, KEY)],
                          config=saved_config(cfg), ignore=CONFIG_IGNORE)
    try:
        check_before_launch(plan, cfg, mode)
    except ValueError as e:
        fail(str(e), 2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    env = DistInfo(0, 0, 1, 1, torch.device("cpu"), "fake")
    # One CPU process stands in for every rank, whatever GPUs the machine has: say so in the hardware column.
    prov = {**provenance(env, BENCH_VERSION), "hardware": f"{cpu_model()}, one process as rank 0 of a fake group"}
    changed = experiment(cfg, preset(cfg.gpu), OPERATIONAL)  # a flag of the sweep's ARGS: an experiment here too
    try:
        with open_run(plan, cfg, None, prov, changed, mode=mode) as run:
            _study(cfg, run.writers[0])
    finally:
        torch.set_num_threads(threads)
    return 0


def _study(cfg: Config, writer) -> None:
    for world in cfg.scale_worlds:
        for strategy in STRATEGIES:
            if writer.done({"strategy": strategy, "world_size": world}):
                continue
            row = measure_one(strategy, world, cfg)
            writer.write(row)
            total = row["param_bytes"] + row["grad_bytes"] + row["opt_bytes_worst_rank"]
            model = row["model_param_bytes"] + row["model_grad_bytes"] + row["model_opt_bytes"]
            print0(f"W={world:5d} {strategy:6s} state {total / 2**20:8.3f} MiB (model {model / 2**20:8.3f}) "
                   f"AG {row['all_gathers']:3d} RS {row['reduce_scatters']:3d} AR {row['all_reduces']:3d} "
                   f"BC {row['broadcasts']:3d}  {row['wall_s']:.2f} s")


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
