"""The benchmarks behind bench.py: every part asked for, into one run folder, each row written when measured.

    settings.py     BenchConfig: the flags (a frozen dataclass on common.runner.RunFlags) and its presets, cpu(), cuda()
    step_cost.py    every mode at every hidden size (bench_step.csv; on a GPU the bound too, bench_bound.csv)
    monitor.py      the loop with every health feature on against the bare step (bench_monitor.csv)
    gemm.py         one GEMM per path and shape (bench_gemm.csv)
    kernels.py      Inductor's kernels for one block, this fp8_linear.py and an older one (bench_kernels.csv)
    main, _measure  here: the run folder (common.runner.open_run: runs/<preset>_ws1-bench/), published to results/
                    when complete; a SIGTERM keeps what was measured

What each part measures and why, and the commands: bench.py, whose docstring is this runner's --help.
"""

from __future__ import annotations

import signal
from pathlib import Path

import torch

from benchmarks import kernels
from benchmarks.gemm import gemm
from benchmarks.monitor import monitor_overhead
from benchmarks.settings import PARTS, BenchConfig, cuda, preset
from benchmarks.step_cost import step_cost
from common.config import parse_preset
from common.data import load_data
from common.dist import distributed, fail
from common.failures import PREEMPTED, report
from common.hardware import device_kind, get_preset
from common.results import provenance
from common.runner import RunPlan, Table, check_before_launch, experiment, open_run, saved_config
from common.runs import run_dir_for, shown
from training import bound

LAB = Path(__file__).resolve().parents[1]  # the lab: results/
STEP_COLUMNS = ["d_model", "n_layers", "run", "precision", "precision_backend", "precision_backend_version",
                "fp8_scaling", "compiled", "tokens_per_step", "step_time_s", "step_time_min_s", "step_time_p25_s",
                "step_time_p75_s", "tokens_per_s", "model_tflops", "kernels_per_step", "gpu_busy_ms", "peak_mem_MiB",
                "ratio_to_first", "target_ratio", "meets_target"]
MONITOR_COLUMNS = ["run", "d_model", "compiled", "steps", "step_time_off_s", "step_time_on_s", "median_off_s",
                   "median_on_s", "overhead_pct", "target_pct", "meets_target"]


class Stopped(Exception):
    """SIGTERM: a scheduler's or gpu-quick's time limit."""


def _stopped(signum, frame) -> None:
    raise Stopped


def run_plan(cfg: BenchConfig, hw, on_gpu: bool) -> RunPlan:
    """Only the parts asked for get a file: a partial benchmark never blanks the others in results/. The saved
    config rides with bench_step.csv."""
    tables = {"step": [Table("bench_step.csv", STEP_COLUMNS, ("d_model", "run", "fp8_scaling"))] +
                      ([Table("bench_bound.csv", bound.COLUMNS, bound.KEY, config=False)] if on_gpu else []),
              "gemm": [Table("bench_gemm.csv", ["op", "m", "k", "n", "time_us", "tflops", "timing"],
                             ("op", "m", "k", "n"), config=False)],
              "monitor": [Table("bench_monitor.csv", MONITOR_COLUMNS, ("run", "d_model"), config=False)],
              "kernels": [Table("bench_kernels.csv", ["fp8_linear_version", "fp8_linears", "inductor_kernels",
                                                      "update_ops"], ("fp8_linear_version",), config=False)]}
    out = cfg.results_dir(LAB, hw.run_tag(1))  # one process: <preset>_ws1
    asked = tuple(t for part in PARTS if part in cfg.parts for t in tables[part])
    return RunPlan(run_dir_for(out.parent, f"{out.name}-bench"), out, asked, saved_config(cfg))


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    cfg = parse_preset(BenchConfig, argv, preset, description=description, prog="fp8-train-bench")
    try:
        hw = get_preset(cfg.gpu)
        on_gpu = device_kind(hw) == "cuda"
        if "kernels" in cfg.parts and on_gpu:
            raise ValueError("--parts kernels counts Inductor's CPU kernels: run it with --gpu cpu (on a GPU, "
                             "`step` counts the kernels each step launches)")
        baseline = None
        if "kernels" in cfg.parts and cfg.kernels_baseline:
            baseline = kernels.load_fp8_linear(cfg.kernels_baseline)
        plan = run_plan(cfg, hw, on_gpu)
        check_before_launch(plan, cfg)  # one process: the run folder checked before anything is measured
    except ValueError as e:  # RunError is a ValueError
        fail(str(e), 2)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    changed = experiment(cfg, preset(cfg.gpu), ("threads",))
    data = load_data()
    before = signal.signal(signal.SIGTERM, _stopped)  # a time limit: the rows written so far stay in the run folder
    try:
        with distributed(device="cuda" if on_gpu else "cpu") as env, \
                open_run(plan, cfg, None, provenance(env, "2"), changed) as run:
            try:
                _measure(cfg, env, data, on_gpu, baseline, dict(zip((t.name for t in plan.tables), run.writers)))
            except Stopped:
                run.complete = False
    finally:
        signal.signal(signal.SIGTERM, before)
    if run.complete:
        return 0
    report(f"fp8-train-bench: SIGTERM; the rows measured so far stay in {shown(plan.folder)} (publish them "
           f"with `python -m common.runs promote {shown(plan.folder)} --merge`)", PREEMPTED, "preempted")
    return PREEMPTED


def _measure(cfg: BenchConfig, env, data, on_gpu: bool, baseline, w: dict) -> None:
    """Every part asked for, each row written as soon as it is measured."""
    if "step" in cfg.parts:
        step_cost(cfg, env, data, w["bench_step.csv"], w.get("bench_bound.csv"))
    if "gemm" in cfg.parts:
        # the GPU preset's sizes whatever --hidden says: the GEMM rates are one table, whichever part runs them
        shapes = [(8192, h, h) for h in cuda().hidden] if on_gpu else [(1024, 512, 512)]
        gemm(env, w["bench_gemm.csv"], shapes)
    if "monitor" in cfg.parts:
        monitor_overhead(cfg, env, data, w["bench_monitor.csv"])
    if "kernels" in cfg.parts:
        kernels.kernel_counts(baseline, cfg.kernels_baseline, w["bench_kernels.csv"])
