"""Calibration: what the labs measured on your cluster replaces the hardware table's figures (`--calibrate`).

Each module reads one kind of measurement and returns the Cluster with the figure it measures replaced and a
note saying so; the cost model (planner.model) then prices plans with it, never reading a file itself. This
room imports the model only.

    calibrate.py      the --calibrate files: which kind each is (by its header), applied in order; CALIBRATE=results
    network.py        allreduce-bench sweeps: in-domain bus bandwidth and latency, per-GPU NIC rate (alpha-beta fit)
    gemm_rates.py     fp8-train's GEMM benchmark: the fraction of the MAMF a GPU sustains under full load
    measured_runs.py  parallel-3d's measured runs: a lumped factor on the matmul rate, predicted / measured step
    host_costs.py     parallel-3d's ranking calibration: the host's cost per op, DTensor op, FSDP2 unshard, c10d call

Import the module you need (`from planner.calibrate.calibrate import calibrated`); this file imports nothing.
"""
