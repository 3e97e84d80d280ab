"""Harness overhead: does bench.py's timing distort what it measures? A benchmark, not a test.

    make allreduce-bench-overhead                  # CPU: 4 gloo ranks; on a GPU node: every GPU
    torchrun --nproc-per-node 8 overhead.py --collectives all_reduce,all_gather --max-bytes 1G

For each collective and size >= 1 MiB, in the same job and on the same buffers, it alternates
(--rounds times) bench.py's measurement (first call, adaptive warm-up, per-iteration timing, max over
ranks, median) with a bare tight loop: one timer around the same number of back-to-back calls and
one device sync, divided by the count, max over ranks (nccl-tests' BenchTime). Each side's result is
the median over rounds, and

    ratio = bare time / our time  (= our bandwidth / bare bandwidth; target >= 0.97)

goes to results/overhead_<hw>_ws<N>.csv (through runs/overhead_<hw>_ws<N>/, as bench.py's sweep; --resume
continues an interrupted one). On a shared CPU the rounds disagree by more than the overhead itself; the
ratio's spread (min and max over rounds) is written beside it to say so.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field, replace

import torch

import bench
import collectives as C
from common.config import parse_preset, parse_size
from common.dist import DistInfo, distributed, from_rank0, planned_world, print0, reduce_across_ranks
from common.failures import entrypoint
from common.hardware import GPUPreset, get_preset
from common.results import provenance
from common.runner import RunFlags, RunPlan, Table, check_before_launch, experiment, open_run, saved_config

COLUMNS = ["collective", "size_bytes", "dtype", "preset", "iters", "ours_us", "bare_us", "ratio", "ratio_min",
           "ratio_max", "rounds"]
KEY = ["collective", "size_bytes"]


@dataclass(frozen=True, kw_only=True)
class Config(RunFlags):
    collectives: tuple[str, ...] = field(default=("all_reduce", "all_gather"), metadata={"help": "collectives"})
    min_bytes: str = field(default="1M", metadata={"help": "smallest size (the target is stated for >= 1 MiB)"})
    max_bytes: str = field(metadata={"help": "largest size"})
    rounds: int = field(default=5, metadata={"help": "alternations of ours and bare per size"})
    target_ms: float = field(default=150.0, metadata={"help": "as bench.py --target-ms"})

    def __post_init__(self):
        self.bench()  # the same validation as the runner
        if self.rounds < 1:
            raise ValueError(f"--rounds must be a positive integer, got {self.rounds}")

    def bench(self) -> bench.Config:
        """bench.py's settings for the same sizes: its timing (first call, warm-up, iterations) is what is held here
        against a bare loop."""
        return replace(bench.cpu(), collectives=self.collectives, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
                       target_ms=self.target_ms, gpu=self.gpu)


def preset(gpu: str = "auto") -> Config:
    """bench.py's preset's largest message (--gpu picks it): 64 MiB on CPU, 4 GiB on GPUs."""
    return Config(gpu=get_preset(gpu).name, max_bytes=bench.preset(gpu).max_bytes)


def bare_loop(call, iters: int, env: DistInfo, group) -> float:
    """Seconds per call of `iters` back-to-back calls under one host timer, max over ranks."""
    sync = (lambda: torch.cuda.synchronize(env.device)) if env.device.type == "cuda" else (lambda: None)
    torch.distributed.barrier(group=group)
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    sync()
    return reduce_across_ranks([(time.perf_counter() - t0) / iters], "max", group)[0]


def run_plan(cfg: Config, hw: GPUPreset, world: int) -> RunPlan:
    """results/overhead_<hw>_ws<N>.csv, written first into runs/overhead_<hw>_ws<N>/."""
    name = f"overhead_{hw.run_tag(world)}"
    return RunPlan.beside(cfg.results_dir(bench.LAB_DIR), name, [Table(f"{name}.csv", COLUMNS, KEY)],
                          config=saved_config(cfg))


def main(argv: list[str] | None = None) -> int:
    cfg = parse_preset(Config, argv, preset, description=__doc__, prog="overhead.py")
    world, local, _ = planned_world()
    try:
        bench_cfg, hw = bench.resolve(cfg.bench(), local)
        cfg = replace(cfg, gpu=hw.name)
        check_before_launch(run_plan(cfg, hw, world), cfg)
    except ValueError as e:  # RunError and SchemaMismatch are ValueErrors
        print(f"overhead.py: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    changed = experiment(cfg, preset(cfg.gpu))
    with distributed(device="cpu" if hw.name == "cpu" else "cuda", timeout_s=bench_cfg.timeout_s) as env, \
            open_run(run_plan(cfg, hw, env.world_size), cfg, env, provenance(env, "1"), changed) as run:
        (writer,) = run.writers
        group, n = torch.distributed.group.WORLD, env.world_size
        lo, hi = parse_size(cfg.min_bytes), parse_size(cfg.max_bytes)
        for coll in cfg.collectives:
            if coll == "send_recv" and n < 2:
                continue
            size = lo
            while size <= hi:
                count, actual = C.shape(coll, size, n, torch.float32)
                if not from_rank0(writer.done({"collective": coll, "size_bytes": actual})):  # --resume
                    row = measure(coll, count, actual, cfg, bench_cfg, env, group)
                    writer.write({**row, "preset": hw.name})
                    print0(f"{coll:>14} {actual:>11} B  ours {row['ours_us']:>10.1f} us  bare "
                           f"{row['bare_us']:>10.1f} us  ratio {row['ratio']:.3f} (rounds {row['ratio_min']:.3f}.."
                           f"{row['ratio_max']:.3f})")
                size *= 2
    return 0


def measure(coll: str, count: int, actual: int, cfg: Config, bench_cfg: bench.Config, env: DistInfo, group) -> dict:
    """--rounds alternations of bench.py's timing and a bare loop on the same buffers: the medians and their ratio."""
    bufs = C.allocate(coll, count, env.world_size, torch.float32, env.device)
    C.fill(coll, bufs, env.rank, env.world_size)
    call = C.make_call(coll, bufs, env.rank, env.world_size, group)
    ours, bare, iters = [], [], 0
    for _ in range(cfg.rounds):
        t, _warm = bench.time_collective(call, bench_cfg, env, group)
        iters = len(t.samples_s)
        ours.append(t.median_s)
        bare.append(bare_loop(call, iters, env, group))
    ratios = [b / o for o, b in zip(ours, bare)]
    row = {"collective": coll, "size_bytes": actual, "dtype": "fp32", "iters": iters,
           "ours_us": round(statistics.median(ours) * 1e6, 3), "bare_us": round(statistics.median(bare) * 1e6, 3),
           "rounds": cfg.rounds, "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4)}
    row["ratio"] = round(row["bare_us"] / row["ours_us"], 4)
    return row


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
