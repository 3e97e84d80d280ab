"""nccl-tests' all_reduce_perf over the same sizes, stored beside our sweep: check the harness against the tool.

    make allreduce-bench NCCL_TESTS=1                 # all_reduce_perf must be on PATH
    python nccl_tests.py --dtypes fp32,bf16           # takes bench.py's flags (sizes, dtypes, iters, warmup)

Build nccl-tests once (github.com/NVIDIA/nccl-tests: `make` with CUDA_HOME/NCCL_HOME set) and put
its build/ folder on PATH. It runs as one process driving every GPU of this node (`-g N`), the
single-node form that needs no MPI; across nodes nccl-tests needs an MPI build, so this lab only
compares on one node. Its table (out-of-place and in-place: time, algbw, busbw, #wrong) is parsed
into results/nccl_tests_<hw>_ws<N>.csv; report.py sets its busbw beside ours for the same sizes, ours
computed with nccl-tests' statistic (loop time / iterations, mean over ranks: bench.py's busbw_loop_GBps),
and runs it the way bench.py ran: back-to-back, or with a barrier per iteration (-z 1) under --barrier.
The raw output is not stored: its "Rank .. on <host>" lines name the machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import torch

from bench import LAB_DIR, Config, changed, preset, resolve, sizes
from common.config import parse_preset, parse_size
from common.dist import DistInfo
from common.failures import entrypoint
from common.hardware import device_kind, get_preset
from common.results import provenance
from common.runner import RunPlan, Table, check_before_launch, open_run, saved_config

BINARY = "all_reduce_perf"
NCCL_TYPES = {"fp32": "float", "bf16": "bfloat16", "fp16": "half"}  # nccl-tests -d names
COLUMNS = ["collective", "size_bytes", "count", "dtype", "preset", "placement", "time_us", "algbw_GBps", "busbw_GBps",
           "wrong", "nccl_tests_version"]


def parse_perf_output(text: str) -> tuple[str, list[dict]]:
    """(nccl-tests version, rows) from all_reduce_perf's stdout: one row per size and placement.

    Data lines are `size count type redop root` then, out-of-place and in-place, `time algbw busbw
    #wrong` (older versions have no root column: the 8 last fields are read from the right).
    """
    version = m.group(1) if (m := re.search(r"nccl-tests version (\S+)", text)) else "unknown"
    rows = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 11 or line.lstrip().startswith("#") or not (f[0].isdigit() and f[1].isdigit()):
            continue
        dtype = {v: k for k, v in NCCL_TYPES.items()}.get(f[2], f[2])
        for placement, (t, alg, bus, wrong) in (("out-of-place", f[-8:-4]), ("in-place", f[-4:])):
            rows.append({"collective": "all_reduce", "size_bytes": int(f[0]), "count": int(f[1]), "dtype": dtype,
                         "placement": placement, "time_us": float(t), "algbw_GBps": float(alg),
                         "busbw_GBps": float(bus), "wrong": int(wrong) if wrong.isdigit() else None})
    return version, rows


def main(argv: list[str] | None = None) -> int:
    cfg = parse_preset(Config, argv, preset, description=__doc__.split("\n\n")[0], prog="nccl_tests.py")
    binary = shutil.which(BINARY)
    problem = None if binary else \
        f"{BINARY} is not on PATH (build github.com/NVIDIA/nccl-tests and add its build/ folder to PATH)"
    if problem is None:
        try:  # GPUs torch cannot use: the one line naming the driver, the build and the fix (common.hardware)
            if device_kind(get_preset(cfg.gpu)) != "cuda":
                problem = "nccl-tests needs NVIDIA GPUs and torch sees none"
        except ValueError as e:
            problem = str(e)
    if problem:
        print(f"nccl_tests.py: error: NCCL_TESTS=1 asked for, but {problem}", file=sys.stderr)
        return 2
    ngpus = torch.cuda.device_count()
    try:
        cfg, hw = resolve(cfg)
        name = f"nccl_tests_{hw.run_tag(ngpus)}"  # the tool runs its whole sweep again: a fresh run folder each time
        plan = RunPlan.beside(cfg.results_dir(LAB_DIR), name,
                              [Table(f"{name}.csv", COLUMNS, ["dtype", "size_bytes", "placement"])],
                              config={**saved_config(cfg), "tool": BINARY})
        check_before_launch(plan, cfg, mode="fresh")
        if os.environ.get("DT_CHECK_ARGS") == "1":  # make checks this before the sweep it follows
            return 0
    except ValueError as e:  # RunError is a ValueError
        print(f"nccl_tests.py: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    env = DistInfo(0, 0, ngpus, ngpus, torch.device("cuda", 0), "nccl")
    with open_run(plan, cfg, None, provenance(env, "1"), changed(cfg), mode="fresh") as run:
        (writer,) = run.writers
        for dtype in cfg.dtypes:
            cmd = [binary, "-b", str(parse_size(cfg.min_bytes)), "-e", str(parse_size(cfg.max_bytes)),
                   "-f", str(cfg.step_factor), "-g", str(ngpus), "-d", NCCL_TYPES[dtype], "-n", str(cfg.iters),
                   "-w", str(cfg.warmup), "-c", "1", "-z", "1" if cfg.barrier else "0"]  # -z 1 = our --barrier
            print(" ".join([BINARY, *cmd[1:]]), flush=True)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=cfg.timeout_s * len(sizes(cfg)))
            except subprocess.TimeoutExpired:
                print(f"nccl_tests.py: error: {BINARY} did not finish in {cfg.timeout_s * len(sizes(cfg)):.0f} s",
                      file=sys.stderr)
                run.complete = False
                return 1
            version, rows = parse_perf_output(proc.stdout)
            if proc.returncode != 0 or not rows:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                print(f"nccl_tests.py: error: {BINARY} exited {proc.returncode}: {tail[0]}", file=sys.stderr)
                run.complete = False
                return 1
            writer.write_many({**row, "preset": hw.name, "nccl_tests_version": version} for row in rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
