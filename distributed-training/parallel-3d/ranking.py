"""parallel-3d's ranking set: does the planner pick the layout that is fastest here, on this machine?

A planner is used to choose: its first answer must be the fastest plan, or near it, and its order of the
others should be the measured order. This benchmark measures that on any machine. It trains the tiny GPT
(6 layers, hidden 64) with parallel-3d's own runner (train.py: DTensor TP + SP, pipelining, FSDP2, recompute)
in 39 layouts, in six groups (world 4 and 8 gloo ranks; global batch 4, 8, 16 and 8, 16, 32 sequences: micro-batches
of 1-2 where the batch is small, 2-4 where it is larger; full recompute and ZeRO-2 beside the defaults), one CSV row
per layout, and measures first, in the same session, what the planner is allowed to know of this machine (the
calibration):

- the alpha-beta fit of an all_reduce sweep at each world size (allreduce-bench's runner, its fit:
  common.collective_fit): latency and bus rate of the collectives under that many processes;
- GEMM rates: fp32 torch.mm at 512^3 and at the tiny GPT's own 64 x 64 x 256 on one thread; a memory rate (an fp32
  add over 8M elements);
- the host's cost per unit of work the framework issues (planner/model/floor.py counts the units): a tiny GPT block's
  forward and backward over the aten ops it dispatches (op_us: module calls, autograd and the dispatcher included),
  the same block under parallel-3d's TP plan per DTensor op, AdamW's step per op, FSDP2's hooks per unit and
  micro-batch, a c10d call; the cores the ranks share and the load average.

The planner (planner/evidence/ranking.py) prices every layout from those numbers alone, never from the step times it
predicts, and the evidence reports per group the rank correlation, whether its pick is within 10% of the best, and
its error (absolute and signed).

    make parallel-3d-ranking                                  # CPU: calibration + every layout (~20 min on 2 cores)
    make parallel-3d-ranking ARGS="--resume"                  # continue an interrupted run
    PYTHONPATH=distributed-training python distributed-training/parallel-3d/ranking.py --groups ws4-gb4
    python -m planner.evidence.ranking                                 # the planner's predictions beside the rows

GPUs: not this benchmark's purpose (the planner's GPU rows are parallel-3d's runs_<gpu>.csv); on a GPU machine it
still runs on the CPU (gloo). Steps here are host-bound and the cores are shared: 8 ranks time-share 2 cores, which
the planner must know (planner/evidence/ranking.py prices the sharing). Measure on an otherwise idle machine: every
row records the 1-minute load average it ran under. Rows go into runs/ranking_cpu/ as they are measured (each
launch's rows appended at once, a progress bar over layouts) and reach results/ranking_cpu.csv and
results/ranking_calibration_cpu.csv when every layout is measured (the preset's set: with --groups, --steps,
--warmup or --max-bytes it is an experiment and stays in runs/); --resume skips the measured ones.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm import tqdm

from common.collective_fit import fit_alpha_beta
from common.config import parse_preset
from common.dist import DistInfo
from common.results import provenance, utc_now
from common.runner import RunFlags, RunPlan, Table, experiment, open_run, saved_config

import host_ops

LAB = Path(__file__).resolve().parent
LABS = LAB.parent
BENCH_VERSION = "1"
RUN_NAME = "ranking_cpu"
SCRATCH = LAB / "runs" / "ranking_cpu_launches"  # the launches' own run folders (never published)
ROWS, CALIBRATION = "ranking_cpu.csv", "ranking_calibration_cpu.csv"
KEY = ["group", "tp", "pp", "dp", "zero", "recompute", "interleave", "microbatch"]
COLUMNS = ["group", "world", "model", "global_batch", "tp", "pp", "dp", "zero", "recompute", "interleave",
           "microbatch", "num_microbatches", "stage_layers", "step_time_ms", "step_time_min_ms", "step_time_max_ms",
           "steps", "warmup", "loadavg_1m", "counts_match_design", "launch_git_commit"]
CAL_KEY = ["quantity", "world"]
CAL_COLUMNS = ["quantity", "world", "value", "unit", "method"]
OPERATIONAL = ("timeout_s",)  # with the run flags, change no row: any other flag makes the run an experiment


class Case(NamedTuple):
    """One layout of the set: a group (world size and global batch) and the degrees and schedule it runs."""
    group: str
    tp: int
    pp: int
    dp: int
    zero: int = 3
    recompute: str = "none"
    interleave: int = 1
    microbatch: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def global_batch(self) -> int:
        return int(self.group.split("gb")[1])

    @property
    def launch(self) -> tuple:
        """Cases that share a launch (train.py crosses --zero, --recompute and --interleave in one)."""
        return self.group, self.tp, self.pp, self.dp, self.microbatch


def _group(world: int, batch: int, layouts: list[tuple]) -> tuple[Case, ...]:
    """Cases of one group: (tp, pp, dp, micro-batch) and optional keyword settings each."""
    return tuple(Case(f"ws{world}-gb{batch}", tp, pp, dp, microbatch=mb, **(kw[0] if kw else {}))
                 for tp, pp, dp, mb, *kw in layouts)


FULL, Z2, V2 = {"recompute": "full"}, {"zero": 2}, {"interleave": 2}
# The tiny GPT has 4 heads (TP up to 4) and 6 layers (PP up to 4, interleaving on PP 2 over 4 virtual stages). Six
# groups, one world size and global batch each (issue 38): small batches run micro-batches of 1-2 (few serial
# steps for a pipeline to fill), larger ones 2-4; full recompute and ZeRO-2 beside the defaults (ZeRO-3, none).
CASES = (
    _group(4, 4, [(1, 1, 4, 1), (1, 1, 4, 1, FULL), (1, 2, 2, 1), (1, 4, 1, 1), (2, 1, 2, 1), (2, 2, 1, 1),
                  (4, 1, 1, 2)])
    + _group(4, 8, [(1, 1, 4, 2), (1, 1, 4, 1, Z2), (1, 2, 2, 2), (1, 2, 2, 1, V2), (1, 4, 1, 2), (2, 1, 2, 2, FULL),
                    (2, 2, 1, 2)])
    + _group(4, 16, [(1, 1, 4, 4), (1, 1, 4, 2), (1, 1, 4, 4, FULL), (1, 2, 2, 4), (1, 4, 1, 4), (2, 1, 2, 4)])
    + _group(8, 8, [(1, 1, 8, 1), (1, 1, 8, 1, Z2), (1, 2, 4, 1), (1, 4, 2, 1), (2, 1, 4, 1), (2, 2, 2, 1),
                    (2, 4, 1, 1, FULL)])
    + _group(8, 16, [(1, 1, 8, 2), (1, 1, 8, 2, FULL), (1, 2, 4, 2), (1, 4, 2, 2), (2, 2, 2, 2), (4, 2, 1, 2)])
    + _group(8, 32, [(1, 1, 8, 4), (1, 2, 4, 4), (1, 4, 2, 4), (1, 4, 2, 2, FULL), (2, 2, 2, 4), (2, 1, 4, 4)])
)
GROUPS = tuple(dict.fromkeys(c.group for c in CASES))


@dataclass(frozen=True)
class Config(RunFlags):
    groups: tuple[str, ...] = field(default=GROUPS, metadata={"help": "which groups of layouts to run"})
    steps: int = field(default=3, metadata={"help": "timed optimizer steps per layout"})
    warmup: int = field(default=1, metadata={"help": "untimed steps first"})
    max_bytes: str = field(default="4M", metadata={"help": "largest all_reduce of the calibration sweep"})
    timeout_s: float = field(default=900.0, metadata={"help": "a launch running longer is stopped (one line, exit 4)"})

    def __post_init__(self):
        known = sorted({c.group for c in CASES})
        bad = [g for g in self.groups if g not in known]
        if bad or not self.groups:
            raise ValueError(f"--groups {','.join(bad) or '(empty)'}: allowed {', '.join(known)}")
        if self.steps < 1 or self.warmup < 0 or self.timeout_s <= 0:
            raise ValueError("--steps must be >= 1, --warmup >= 0, --timeout-s > 0")
        if self.gpu != "cpu":
            raise ValueError(f"--gpu {self.gpu}: the ranking set measures this machine's CPU cores (gloo); --gpu cpu "
                             "only (a GPU's rows are parallel-3d's runs_<gpu>.csv)")


def preset() -> Config:
    return Config(gpu="cpu")


def _python_env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(LABS))
    return env


def torchrun(nproc: int, script: Path, args: list[str], timeout_s: float) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), str(script),
           *args]
    done = subprocess.run(cmd, env=_python_env(), capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{script.name} {' '.join(args)} failed (exit {done.returncode}): {' | '.join(tail)}")


def per_call_s(fn, repeats: int = 2000) -> float:
    """Median over 5 rounds of the mean time of `repeats` back-to-back calls."""
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        rounds.append((time.perf_counter() - t0) / repeats)
    return sorted(rounds)[2]


def counted(fn) -> host_ops.Ops:
    """The aten ops one call of fn dispatches (host_ops.Counter), after a first call that warms the caches."""
    fn()
    with host_ops.Counter() as c:
        fn()
    return c.total


def block_step(block, x):
    """One tiny block's forward and backward, as training runs it."""
    def run():
        y = block(x)
        y.backward(torch.ones_like(y))
    return run


def tiny_block():
    from common.model import Block, GPTConfig
    return Block(GPTConfig(n_layers=1, **host_ops.TINY))


def tp_block(mesh):
    """The tiny block with parallel-3d's TP plan (parallelize.tp_plan's per-block part) on `mesh`."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    plan = {"norm1": SequenceParallel(), "norm2": SequenceParallel(), "attn": gather, "mlp": gather,
            "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=Shard(1)), "mlp.w1": ColwiseParallel(),
            "mlp.w2": RowwiseParallel(output_layouts=Shard(1))}
    return parallelize_module(tiny_block(), mesh, plan)


def local_calibration() -> list[dict]:
    """What the planner may know of this machine besides its collectives (module docstring), on one thread."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    rows = []

    def add(quantity, value, unit, method):
        rows.append({"quantity": quantity, "world": 1, "value": value, "unit": unit, "method": method})
    n = 512
    a, b = torch.randn(n, n), torch.randn(n, n)
    add("gemm_flops_per_s", 2 * n ** 3 / per_call_s(lambda: torch.mm(a, b), repeats=20), "FLOP/s",
        f"fp32 torch.mm {n}x{n}x{n}, one thread, median of 5 x 20 calls")
    # The tiny GPT's own GEMMs are small (64 tokens x 64 x 256 per sequence): one core runs them below its large-GEMM
    # rate, and the model's GEMMs are priced at this one.
    m_, k_, n_ = 64, 64, 256
    xa, wa = torch.randn(m_, k_), torch.randn(k_, n_)
    add("small_gemm_flops_per_s", 2 * m_ * k_ * n_ / per_call_s(lambda: torch.mm(xa, wa), repeats=500), "FLOP/s",
        f"fp32 torch.mm {m_}x{k_}x{n_} (the tiny GPT's MLP GEMM per sequence), one thread, median of 5 x 500 calls")
    x, y, z = torch.randn(8 << 20), torch.randn(8 << 20), torch.empty(8 << 20)
    add("memory_bytes_per_s", 3 * 4 * x.numel() / per_call_s(lambda: torch.add(x, y, out=z), repeats=5), "B/s",
        "fp32 torch.add over 8M elements into a preallocated output (read 2, write 1), one thread")
    # The host's cost of one aten op as training pays it: a tiny block (host_ops.TINY: its FLOPs are negligible)
    # forward and backward, over the ops it dispatched (counted): module calls, autograd's recording and engine,
    # the dispatcher and the op's own small work, averaged over the block's real mix of ops.
    tiny = host_ops.TINY
    blk, xb = tiny_block(), torch.randn(1, tiny["seq_len"], tiny["d_model"], requires_grad=True)
    ops = counted(block_step(blk, xb))
    op_s = per_call_s(block_step(blk, xb), repeats=200) / ops.ops
    add("op_us", op_s * 1e6, "us", f"a tiny GPT block (hidden {tiny['d_model']}, {tiny['seq_len']} tokens) forward + "
        f"backward over the {ops.ops} aten ops it dispatches, one thread")
    params = list(blk.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.AdamW(params)
    opt_ops = counted(opt.step)
    add("optimizer_op_us", per_call_s(opt.step, repeats=200) / opt_ops.ops * 1e6, "us",
        f"torch.optim.AdamW (foreach) step over the tiny block's parameters, over its {opt_ops.ops} aten ops")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        tb = tp_block(mesh)
        tops = counted(block_step(tb, xb))  # the block's input: this rank's sequence shard, a plain tensor
        t = per_call_s(block_step(tb, xb), repeats=50)
        add("dtensor_op_us", (t - tops.ops * op_s) / tops.dtensor_ops * 1e6, "us",
            f"the tiny block under parallel-3d's TP plan (DTensor, SequenceParallel, 1-rank mesh): its time less "
            f"its {tops.ops} plain ops at op_us, over its {tops.dtensor_ops} DTensor ops")
        fb = tiny_block()
        fully_shard(fb, mesh=mesh, reshard_after_forward=True)
        fops = counted(block_step(fb, xb))
        t = per_call_s(block_step(fb, xb), repeats=100)
        plain = t - fops.ops * op_s
        add("fsdp_unit_us", max(plain, 0.0) * 1e6, "us",
            f"FSDP2's hooks on one unit per micro-batch (fully_shard on the tiny block, 1-rank gloo mesh, ZeRO-3): "
            f"forward + backward less its {fops.ops} aten ops at op_us")
        one = torch.zeros(1)
        add("collective_call_us", per_call_s(lambda: dist.all_reduce(one), repeats=500) * 1e6, "us",
            "one-element gloo all_reduce on a 1-rank group: c10d's host cost of a call")
    finally:
        dist.destroy_process_group()
    add("cores", float(len(os.sched_getaffinity(0))), "cores",
        "CPU cores this process may run on (os.sched_getaffinity): what the ranks share")
    add("loadavg_1m", round(os.getloadavg()[0], 2), "processes", "the machine's 1-minute load average when the "
        "calibration was taken (uptime): other work sharing the cores")
    return rows


def collective_calibration(world: int, cfg: Config) -> list[dict]:
    """allreduce-bench's all_reduce sweep at `world` gloo ranks, and its alpha-beta fit (common.collective_fit)."""
    out = SCRATCH / "sweeps" / "results" / f"sweep_cpu_ws{world}.csv"
    torchrun(world, LABS / "allreduce-bench" / "bench.py",
             ["--gpu", "cpu", "--collectives", "all_reduce", "--max-bytes", cfg.max_bytes, "--results", str(out.parent),
              "--promote", "no", "--no-topology"], cfg.timeout_s)
    with open(SCRATCH / "sweeps" / "runs" / out.stem / out.name) as f:
        rows = [r for r in csv.DictReader(f) if r["collective"] == "all_reduce"]
    fit = fit_alpha_beta("all_reduce", world, [float(r["size_bytes"]) for r in rows],
                         [float(r["time_us"]) * 1e-6 for r in rows])
    how = f"allreduce-bench all_reduce sweep 1K..{cfg.max_bytes} at {world} gloo ranks, alpha-beta fit"
    return [{"quantity": "allreduce_alpha_us", "world": world, "value": float(fit.alpha_us), "unit": "us",
             "method": how},
            {"quantity": "allreduce_busbw_GBps", "world": world, "value": float(fit.bw_GBps), "unit": "GB/s",
             "method": how}]


def launch(cases: list[Case], cfg: Config) -> list[dict]:
    """One train.py launch for cases of the same degrees and micro-batch; their rows, as train.py wrote them."""
    c0 = cases[0]
    results = SCRATCH / "results"
    results.mkdir(parents=True, exist_ok=True)
    join = lambda xs: ",".join(sorted({str(x) for x in xs}))  # noqa: E731
    args = ["--gpu", "cpu", "--tp", str(c0.tp), "--pp", str(c0.pp), "--dp", str(c0.dp),
            "--zero", join(c.zero for c in cases), "--recompute", join(c.recompute for c in cases),
            "--interleave", join(c.interleave for c in cases), "--microbatch", str(c0.microbatch),
            "--global-batch", str(c0.global_batch), "--steps", str(cfg.steps), "--warmup", str(cfg.warmup),
            "--results", str(results), "--promote", "no"]
    torchrun(c0.world, LAB / "train.py", args, cfg.timeout_s)
    tag = f"cpu_ws{c0.world}_tp{c0.tp}pp{c0.pp}dp{c0.dp}"
    with open(SCRATCH / "runs" / tag / "runs_cpu.csv") as f:
        return list(csv.DictReader(f))


def row_for(case: Case, measured: list[dict], cfg: Config) -> dict:
    want = f"z{case.zero}-{case.recompute}-v{case.interleave}"
    (r,) = [m for m in measured if m["variant"] == want]
    return {"group": case.group, "world": case.world, "model": r["model"], "global_batch": int(r["global_batch"]),
            "tp": case.tp, "pp": case.pp, "dp": case.dp, "zero": case.zero, "recompute": case.recompute,
            "interleave": case.interleave, "microbatch": case.microbatch,
            "num_microbatches": int(r["num_microbatches"]), "stage_layers": r["stage_layers"],
            "step_time_ms": float(r["step_time_ms"]), "step_time_min_ms": float(r["step_time_min_ms"]),
            "step_time_max_ms": float(r["step_time_max_ms"]), "steps": cfg.steps, "warmup": cfg.warmup,
            "loadavg_1m": round(os.getloadavg()[0], 2), "counts_match_design": r["counts_match_design"] == "true",
            "launch_git_commit": r["git_commit"]}


def main(argv: list[str] | None = None) -> int:
    cfg = parse_preset(Config, argv, preset, keys=(), description=__doc__.split("\n\n")[0], prog="ranking.py")
    env = DistInfo(0, 0, 1, 1, torch.device("cpu"), "gloo")
    saved = saved_config(cfg, drop=("gpu", "resume", "promote", *OPERATIONAL))
    changed = experiment(cfg, preset(), OPERATIONAL)  # a subset of groups, other steps: an experiment
    plan = RunPlan.beside(cfg.results_dir(LAB), RUN_NAME, [Table(CALIBRATION, CAL_COLUMNS, CAL_KEY),
                                                           Table(ROWS, COLUMNS, KEY)], config=saved)
    with open_run(plan, cfg, None, provenance(env, BENCH_VERSION), changed) as run:
        if not cfg.resume:
            shutil.rmtree(SCRATCH, ignore_errors=True)
        cal, rows = run.writers
        cases = [c for c in CASES if c.group in cfg.groups]
        todo = [c for c in cases if not rows.done(c._asdict())]
        if not cal.done({"quantity": "cores", "world": 1}):
            cal.write_many(local_calibration())
        for world in sorted({c.world for c in cases}):
            if not cal.done({"quantity": "allreduce_alpha_us", "world": world}):
                cal.write_many(collective_calibration(world, cfg))
        launches: dict[tuple, list[Case]] = {}
        for c in todo:
            launches.setdefault(c.launch, []).append(c)
        bar = tqdm(total=len(cases), initial=len(cases) - len(todo), desc="ranking set", unit="layout")
        for group in launches.values():
            measured = launch(group, cfg)
            rows.write_many([row_for(c, measured, cfg) for c in group])
            bar.update(len(group))
            bar.set_postfix_str(f"{group[0].group} {group[0].tp}x{group[0].pp}x{group[0].dp} done")
        bar.close()
    print(f"ranking set measured at {utc_now()}: {ROWS} and {CALIBRATION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
