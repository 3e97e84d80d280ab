"""busbw factors against hand-computed values, nccl-tests' size rounding, iteration planning, the alpha-beta fit."""

import math

import numpy as np
import pytest
import torch

import bench
import collectives as C
from busbw import COLLECTIVES, bus_bandwidth, busbw_factor, ring_latency_steps
from fit import fit_alpha_beta

# Hand-computed from nccl-tests' doc/PERFORMANCE.md: 2(n-1)/n, (n-1)/n, 1.
HAND = {
    ("all_reduce", 1): 0.0, ("all_reduce", 2): 1.0, ("all_reduce", 4): 1.5, ("all_reduce", 8): 1.75,
    ("all_gather", 1): 0.0, ("all_gather", 2): 0.5, ("all_gather", 4): 0.75, ("all_gather", 8): 0.875,
    ("reduce_scatter", 4): 0.75, ("reduce_scatter", 8): 0.875, ("all_to_all", 4): 0.75, ("all_to_all", 3): 2 / 3,
    ("broadcast", 1): 1.0, ("broadcast", 8): 1.0, ("send_recv", 2): 1.0, ("send_recv", 8): 1.0,
}


@pytest.mark.parametrize("coll,n", list(HAND))
def test_busbw_factor_matches_hand_computed(coll, n):
    assert busbw_factor(coll, n) == pytest.approx(HAND[coll, n], abs=1e-15)


def test_bandwidths_in_gb_of_1e9_bytes():
    # 1 GiB all_reduce in 10 ms on 8 ranks: algbw = 2^30 / 0.01 / 1e9, busbw = algbw * 7/4.
    alg, bus = bus_bandwidth("all_reduce", 2**30, 0.01, 8)
    assert alg == pytest.approx(107.3741824) and bus == pytest.approx(107.3741824 * 1.75)
    assert set(COLLECTIVES) == {c for c, _ in HAND}
    assert [ring_latency_steps(c, 4) for c in COLLECTIVES] == [6, 3, 3, 3, 3, 1]
    with pytest.raises(ValueError, match="unknown collective 'reduce'"):
        busbw_factor("reduce", 4)


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
    cfg = bench.Config(target_ms=150, iters=20, min_iters=5, warmup=5)
    assert bench.plan_iterations(0.001, cfg) == (5, 20)  # small: capped at nccl-tests' 20 iterations
    assert bench.plan_iterations(0.010, cfg) == (4, 15)
    assert bench.plan_iterations(0.100, cfg) == (1, 5)  # big: the floor
    assert bench.plan_iterations(0.100, bench.Config(warmup=0)) == (0, 5)


def _sizes():
    return 2.0 ** np.arange(10, 31)  # 1 KiB .. 1 GiB


@pytest.mark.parametrize("coll,n", [("all_reduce", 8), ("all_gather", 4), ("broadcast", 2), ("send_recv", 2)])
def test_fit_recovers_known_alpha_and_bandwidth(coll, n):
    alpha, bw = 40e-6, 25e9  # 40 us, 25 GB/s of busbw
    s = _sizes()
    t = alpha + busbw_factor(coll, n) * s / bw
    exact = fit_alpha_beta(coll, n, s, t)
    assert exact.alpha_us == pytest.approx(40.0, rel=1e-9) and exact.bw_GBps == pytest.approx(25.0, rel=1e-9)
    assert exact.n_half_bytes == pytest.approx(alpha * bw / busbw_factor(coll, n), rel=1e-9)
    assert exact.kind == "busbw" and exact.rms_rel_err < 1e-9 and exact.points == s.size
    noisy = fit_alpha_beta(coll, n, s, t * np.random.default_rng(0).uniform(0.95, 1.05, s.size))
    assert noisy.alpha_us == pytest.approx(40.0, rel=0.06) and noisy.bw_GBps == pytest.approx(25.0, rel=0.06)
    assert 0.01 < noisy.rms_rel_err < 0.05


def test_fit_edge_cases():
    s = _sizes()
    one_rank = fit_alpha_beta("all_reduce", 1, s, 5e-6 + s / 100e9)  # factor 0: fits algbw instead
    assert one_rank.kind == "algbw" and one_rank.bw_GBps == pytest.approx(100.0)
    pure_bw = fit_alpha_beta("all_reduce", 4, s, 1.5 * s / 10e9 * (1 + 0.01 * np.cos(s)))
    assert pure_bw.alpha_us >= 0.0 and pure_bw.bw_GBps == pytest.approx(10.0, rel=0.02)
    flat = fit_alpha_beta("broadcast", 4, s, 1e-3 * (1 - 1e-3 * np.log2(s)))  # time falls with size
    assert math.isnan(flat.bw_GBps) and flat.alpha_us == pytest.approx(1000, rel=0.05)
    with pytest.raises(ValueError, match="need >= 2"):
        fit_alpha_beta("all_reduce", 4, [1024], [1e-3])
