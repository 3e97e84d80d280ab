"""The Slurm rehearsal: slurm/lab.sbatch, unchanged, as a 2-node job of every multi-rank lab on loopback.

srun and scontrol are stand-ins (fixtures/slurm: srun runs the command once per node, all at once;
every node is this machine), the SLURM_* variables are what sbatch sets, and the submitting directory
is a copy of the repository with the lab's results/ emptied. Each job is 2 nodes x 2 gloo ranks with a
tiny workload, as the README's walk-through runs it on a cluster; it must end 0 with exactly one
complete result set, named for 4 ranks on 2 nodes, published into the submitting directory (where
global rank 0 wrote it, whichever node c10d put it on), its run folder promoted and nothing damaged:
no set-aside run, no temporary file, no holder left in the lock file. The checks ran once (the
check phase), not once per node: a second check while the first node's ranks held the run folder
would have refused the job.

The jobs run three at a time: much of a job's time is its processes waiting on each other.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.csvread import Schema, read_table

REPO = Path(__file__).resolve().parents[3]
STUBS = Path(__file__).parent / "fixtures" / "slurm"
TAG = "cpu_ws4_n2"  # 2 nodes x 2 ranks on the CPU preset


@dataclass(frozen=True)
class Job:
    lab: str
    make_vars: tuple[str, ...]  # after the lab name on the sbatch line
    published: tuple[str, ...]  # what results/ must hold afterwards, exactly (besides the report's plots)
    run_folder: str | None  # runs/<name> that rank 0 wrote and published (None: the lab writes results/ itself)


TINY_FP8 = ("--runs fp8:emulated --stats-every 1 --fractions-every 1 --steps 2 --batch 4 --seq-len 16 --d-model 32 "
            "--n-layers 1 --n-heads 2 --val-every 0 --val-batches 1 --data-size 64K --ckpt-every 0 --dashboard-every 0")
JOBS = [
    Job("allreduce-bench", ("ARGS=--max-bytes 2K --collectives all_reduce,all_gather --iters 2 --min-iters 1 "
                            "--warmup 0 --target-ms 1 --promote replace",),
        (f"sweep_{TAG}.csv", f"sweep_{TAG}.config.json", "topology_cpu.md"), f"sweep_{TAG}"),
    Job("fsdp-scaling", ("ARGS=--strategies zero3 --modes weak --warmup 0 --steps 1 --promote replace",),
        (f"scaling_{TAG}.csv", f"scaling_{TAG}.config.json", f"comms_{TAG}.csv", f"comms_{TAG}.config.json"),
        f"scaling_{TAG}"),
    Job("tp-attention", ("ARGS=--tp 2 --seq-lens 16 --d-models 64 --seq-len 16 --d-model 64 --head-dim 16 --batch 2 "
                         "--warmup 0 --iters 1 --no-correctness --promote replace",),
        (f"bench_{TAG}.csv", f"bench_{TAG}.config.json"), TAG),
    Job("fp8-train", (f"ARGS={TINY_FP8} --promote replace",),
        tuple(f"{TAG}/{f}" for f in ("steps.csv", "steps.config.json", "fp8.csv", "layers.csv", "events.csv")), TAG),
    Job("parallel-3d", ("TP=2", "PP=1", "DP=0", "ARGS=--zero 3 --recompute none --interleave 1 --steps 1 --warmup 0 "
                        "--promote merge"),
        ("runs_cpu.csv", "runs_cpu.config.json", "comms_cpu.csv", "comms_cpu.config.json"), "cpu_ws4_n2_tp2pp1dp2"),
]


def _free_job_id() -> int:
    """A job id whose rendezvous port (10000 + id % 20000, as lab.sbatch derives it) is free here."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if 10000 <= port < 30000:
            return 7_000_000 + port - 10000
        with socket.socket() as s:
            candidate = 10000 + int.from_bytes(os.urandom(2), "big") % 20000
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
        return 7_000_000 + candidate - 10000
    raise RuntimeError("no free port in 10000-29999")


def _submit_dir(tmp: Path, lab: str) -> Path:
    """What a user submits from: the checkout (Makefile, slurm/, the lab and what it imports), results/ empty."""
    sub = tmp / "checkout"
    labs = sub / "distributed-training"
    skip = shutil.ignore_patterns("runs", "checkpoints", "__pycache__", "*.pyc")
    for part in ("common", lab, "planner"):
        shutil.copytree(REPO / "distributed-training" / part, labs / part, symlinks=True, ignore=skip)
    shutil.rmtree(labs / lab / "results")
    (labs / lab / "results").mkdir()
    shutil.copytree(REPO / "slurm", sub / "slurm")
    shutil.copy(REPO / "Makefile", sub / "Makefile")
    return sub


def _sbatch(job: Job, tmp: Path) -> tuple[subprocess.CompletedProcess, Path, int]:
    sub = _submit_dir(tmp, job.lab)
    job_id = _free_job_id()
    # The stubs, then this interpreter's folder: srun's `#!/usr/bin/env python3` is the Python running the tests, not a
    # version manager's shim (pyenv's costs a second of CPU per srun).
    path = os.pathsep.join([str(STUBS), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, "SLURM_SUBMIT_DIR": str(sub),
           "SLURM_JOB_ID": str(job_id), "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
           "SLURM_JOB_NODELIST": "node[0-1]", "SLURM_JOB_NAME": "dt-lab"}
    for var in ("MASTER_PORT", "MASTER_ADDR", "DT_LAUNCH_PHASE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "NPROC", "GPU"):
        env.pop(var, None)
    argv = ["bash", str(sub / "slurm" / "lab.sbatch"), job.lab, "GPU=cpu", "NPROC=2", f"PYTHON={sys.executable}",
            *job.make_vars]
    proc = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=400)
    return proc, sub / "distributed-training" / job.lab, job_id


@pytest.fixture(scope="module")
def rehearsals(tmp_path_factory):
    dirs = {job.lab: tmp_path_factory.mktemp(job.lab) for job in JOBS}
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {job.lab: pool.submit(_sbatch, job, dirs[job.lab]) for job in JOBS}
        return {lab: f.result() for lab, f in futures.items()}


@pytest.mark.parametrize("job", JOBS, ids=[j.lab for j in JOBS])
def test_a_two_node_slurm_job_publishes_one_complete_result_set(job, rehearsals):
    proc, lab_dir, job_id = rehearsals[job.lab]
    log = f"\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, log
    # the rendezvous port came from the job id, and every node took part
    assert f":{10000 + job_id % 20000}" in proc.stdout, log
    results = lab_dir / "results"
    data = sorted(p.relative_to(results).as_posix() for p in results.rglob("*")
                  if p.is_file() and p.suffix in (".csv", ".json", ".md"))
    assert data == sorted(job.published), log
    for csv in results.rglob("*.csv"):
        rows = read_table(csv, Schema(csv.stem, {"world_size": int, "nnodes": int}, allow_empty=True))
        assert set(rows["world_size"]) <= {4} and set(rows["nnodes"]) <= {2}, csv  # 2 nodes x 2 ranks, named so
    assert (lab_dir / "REPORT.md").is_file(), log
    runs = lab_dir / "runs"
    if job.run_folder is None:
        assert not runs.exists() or not any(runs.iterdir()), log
        return
    names = sorted(p.name for p in runs.iterdir())
    assert names == sorted([job.run_folder, job.run_folder + ".lock"]), names  # nothing set aside, one run
    manifest = json.loads((runs / job.run_folder / "run.json").read_text())
    assert manifest["state"] in ("promoted", "merged"), manifest  # parallel-3d merges its launches
    assert (runs / f"{job.run_folder}.lock").read_text() == ""  # released: the lock names no holder
    assert not [p for p in lab_dir.rglob("*.tmp")], "a temporary file was left behind"
