"""allreduce-bench: what the interconnect really delivers, measured the way nccl-tests does it.

Sweeps all_reduce, all_gather, reduce_scatter, broadcast, all_to_all and send/recv (a ring shift)
over message sizes (x2 steps) through torch.distributed: NCCL on GPUs, gloo over TCP on CPUs. Per
size it times the collective, takes the max over ranks of every iteration, and writes one CSV row:
median/min/max time, algbw and busbw exactly as nccl-tests defines them (common/collective_cost.py),
and `wrong`, the elements that differ from an exact expectation after the timed loop. report.py fits
the alpha-beta model and draws the plots from the CSVs; topology.py documents the links.

Two statistics of time. Ours, `time_us` (and algbw/busbw): the median over iterations of each
iteration's max over ranks, robust to one slow iteration and honest about the slowest rank.
nccl-tests' headline, `time_loop_us` and `busbw_loop_GBps`: each rank's loop time divided by the
iterations, averaged over ranks (src/common.cu, -a 1); report.py compares all_reduce_perf with this one.

    make allreduce-bench                         # CPU: 4 gloo ranks, 1 KiB..64 MiB, report included
    make allreduce-bench-gpu                     # 1 GPU (algbw only: busbw is 0 on one rank)
    make allreduce-bench                         # on a GPU node: one rank per GPU, 1 KiB..4 GiB, NCCL
    make allreduce-bench-run NNODES=2 MASTER_ADDR=node0      # on every node, then -report once
    sbatch --nodes=2 slurm/lab.sbatch allreduce-bench        # the same under Slurm
    make allreduce-bench NCCL_TESTS=1            # also nccl-tests' all_reduce_perf, side by side
    torchrun --nproc-per-node 4 bench.py --collectives all_reduce --dtypes fp32,bf16 --max-bytes 1G

Timing (common.timing.time_iterations): one untimed first call per size (connection set-up,
allocation) whose time, max over ranks, sets the warm-up and iteration counts so every size costs
about --target-ms; then back-to-back iterations, each timed on its own (CUDA events or
perf_counter) and reduced by max over ranks, as nccl-tests -I 1. --barrier puts a barrier before
every iteration instead (nccl-tests -z 1, ml-engineering's all_reduce_bench). A rank that dies or
stops answering ends the run after --timeout-s with one line and exit code 4 (common.failures); the
rows measured so far stay in the run folder and --resume continues from there.

Presets (cpu(), cuda()): the same sweep, to 64 MiB on CPU and 4 GiB on GPUs; --gpu picks one and every
other flag overrides it (--help shows its values). Where results go (common.runner): the run writes into
runs/sweep_<hw>_ws<N>[_n<nodes>]/ under a lock; a complete sweep with the preset's settings then replaces
results/sweep_<...>.csv (and its config and topology_<hw>.md) atomically. A sweep with other settings
(--max-bytes, --iters, ...) is an experiment: it stays in runs/ unless --promote merge|replace asks otherwise.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

import collectives as C
from common.collective_cost import COLLECTIVES, bus_bandwidth
from common.config import format_size, parse_preset, parse_size
from common.dist import DistInfo, distributed, fail, from_rank0, planned_world, print0, select_device
from common.failures import PEER_LOST, classify, entrypoint, report, short
from common.hardware import GPUPreset, device_kind, get_preset
from common.results import provenance
from common.runner import (RESUME_MAY_CHANGE, RunFlags, RunPlan, Table, check_before_launch, experiment, open_run,
                           saved_config)
from common.runs import shown
from common.timing import Timing, time_iterations

BENCH_VERSION = "1"
LAB_DIR = Path(__file__).resolve().parent
# Other labs (fsdp-scaling's projection, the planner's --calibrate) read these columns from
# results/sweep_*.csv: keep their names and meaning stable.
COLUMNS = ["collective", "size_bytes", "count", "dtype", "world_size", "nnodes", "backend", "hardware", "time_us",
           "time_min_us", "time_max_us", "algbw_GBps", "busbw_GBps", "time_loop_us", "busbw_loop_GBps", "wrong",
           "warmup", "iters", "timing", "preset", "nccl_env", "moves_data", "note"]
KEY = ["collective", "dtype", "size_bytes"]
ONE_RANK_NOTE = "1 rank: no byte crosses a link, busbw is 0 by definition"
NO_TRANSFER_NOTE = "1 rank, in place: no byte moves at all; not a transfer (kept out of peaks and fits)"


@dataclass(frozen=True, kw_only=True)
class Config(RunFlags):
    collectives: tuple[str, ...] = field(default=COLLECTIVES, metadata={"help": "collectives to sweep"})
    dtypes: tuple[str, ...] = field(default=("fp32",), metadata={"help": "dtypes: fp32, bf16, fp16"})
    min_bytes: str = field(default="1K", metadata={"help": "smallest message (nccl-tests -b; K/M/G binary)"})
    max_bytes: str = field(metadata={"help": "largest message (-e)"})
    step_factor: int = field(default=2, metadata={"help": "size multiplier between rows (-f)"})
    iters: int = field(default=20, metadata={"help": "most timed iterations per size (-n)"})
    min_iters: int = field(default=5, metadata={"help": "fewest timed iterations per size"})
    warmup: int = field(default=5, metadata={"help": "most warm-up calls per size, after the first call (-w)"})
    target_ms: float = field(default=150.0, metadata={"help": "timed work per size the iteration count aims at"})
    barrier: bool = field(default=False, metadata={"help": "barrier before every timed iteration (-z 1)"})
    timeout_s: float = field(default=120.0, metadata={"help": "a collective waiting longer ends the run"})
    topology: bool = field(default=True, metadata={"help": "also write topology_<hw>.md beside the CSV (rank 0)"})

    def __post_init__(self):
        bad = [c for c in self.collectives if c not in COLLECTIVES]
        if bad or not self.collectives:
            raise ValueError(f"unknown collective {bad[0] if bad else '(none)'!r}; valid: {', '.join(COLLECTIVES)}")
        bad = [d for d in self.dtypes if d not in C.DTYPES]
        if bad or not self.dtypes:
            raise ValueError(f"unknown dtype {bad[0] if bad else '(none)'!r}; valid: {', '.join(C.DTYPES)}")
        if parse_size(self.max_bytes) < parse_size(self.min_bytes):
            raise ValueError(f"size range reversed: --min-bytes {self.min_bytes} > --max-bytes {self.max_bytes}")
        for flag, value in (("--iters", self.iters), ("--min-iters", self.min_iters)):
            if value < 1:
                raise ValueError(f"{flag} must be a positive integer, got {value}")
        if self.min_iters > self.iters:
            raise ValueError(f"--min-iters {self.min_iters} exceeds --iters {self.iters}; the fewest iterations "
                             "cannot be more than the most")
        if self.step_factor < 2:
            raise ValueError(f"--step-factor must be an integer >= 2, got {self.step_factor}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")
        for flag, value in (("--target-ms", self.target_ms), ("--timeout-s", self.timeout_s)):
            if value <= 0:
                raise ValueError(f"{flag} must be > 0, got {value:g}")


def cpu() -> Config:
    """gloo ranks on CPU cores: 1 KiB to 64 MiB (a 4-rank sweep in about a minute on 2 cores)."""
    return Config(gpu="cpu", max_bytes="64M")


def cuda(name: str = "h100") -> Config:
    """NCCL on GPUs: 1 KiB to 4 GiB, where the largest messages reach the links' asymptotic bandwidth."""
    return Config(gpu=name, max_bytes="4G")


def preset(gpu: str = "auto") -> Config:
    """The preset --gpu picks (auto: this machine's hardware)."""
    hw = get_preset(gpu)
    return cpu() if hw.name == "cpu" else cuda(hw.name)


# Not measurements: changing them does not make a run an experiment (common.runner.experiment).
OPERATIONAL = ("timeout_s", "topology")
CONFIG_IGNORE = (*RESUME_MAY_CHANGE, "timeout_s", "topology")


def resolve(cfg: Config, local_ranks: int = 1) -> tuple[Config, GPUPreset]:
    """The hardware preset (--gpu auto named) and the memory the largest message needs: ValueError (exit 2)."""
    hw = get_preset(cfg.gpu)
    device_kind(hw)
    check_memory(parse_size(cfg.max_bytes), hw, local_ranks)
    return replace(cfg, gpu=hw.name), hw


def _available_bytes(preset: GPUPreset) -> tuple[int, str]:
    if preset.name != "cpu":
        return torch.cuda.get_device_properties(select_device("cuda")).total_memory, "of GPU memory"  # this rank's
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        return kib << 10, "of memory available on this node"
    except (OSError, StopIteration, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "of memory on this node"


def check_memory(max_bytes: int, preset: GPUPreset, local_ranks: int) -> None:
    """The largest message must fit: each rank holds up to 3 buffers of it (input, output, the check's
    expected result), every rank of a CPU node in the same memory."""
    need = 3 * max_bytes * (local_ranks if preset.name == "cpu" else 1)
    have, where = _available_bytes(preset)
    if need > have:
        raise ValueError(f"--max-bytes {format_size(max_bytes)} needs about {need / 2**30:.1f} GiB (3 buffers per "
                         f"rank{f' x {local_ranks} ranks' if preset.name == 'cpu' and local_ranks > 1 else ''}), "
                         f"more than the {have / 2**30:.1f} GiB {where}; lower --max-bytes")


def check_sizes(cfg: Config, n: int) -> None:
    """Every collective asked for has a message in the size range at n ranks (all_gather, reduce_scatter and
    all_to_all split a message into n parts of at least 16 bytes); send_recv needs a peer, except in the
    default sweep on one rank, where it is left out. ValueError (exit 2) otherwise: a sweep with no rows."""
    plan = {r["collective"] for r in sweep_plan(cfg, n)}
    for coll in cfg.collectives:
        if coll in plan or (coll == "send_recv" and n == 1 and len(cfg.collectives) > 1):
            continue
        if coll == "send_recv":
            raise ValueError("send_recv needs at least 2 ranks (a ring shift); run it with NPROC >= 2")
        need = n * C.ALIGN_BYTES
        raise ValueError(f"{coll} on {n} ranks splits a message into {n} parts of at least {C.ALIGN_BYTES} bytes: "
                         f"--max-bytes {cfg.max_bytes} is below {format_size(need)}; raise --max-bytes")


def changed(cfg: Config) -> list[str]:
    """The measurement flags in which this (resolved) run differs from its preset's sweep."""
    return experiment(cfg, preset(cfg.gpu), OPERATIONAL)


def sweep_path(cfg: Config, env: DistInfo, hw: GPUPreset) -> Path:
    """Where the finished sweep goes (what the report reads): <results>/sweep_<hw>_ws<N>[_n<nodes>].csv."""
    return cfg.results_dir(LAB_DIR) / f"sweep_{hw.run_tag(env.world_size, env.nnodes)}.csv"


def run_plan(cfg: Config, env: DistInfo, hw: GPUPreset) -> RunPlan:
    """The sweep's CSV, written first into runs/<its stem>/ beside the results folder."""
    path = sweep_path(cfg, env, hw)
    return RunPlan.beside(path.parent, path.stem, [Table(path.name, COLUMNS, KEY)],
                          config={**saved_config(cfg), "nccl_env": comm_env()}, ignore=CONFIG_IGNORE)


def comm_env() -> dict[str, str]:
    """The NCCL settings in force (NCCL_*, TORCH_NCCL_*); paths and addresses masked (they may name hosts)."""
    def masked(k: str, v: str) -> str:
        return "<masked>" if "/" in v or k == "NCCL_COMM_ID" or "ADDR" in k or "HOST" in k else v
    return {k: masked(k, v) for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TORCH_NCCL_"))}


def sizes(cfg: Config) -> list[int]:
    out, s, hi = [], parse_size(cfg.min_bytes), parse_size(cfg.max_bytes)
    while s <= hi:
        out.append(s)
        s *= cfg.step_factor
    return out


def sweep_plan(cfg: Config, n: int) -> list[dict]:
    """Every row to measure: collective, dtype, actual size and count (nccl-tests' rounding)."""
    rows, seen = [], set()
    for coll in cfg.collectives:
        if coll == "send_recv" and n < 2:
            continue  # no peer to send to
        for dt in cfg.dtypes:
            for req in sizes(cfg):
                count, size = C.shape(coll, req, n, C.DTYPES[dt])
                if count > 0 and (coll, dt, size) not in seen:
                    seen.add((coll, dt, size))
                    rows.append({"collective": coll, "dtype": dt, "size_bytes": size, "count": count})
    return rows


def plan_iterations(first_call_s: float, cfg: Config) -> tuple[int, int]:
    """(warm-up calls, timed iterations) so a size costs about target_ms: 20 small calls, 3 big ones."""
    budget = cfg.target_ms / 1e3 / max(first_call_s, 1e-9)
    iters = max(min(cfg.min_iters, cfg.iters), min(cfg.iters, round(budget)))
    warmup = max(min(1, cfg.warmup), min(cfg.warmup, round(budget / 4)))
    return warmup, iters


def time_collective(call, cfg: Config, env: DistInfo, group) -> tuple[Timing, int]:
    """Time one prepared call: first call (max over ranks) -> warm-up and iterations -> the timed loop."""
    first = time_iterations(call, warmup=0, iters=1, device=env.device, group=group)
    warmup, iters = plan_iterations(first.max_s, cfg)
    t = time_iterations(call, warmup=warmup, iters=iters, device=env.device, group=group, barrier=cfg.barrier)
    return t, warmup + 1


def measure(row: dict, cfg: Config, env: DistInfo, group) -> dict:
    """Time one (collective, dtype, size) and check its result; returns the CSV row (every rank)."""
    coll, n, dtype = row["collective"], env.world_size, C.DTYPES[row["dtype"]]
    bufs = C.allocate(coll, row["count"], n, dtype, env.device)
    C.fill(coll, bufs, env.rank, n)
    call = C.make_call(coll, bufs, env.rank, n, group)
    t, warmup = time_collective(call, cfg, env, group)
    # The check, after the timed loop as nccl-tests does: fresh exact data, one call, compare.
    C.fill(coll, bufs, env.rank, n)
    call()
    wrong = torch.tensor([C.count_wrong(bufs.out, C.expected(coll, row["count"], env.rank, n, dtype, env.device))],
                         dtype=torch.int64, device=env.device)
    dist.all_reduce(wrong, group=group)  # summed over ranks, as nccl-tests' #wrong
    algbw, busbw = bus_bandwidth(coll, row["size_bytes"], t.median_s, n)
    busbw_loop = bus_bandwidth(coll, row["size_bytes"], t.loop_s, n)[1]
    return {**row, "time_us": _us(t.median_s), "time_min_us": _us(t.min_s), "time_max_us": _us(t.max_s),
            "algbw_GBps": _sig(algbw), "busbw_GBps": _sig(busbw) if n > 1 else 0.0, "time_loop_us": _us(t.loop_s),
            "busbw_loop_GBps": _sig(busbw_loop) if n > 1 else 0.0, "wrong": int(wrong.item()),
            "warmup": warmup, "iters": len(t.samples_s),
            "timing": f"{t.method}, {'barrier each' if cfg.barrier else 'back-to-back'}, {t.reduction}",
            "moves_data": C.moves_data(coll, n), "note": _note(coll, n)}


def _note(coll: str, n: int) -> str:
    if not C.moves_data(coll, n):
        return NO_TRANSFER_NOTE
    return ONE_RANK_NOTE if n == 1 else ""


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


def run(cfg: Config, env: DistInfo, hw: GPUPreset) -> int:
    """The sweep on every rank; rank 0 writes the run folder and publishes it. Returns the exit code."""
    # Our own group, so the timeout is --timeout-s whatever launched us (torchrun, tests).
    group = dist.new_group(timeout=timedelta(seconds=cfg.timeout_s))
    nccl = comm_env()
    with open_run(run_plan(cfg, env, hw), cfg, env, provenance(env, BENCH_VERSION), changed(cfg)) as run:
        (writer,) = run.writers
        todo = from_rank0([r for r in sweep_plan(cfg, env.world_size) if not writer.done(r)], group)
        if run.folder is not None:
            if cfg.topology:
                from topology import write_topology
                write_topology(run.folder.file(f"topology_{hw.tag}.md"), env)
            print(f"allreduce-bench: {len(todo)} rows on {env.world_size} ranks ({env.nnodes} node(s), {env.backend}, "
                  f"{env.device.type}) -> {shown(run.path)}" + (f" ({writer.n_done} already there)" if cfg.resume
                                                               else ""), flush=True)
        if env.world_size == 1:
            print0(f"note: {ONE_RANK_NOTE}; algbw is still measured")
        code = _sweep(cfg, env, group, todo, writer if run.folder is not None else None, nccl, hw)
        run.complete = code == 0
    return code


def _sweep(cfg: Config, env: DistInfo, group, todo: list[dict], writer, nccl: dict, hw: GPUPreset) -> int:
    wrong_rows, header = 0, None
    for row in tqdm(todo, unit="row", disable=True if not env.is_main else None, leave=False):
        what = f"{row['collective']} of {format_size(row['size_bytes'])} {row['dtype']}"
        try:
            result = measure(row, cfg, env, group)
        except torch.cuda.OutOfMemoryError:
            fail(f"out of GPU memory for {what}; lower --max-bytes", 1)
        except RuntimeError as e:  # gloo raises on its timeout or a closed peer socket; NCCL via its watchdog
            kept = f"{writer.n_done} row(s)" if writer else "rows"
            kind, code = classify(e) or ("peer", PEER_LOST)
            report(f"{what} failed: {short(e)}. A rank died or stopped answering (--timeout-s {cfg.timeout_s:g}); "
                   f"the run folder keeps the {kept} measured before; rerun with --resume to continue", code, kind)
            return code
        result.update(preset=hw.name, nccl_env=";".join(f"{k}={v}" for k, v in nccl.items()) or "default")
        wrong_rows += result["wrong"] > 0
        if writer:
            writer.write(result)
            if header != (row["collective"], row["dtype"]):
                header = (row["collective"], row["dtype"])
                tqdm.write(f"# {row['collective']} {row['dtype']}\n" + _line(dict(zip(TABLE, TABLE))))
            tqdm.write(_line(result))
    if wrong_rows:
        print0(f"error: {wrong_rows} rows returned wrong data (column `wrong`): the collective is broken here")
        return 1
    return 0


TABLE = ("size_bytes", "count", "time_us", "time_min_us", "time_max_us", "algbw_GBps", "busbw_GBps", "wrong", "iters")


def _line(r: dict) -> str:
    """One row of the stdout table, nccl-tests style (the header when given the column names)."""
    cells = [f"{r[c]:.1f}" if isinstance(r[c], float) and c.startswith("time") else
             f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in TABLE]
    return " ".join(f"{c:>{w}}" for c, w in zip(cells, (12, 11, 11, 11, 11, 10, 10, 5, 5)))


def main(argv: list[str] | None = None) -> int:
    cfg = parse_preset(Config, argv, preset, description=__doc__, prog="bench.py")
    world, local, nnodes = planned_world()
    try:
        cfg, hw = resolve(cfg, local)
        check_sizes(cfg, world)
        check_before_launch(run_plan(cfg, DistInfo(0, 0, world, max(1, world // nnodes), None, ""), hw), cfg)
    except ValueError as e:  # RunError and SchemaMismatch are ValueErrors
        print(f"bench.py: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    with distributed(device="cpu" if hw.name == "cpu" else "cuda", timeout_s=cfg.timeout_s) as env:
        return run(cfg, env, hw)


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
