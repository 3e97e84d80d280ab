"""The search: enumerate the plans a cluster allows, price them all with the cost model, choose, say how to run it.

This room imports the cost model (planner.model) only: it never reads a measurement, and the evidence and the
guide stand on it (common/tests/test_layering.py holds this).

    search.py   enumerate TP/PP/CP/DP, micro-batch and interleave; price every ZeRO stage and recompute mode at
                once (numpy); keep the fastest setting that fits per layout, ranked by throughput
    choose.py   among the plans within the model's own error of the fastest, practitioners' rules choose, and
                each runner-up says why it lost
    launch.py   the command that runs a plan: parallel-3d's runner under torchrun and Slurm, and how it departs
                from what was priced
    records.py  what the search hands on: Plan, NearTie, Rejection, Result (plan.py prints them, --json by their fields)

Import the module you need (`from planner.search.search import search`); this file imports nothing.
"""
