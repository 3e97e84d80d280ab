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

import torch

import collectives as C
from bench import LAB_DIR, Config as BenchConfig, resolve, time_collective
from common.config import config_dict, parse_config, parse_size
from common.dist import DistInfo, distributed, print0, reduce_across_ranks
from common.hardware import CHOICES
from common.results import ResultsWriter, provenance

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
    out: str = field(default="", metadata={"help": "CSV path; default results/overhead_<hw>_ws<N>.csv"})

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


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(Config, argv, description=__doc__.split("\n\n")[0], prog="overhead.py")
    try:
        bench_cfg, preset = resolve(BenchConfig(collectives=cfg.collectives, min_bytes=cfg.min_bytes,
                                                max_bytes=cfg.max_bytes, target_ms=cfg.target_ms, gpu=cfg.gpu))
    except ValueError as e:
        print(f"overhead.py: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    with distributed(device="cpu" if preset.name == "cpu" else "cuda", timeout_s=bench_cfg.timeout_s) as env:
        group, n = torch.distributed.group.WORLD, env.world_size
        path = cfg.out or LAB_DIR / "results" / f"overhead_{preset.run_tag(n)}.csv"
        writer = ResultsWriter(path, COLUMNS, ["collective", "size_bytes"], provenance(env, "1"),
                               config=config_dict(replace(cfg, max_bytes=bench_cfg.max_bytes, gpu=preset.name)),
                               enabled=env.is_main)
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
                writer.write(row)
                print0(f"{coll:>14} {actual:>11} B  ours {row['ours_us']:>10.1f} us  bare {row['bare_us']:>10.1f} us"
                       f"  ratio {row['ratio']:.3f} (rounds {row['ratio_min']:.3f}..{row['ratio_max']:.3f})")
                size *= 2
        print0(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
