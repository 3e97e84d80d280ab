"""bench.py end to end on the CPU at toy sizes: every part writes its CSV, in process.

    - step: one row per mode and hidden size, ratios against the first mode, the target column only
      where it applies (emulated FP8 vs fp32 on CPU);
    - monitor: the loop with every health feature on against the bare step, both timed (its scratch
      writers are real CSV writers: this part crashed before anything else ran it);
    - gemm: each GEMM path's row;
    - the GPU's busy time per step (kernels on several streams counted once).
On a GPU the same code adds kernels per step and bench_bound.csv (tests/test_te.py runs bound.py).
"""

import pandas as pd

import bench
from benchmarks import step_cost

TOY = ["--gpu", "cpu", "--hidden", "32", "--n-layers", "1", "--batch", "2", "--seq-len", "16", "--warmup", "1",
       "--iters", "2", "--monitor-hidden", "32", "--monitor-iters", "3", "--threads", "1", "--promote", "replace"]


def test_every_part_writes_its_rows(tmp_path):
    out = tmp_path / "bench"
    assert bench.main(TOY + ["--runs", "fp32,fp8:emulated", "--parts", "step,monitor,gemm", "--results",
                             str(out)]) == 0
    step = pd.read_csv(out / "bench_step.csv")
    assert list(step["run"]) == ["fp32-s0", "fp8-emulated-s0"] and (step["step_time_s"] > 0).all()
    assert step["ratio_to_first"].iloc[0] == 1.0 and step["target_ratio"].iloc[1] == 1.5
    assert ((step["step_time_p25_s"] <= step["step_time_s"]) & (step["step_time_s"] <= step["step_time_p75_s"])).all()
    assert step["gpu_busy_ms"].isna().all() and step["kernels_per_step"].isna().all()  # counted on a GPU only
    monitor = pd.read_csv(out / "bench_monitor.csv")
    assert len(monitor) == 1 and monitor["run"].iloc[0] == "fp8-emulated-s0" and monitor["steps"].iloc[0] == 3
    assert (monitor[["step_time_on_s", "step_time_off_s"]] > 0).all(axis=None)
    gemm = pd.read_csv(out / "bench_gemm.csv")
    assert {"fp32 torch.mm", "fp8 torch._scaled_mm"} <= set(gemm["op"]) and (gemm["tflops"] > 0).all()
    assert not (out / "bench_bound.csv").exists()  # the bound needs a GPU's profiler and FP8 GEMMs


def test_gpu_busy_time_merges_overlapping_kernels():
    """Kernels on two streams overlap: busy time is the union of their intervals, not the sum."""
    assert step_cost.merged_us([(0, 10), (5, 12), (6, 8), (20, 25)]) == 17
    assert step_cost.merged_us([]) == 0
