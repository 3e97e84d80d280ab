"""Benchmarks: what a step costs in each precision, and why (CSVs, never timed tests).

They stand on training (its Config, Trainer and RunLoop time the same step a run takes), precision and health;
nothing imports them but bench.py, their command line (common/tests/test_layering.py holds it so).

    runner.py       the parts asked for, the run folder (runs/<preset>_ws1-bench/ -> results/), SIGTERM
    settings.py     BenchConfig (the flags) and its presets per device, the targets, a timed mode's training Config
    step_cost.py    one training step per mode and hidden size; kernels per step and GPU busy time; the bound
    monitor.py      the health monitoring's cost: the loop with everything on against the bare step
    gemm.py         one GEMM per path and shape, in TFLOP/s: the ceiling the step costs approach
    kernels.py      Inductor's kernels for one compiled FP8 block, this fp8_linear.py against an older commit's
"""
