"""The benchmarks behind bench.py: every part asked for, into one run folder, each row written when measured.

    settings.py     BenchConfig: the flags (a frozen dataclass), resolved per device (CPU or GPU defaults)
    step_cost.py    every mode at every hidden size (bench_step.csv; on a GPU the bound too, bench_bound.csv)
    monitor.py      the loop with every health feature on against the bare step (bench_monitor.csv)
    gemm.py         one GEMM per path and shape (bench_gemm.csv)
    kernels.py      Inductor's kernels for one block, this fp8_linear.py and an older one (bench_kernels.csv)
    main, _measure  here: the run folder (runs/<preset>_ws1-bench/), published to results/ when complete; a
                    SIGTERM keeps what was measured

What each part measures and why, and the commands: bench.py, whose docstring is this runner's --help.
"""

from __future__ import annotations

import signal
from pathlib import Path

import torch

from benchmarks import kernels
from benchmarks.gemm import gemm
from benchmarks.monitor import monitor_overhead
from benchmarks.settings import GPU_DEFAULTS, BenchConfig
from benchmarks.step_cost import step_cost
from common.config import config_dict, parse_config
from common.data import load_data
from common.dist import distributed, fail
from common.failures import PREEMPTED, report
from common.hardware import device_kind, get_preset
from common.results import provenance
from common.runs import RunError, RunFolder, experiment_flags, results_path, run_dir_for, shown
from training import bound

LAB = Path(__file__).resolve().parents[1]  # the lab: results/


class Stopped(Exception):
    """SIGTERM: a scheduler's or gpu-quick's time limit."""


def _stopped(signum, frame) -> None:
    raise Stopped


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    cfg = parse_config(BenchConfig, argv, description=description, prog="fp8-train-bench")
    try:
        preset = get_preset(cfg.gpu)
        on_gpu = device_kind(preset) == "cuda"
    except ValueError as e:
        fail(str(e), 2)
    if "kernels" in cfg.parts and on_gpu:
        fail("--parts kernels counts Inductor's CPU kernels: run it with --gpu cpu (on a GPU, `step` counts "
             "the kernels each step launches)", 2)
    cfg = cfg.resolved(on_gpu)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = results_path(cfg.out, LAB, preset.run_tag(1))  # one process: <preset>_ws1
    try:
        baseline = None
        if "kernels" in cfg.parts and cfg.kernels_baseline:
            baseline = kernels.load_fp8_linear(cfg.kernels_baseline)
        # one process: the run folder is taken (and its lock checked) before anything is measured
        folder = RunFolder.open(run_dir_for(out.parent, f"{out.name}-bench"), out)
    except (ValueError, RunError) as e:
        fail(str(e), 2)
    changed = experiment_flags(cfg, BenchConfig(gpu=cfg.gpu, out=cfg.out, threads=cfg.threads,
                                             promote=cfg.promote).resolved(on_gpu))
    data = load_data()
    before = signal.signal(signal.SIGTERM, _stopped)  # a time limit: the rows written so far stay in the run folder
    try:
        return _measure(cfg, folder, changed, data, on_gpu, baseline)
    finally:
        signal.signal(signal.SIGTERM, before)


def _measure(cfg: BenchConfig, folder: RunFolder, changed: list[str], data, on_gpu: bool, baseline) -> int:
    with distributed(device="cuda" if on_gpu else "cpu") as env:
        prov = provenance(env, "2")
        w = lambda name, cols, key, **kw: folder.writer(name, cols, key, prov, **kw)  # noqa: E731
        saved = {k: v for k, v in config_dict(cfg).items() if k != "out"}  # no machine paths in results/
        try:  # only the parts asked for get a file: a partial benchmark never blanks the others in results/
            if "step" in cfg.parts:
                bounds = w("bench_bound.csv", bound.COLUMNS, bound.KEY) if on_gpu else None
                step_cost(cfg, env, data, w("bench_step.csv", [
                    "d_model", "n_layers", "run", "precision", "precision_backend", "precision_backend_version",
                    "fp8_scaling", "compiled", "tokens_per_step",
                    "step_time_s", "step_time_min_s", "step_time_p25_s", "step_time_p75_s", "tokens_per_s",
                    "model_tflops", "kernels_per_step", "gpu_busy_ms",
                    "peak_mem_MiB", "ratio_to_first", "target_ratio", "meets_target"],
                    ["d_model", "run", "fp8_scaling"],
                    config=saved), bounds)
            if "gemm" in cfg.parts:
                # the GPU default sizes whatever --hidden says: the GEMM rates are one table, whichever part runs them
                shapes = [(8192, h, h) for h in GPU_DEFAULTS[1]] if on_gpu else [(1024, 512, 512)]
                gemm(env, w("bench_gemm.csv", ["op", "m", "k", "n", "time_us", "tflops", "timing"],
                            ["op", "m", "k", "n"]), shapes)
            if "monitor" in cfg.parts:
                monitor_overhead(cfg, env, data, w("bench_monitor.csv", [
                    "run", "d_model", "compiled", "steps", "step_time_off_s", "step_time_on_s", "median_off_s",
                    "median_on_s", "overhead_pct", "target_pct", "meets_target"], ["run", "d_model"]))
            if "kernels" in cfg.parts:
                kernels.kernel_counts(baseline, cfg.kernels_baseline, w("bench_kernels.csv", [
                    "fp8_linear_version", "fp8_linears", "inductor_kernels", "update_ops"], ["fp8_linear_version"]))
        except Stopped:
            folder.finish(complete=False, changed=changed)
            report(f"fp8-train-bench: SIGTERM; the rows measured so far stay in {shown(folder.path)} (publish them "
                   f"with `python -m common.runs promote {shown(folder.path)} --merge`)", PREEMPTED, "preempted")
            return PREEMPTED
        except BaseException:
            folder.finish(complete=False, changed=changed)
            raise
    for line in folder.finish(complete=True, changed=changed, promote=cfg.promote):
        print(line)
    return 0
