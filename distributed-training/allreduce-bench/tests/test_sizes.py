"""nccl-tests' size rounding and iteration planning (the bus factors and the fit: common/tests)."""

from dataclasses import replace

import torch

import bench
import collectives as C


def test_shapes_follow_nccl_tests_rounding():
    f32 = torch.float32
    assert C.shape("all_reduce", 1024, 4, f32) == (256, 1024)
    assert C.shape("all_gather", 1024, 4, f32) == (64, 1024)  # count per rank, S the whole output
    assert C.shape("all_to_all", 1024, 4, f32) == (64, 1024)  # count per peer
    assert C.shape("reduce_scatter", 1024, 3, f32) == (84, 1008)  # 341 B per rank -> 336 B (16 B multiple)
    assert C.shape("all_gather", 1024, 3, torch.bfloat16) == (168, 1008)
    assert C.shape("all_gather", 16, 4, f32) == (0, 0)  # too small: dropped from the plan
    cfg = bench.Config(min_bytes="16", max_bytes="1K", collectives=("all_gather", "send_recv"))
    plan = bench.sweep_plan(cfg, 4)
    assert [r["size_bytes"] for r in plan if r["collective"] == "all_gather"] == [64, 128, 256, 512, 1024]
    assert not [r for r in bench.sweep_plan(cfg, 1) if r["collective"] == "send_recv"]  # no peer on 1 rank


def test_iterations_adapt_to_the_first_call():
    cfg = replace(bench.cpu(), target_ms=150, iters=20, min_iters=5, warmup=5)
    assert bench.plan_iterations(0.001, cfg) == (5, 20)  # small: capped at nccl-tests' 20 iterations
    assert bench.plan_iterations(0.010, cfg) == (4, 15)
    assert bench.plan_iterations(0.100, cfg) == (1, 5)  # big: the floor
    assert bench.plan_iterations(0.100, replace(bench.cpu(), warmup=0)) == (0, 5)
