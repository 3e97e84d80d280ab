"""What a committed fp8-train results set holds, as a GPU slot's plan reads it: each run's step rows (how many,
their time, when they ran), and what is wrong with a run's rows.

A run's rows are damaged when steps.csv holds fewer steps than its saved config asked for, or when its FP8
record (fp8.csv) lost part of the model (common/fp8_record.py: a scale of exactly 0.0 or infinite, a module role
missing at a recorded step, underflow recorded for some of a step's module roles and not the others). Each run's
`precision_backend_version` is kept too: rows of the lab's own FP8 layer name its version (fp8_record.layer_version),
and the slot planner re-measures those an older layer wrote. Every file is read through common.csvread: a damaged
CSV is one line (BadResults), never a traceback.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from common.csvread import Schema, read_json, read_rows
from common.fp8_record import damage as fp8_damage, layer_version
from common.hardware import parse_run_tag

HIGH = ("fp32", "bf16", "fp16")  # fp8-train's precisions without a backend; every other one names its backend
STEPS = Schema("fp8-train steps", {"run": str, "precision": str, "step": int, "step_time_s": float,
                                   "timestamp_utc": str, "hardware": str, "git_commit": str}, key=("run", "step"))
FP8 = Schema("fp8-train FP8 record", {"run": str, "step": int, "module": str, "role": str, "scale": float,
                                      "underflow_frac": float}, nonfinite=("scale",),
             key=("run", "step", "module", "role"), nonneg=("scale",))
GEMMS = Schema("fp8-train GEMM benchmark", {"op": str, "time_us": float}, key=("op", "m", "k", "n"))
BENCH_STEPS = Schema("fp8-train step benchmark", {"d_model": int, "run": str}, key=("d_model", "run", "fp8_scaling"))


def precision_of(run: str) -> str:
    return run.split("-")[0]


class RunRows(NamedTuple):
    """One run's committed step rows."""
    steps: int
    seconds: float  # the sum of its step times (step 0 includes the compile)
    start: datetime  # its first row's time less that step's time
    end: datetime  # its last row's time
    commit: str
    layer: int  # the oldest version of the lab's own FP8 layer its rows name (common/fp8_record.py; 1: none named)


class ResultsSet(NamedTuple):
    """What one fp8-train results folder holds, as far as a slot's plan needs it."""
    path: Path
    runs: dict[str, RunRows]
    damage: dict[str, str]  # run -> what is wrong with its rows, one line
    has_bound: bool
    has_gemms: bool
    bench_hidden: frozenset[int]


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")


def read_set(path: Path) -> ResultsSet:
    """A results folder's rows (an absent folder holds nothing); BadResults (one line) for a damaged file."""
    rows = read_rows(path / "steps.csv", STEPS) if (path / "steps.csv").is_file() else []
    by_run: dict[str, list[dict]] = {}
    for row in rows:
        by_run.setdefault(row["run"], []).append(row)
    runs = {}
    for run, rs in by_run.items():
        rs.sort(key=lambda r: int(r["step"]))
        seconds = sum(float(r["step_time_s"]) for r in rs)
        start = _time(rs[0]["timestamp_utc"]) - timedelta(seconds=float(rs[0]["step_time_s"]))
        layer = min(layer_version(r.get("precision_backend_version", "")) for r in rs)
        runs[run] = RunRows(len(rs), seconds, start, _time(rs[-1]["timestamp_utc"]), rs[0]["git_commit"], layer)
    planned = None
    if (path / "steps.config.json").is_file():
        planned = read_json(path / "steps.config.json", "fp8-train's saved config", {"steps": int}).get("steps")
    damage = {run: f"steps.csv holds {r.steps} of its {planned} steps" for run, r in runs.items()
              if planned and r.steps < planned}
    if (path / "fp8.csv").is_file():
        for run, why in fp8_damage(read_rows(path / "fp8.csv", FP8)).items():
            damage[run] = "; ".join(filter(None, [damage.get(run), why]))
    gemms = read_rows(path / "bench_gemm.csv", GEMMS) if (path / "bench_gemm.csv").is_file() else []
    bench = read_rows(path / "bench_step.csv", BENCH_STEPS) if (path / "bench_step.csv").is_file() else []
    return ResultsSet(path, runs, damage, (path / "bound.csv").is_file(), bool(gemms),
                      frozenset(int(r["d_model"]) for r in bench))


def gpu_sets(results_root: Path, tag: str) -> tuple[list[ResultsSet], list[ResultsSet]]:
    """(this GPU's other sets: <tag>-*, every GPU set under results_root): where else a run was measured."""
    if not results_root.is_dir():
        return [], []
    folders = sorted(p for p in results_root.iterdir() if p.is_dir() and (p / "steps.csv").is_file())
    gpu = [p for p in folders if (parse_run_tag(p.name) or ("cpu",))[0] != "cpu"]
    siblings = [p for p in folders if p.name.startswith(f"{tag}-")]
    read = {p: read_set(p) for p in set(gpu) | set(siblings)}
    return [read[p] for p in siblings], [read[p] for p in gpu]
