"""Benchmarks: what a step costs in each precision, and why (CSVs, never timed tests).

They stand on training (its Config, Trainer and RunLoop time the same step a run takes), precision and health;
nothing imports them but bench.py, their command line (common/tests/test_layering.py holds it so).

    runner.py       the flags, the parts asked for, the run folder (runs/<preset>_ws1-bench/ -> results/)
    kernels.py      Inductor's kernels for one compiled FP8 block, this fp8_linear.py against an older commit's
"""
