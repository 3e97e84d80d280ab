"""Harness overhead: does bench.py's timing distort what it measures? A benchmark, not a test.

    make allreduce-bench-overhead                  # CPU: 4 gloo ranks; on a GPU node: every GPU
    torchrun --nproc-per-node 8 overhead.py --collectives all_reduce,all_gather --max-bytes 1G

For each collective and size >= 1 MiB, in the same job and on the same buffers, it alternates
(--rounds times) bench.py's measurement (first call, adaptive warm-up, per-iteration timing, max over
ranks, median) with a bare tight loop: one timer around the same number of back-to-back calls and
one device sync, divided by the count, max over ranks (nccl-tests' BenchTime). Each side's result is
the median over rounds, and

    ratio = bare time / our time  (= our bandwidth / bare bandwidth; target >= 0.97)

goes to results/overhead_<hw>_ws<N>.csv. On a shared CPU the rounds disagree by more than the
overhead itself; the ratio's spread (min and max over rounds) is written beside it to say so.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

import collectives as C
from bench import LAB_DIR, Config as BenchConfig, resolve, run_folder_path, time_collective
from common.config import config_dict, parse_config, parse_size
from common.dist import (DistInfo, distributed, fail, from_rank0, launched_by_torchrun, planned_world, print0,
                         reduce_across_ranks)
from common.failures import entrypoint
from common.hardware import CHOICES
from common.results import provenance
from common.runs import PROMOTE_CHOICES, RunError, RunFolder, check_free, experiment_flags, results_path

COLUMNS = ["collective", "size_bytes", "dtype", "preset", "iters", "ours_us", "bare_us", "ratio", "ratio_min",
           "ratio_max", "rounds"]


@dataclass(frozen=True)
class Config:
    collectives: tuple[str, ...] = field(default=("all_reduce", "all_gather"), metadata={"help": "collectives"})
    min_bytes: str = field(default="1M", metadata={"help": "smallest size (the target is stated for >= 1 MiB)"})
    max_bytes: str = field(default="auto", metadata={"help": "largest size; auto = 64M on CPU, 4G on GPU"})
    rounds: int = field(default=5, metadata={"help": "alternations of ours and bare per size"})
    target_ms: float = field(default=150.0, metadata={"help": "as bench.py --target-ms"})
    gpu: str = field(default="auto", metadata={"help": f"hardware preset ({', '.join(CHOICES)})"})
    out: str = field(default="", metadata={"help": "where the finished CSV goes; default "
                                                  "results/overhead_<hw>_ws<N>.csv"})
    promote: str = field(default="auto", metadata={"help": "when complete: auto, replace, merge or no (see bench.py)",
                                                   "choices": PROMOTE_CHOICES})

    def __post_init__(self):
        BenchConfig(collectives=self.collectives, min_bytes=self.min_bytes, max_bytes=self.max_bytes,
                    target_ms=self.target_ms, gpu=self.gpu)  # the same validation as the runner
        if self.rounds < 1:
            raise ValueError(f"--rounds must be a positive integer, got {self.rounds}")


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


def out_path(cfg: Config, preset, world: int) -> Path:
    return results_path(cfg.out, LAB_DIR, f"overhead_{preset.run_tag(world)}.csv")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(Config, argv, description=__doc__, prog="overhead.py")
    world, local, _ = planned_world()
    try:
        bench_cfg, preset = resolve(BenchConfig(collectives=cfg.collectives, min_bytes=cfg.min_bytes,
                                                max_bytes=cfg.max_bytes, target_ms=cfg.target_ms, gpu=cfg.gpu), local)
        if not launched_by_torchrun():
            check_free(run_folder_path(out_path(cfg, preset, world)))
    except (ValueError, RunError) as e:
        print(f"overhead.py: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    changed = experiment_flags(cfg, Config(gpu=cfg.gpu, out=cfg.out, promote=cfg.promote))
    with distributed(device="cpu" if preset.name == "cpu" else "cuda", timeout_s=bench_cfg.timeout_s) as env:
        group, n = torch.distributed.group.WORLD, env.world_size
        path = out_path(cfg, preset, n)
        folder, error = None, None
        if env.is_main:
            try:
                folder = RunFolder.open(run_folder_path(path), path.parent)
            except RunError as e:
                error = str(e)
        if (error := from_rank0(error)) is not None:
            fail(error, 2)
        writer = folder.writer(path.name, COLUMNS, ["collective", "size_bytes"], provenance(env, "1"),
                               config=config_dict(replace(cfg, max_bytes=bench_cfg.max_bytes, gpu=preset.name))) \
            if folder else None
        lo, hi = parse_size(cfg.min_bytes), parse_size(bench_cfg.max_bytes)
        for coll in cfg.collectives:
            if coll == "send_recv" and n < 2:
                continue
            size = lo
            while size <= hi:
                count, actual = C.shape(coll, size, n, torch.float32)
                bufs = C.allocate(coll, count, n, torch.float32, env.device)
                C.fill(coll, bufs, env.rank, n)
                call = C.make_call(coll, bufs, env.rank, n, group)
                ours, bare, iters = [], [], 0
                for _ in range(cfg.rounds):
                    t, _warm = time_collective(call, bench_cfg, env, group)
                    iters = len(t.samples_s)
                    ours.append(t.median_s)
                    bare.append(bare_loop(call, iters, env, group))
                ratios = [b / o for o, b in zip(ours, bare)]
                row = {"collective": coll, "size_bytes": actual, "dtype": "fp32", "preset": preset.name, "iters": iters,
                       "ours_us": round(statistics.median(ours) * 1e6, 3),
                       "bare_us": round(statistics.median(bare) * 1e6, 3), "rounds": cfg.rounds,
                       "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4)}
                row["ratio"] = round(row["bare_us"] / row["ours_us"], 4)
                if writer:
                    writer.write(row)
                print0(f"{coll:>14} {actual:>11} B  ours {row['ours_us']:>10.1f} us  bare {row['bare_us']:>10.1f} us"
                       f"  ratio {row['ratio']:.3f} (rounds {row['ratio_min']:.3f}..{row['ratio_max']:.3f})")
                size *= 2
        if folder:
            for line in folder.finish(complete=True, changed=changed, promote=cfg.promote):
                print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
