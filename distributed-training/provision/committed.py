"""What a committed fp8-train results set holds, as a GPU slot's plan reads it: each run's step rows (how many,
their time, when they ran), and what is wrong with a run's rows.

A run's rows are damaged when steps.csv holds fewer steps than its saved config asked for, or when its FP8
record (fp8.csv) lost part of the model: a scale of exactly 0.0 or infinite (a scale the recorder never read;
an empty or nan one is a scale the backend does not expose, as torchao's grad_output), a module role missing
at a recorded step, or underflow recorded for some of a step's module roles and not the others. Every file is
read through common.csvread: a damaged CSV is one line (BadResults), never a traceback.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from common.csvread import Schema, read_json, read_rows
from common.hardware import parse_run_tag

HIGH = ("fp32", "bf16", "fp16")  # fp8-train's precisions without a backend; every other one names its backend
INF = float("inf")
STEPS = Schema("fp8-train steps", {"run": str, "precision": str, "step": int, "step_time_s": float,
                                   "timestamp_utc": str, "hardware": str, "git_commit": str})
FP8 = Schema("fp8-train FP8 record", {"run": str, "step": int, "module": str, "role": str, "scale": float,
                                      "underflow_frac": float}, nonfinite=("scale",))
GEMMS = Schema("fp8-train GEMM benchmark", {"op": str, "time_us": float})
BENCH_STEPS = Schema("fp8-train step benchmark", {"d_model": int, "run": str})


def precision_of(run: str) -> str:
    return run.split("-")[0]


class RunRows(NamedTuple):
    """One run's committed step rows."""
    steps: int
    seconds: float  # the sum of its step times (step 0 includes the compile)
    start: datetime  # its first row's time less that step's time
    end: datetime  # its last row's time
    commit: str


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
        runs[run] = RunRows(len(rs), seconds, start, _time(rs[-1]["timestamp_utc"]), rs[0]["git_commit"])
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


def fp8_damage(rows: list[dict]) -> dict[str, str]:
    """Per FP8 run, what its scale record lacks: a scale of exactly 0.0 or infinite (one the recorder never
    read), a module role missing at a recorded step, underflow recorded for part of a step's roles."""
    steps: dict[str, dict[int, list[dict]]] = {}
    for row in rows:
        steps.setdefault(row["run"], {}).setdefault(int(row["step"]), []).append(row)
    out = {}
    for run, by_step in steps.items():
        problems = []
        # an empty or nan scale is one the backend does not expose (torchao's grad_output): not recorded, not wrong
        bad = [r for rs in by_step.values() for r in rs if r["scale"] and float(r["scale"]) in (0.0, INF, -INF)]
        if bad:
            problems.append(f"fp8.csv: {len(bad)} scales of exactly 0.0 or infinite (first at step "
                            f"{min(int(r['step']) for r in bad)})")
        roles = {(r["module"], r["role"]) for rs in by_step.values() for r in rs}
        short = [(s, len(rs)) for s, rs in sorted(by_step.items())
                 if len({(r["module"], r["role"]) for r in rs}) < len(roles)]
        if short:
            problems.append(f"fp8.csv: step {short[0][0]} records {short[0][1]} of {len(roles)} module roles")
        partial = [(s, sum(r["underflow_frac"] != "" for r in rs)) for s, rs in sorted(by_step.items())
                   if 0 < sum(r["underflow_frac"] != "" for r in rs) < len(roles)]
        if partial:
            problems.append(f"fp8.csv: underflow recorded for {partial[0][1]} of {len(roles)} module roles at step "
                            f"{partial[0][0]} ({len(partial)} recorded steps alike)")
        if problems:
            out[run] = "; ".join(problems)
    return out


def gpu_sets(results_root: Path, tag: str) -> tuple[list[ResultsSet], list[ResultsSet]]:
    """(this GPU's other sets: <tag>-*, every GPU set under results_root): where else a run was measured."""
    if not results_root.is_dir():
        return [], []
    folders = sorted(p for p in results_root.iterdir() if p.is_dir() and (p / "steps.csv").is_file())
    gpu = [p for p in folders if (parse_run_tag(p.name) or ("cpu",))[0] != "cpu"]
    siblings = [p for p in folders if p.name.startswith(f"{tag}-")]
    read = {p: read_set(p) for p in set(gpu) | set(siblings)}
    return [read[p] for p in siblings], [read[p] for p in gpu]
