"""The alpha-beta fit recovers known parameters, flags extrapolation; calibration follows its one rule."""

import math

import numpy as np
import pandas as pd
import pytest

from common.collective_cost import busbw_factor, collective_time_s, preset_network
from common.collective_fit import calibrate, fit_alpha_beta


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
    assert exact.extrapolated == ""  # n_1/2 ~ 1 MB and the plateau both inside 1 KiB .. 1 GiB
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
    assert math.isnan(flat.bw_GBps) and flat.alpha_us == pytest.approx(1000, rel=0.05) and flat.extrapolated == ""
    with pytest.raises(ValueError, match="need >= 2"):
        fit_alpha_beta("all_reduce", 4, [1024], [1e-3])


def test_extrapolation_is_flagged():
    # alpha 1 ms at 10 GB/s on 2 ranks: n_1/2 = 10 MB. Sizes up to 4 MiB: neither n_1/2 nor B was reached.
    s = 2.0 ** np.arange(10, 23)
    t = 1e-3 + s / 10e9
    assert fit_alpha_beta("all_reduce", 2, s, t).extrapolated == "n_1/2 and B"
    # Up to 16 MiB: past n_1/2, but busbw at the largest size is only 16.8 / (16.8 + 10) = 63% of B.
    s = 2.0 ** np.arange(10, 25)
    assert fit_alpha_beta("all_reduce", 2, s, 1e-3 + s / 10e9).extrapolated == "B"
    s = 2.0 ** np.arange(10, 27)  # 64 MiB: 87% of B
    assert fit_alpha_beta("all_reduce", 2, s, 1e-3 + s / 10e9).extrapolated == ""


def _sweep(net, n, nodes, per_node=8):
    """Rows as allreduce-bench writes them, timed by the model itself (exactly alpha-beta)."""
    sizes = 2 ** np.arange(10, 33)
    t = collective_time_s("all_reduce", sizes, n, per_node if nodes > 1 else n, net)
    return pd.DataFrame({"collective": "all_reduce", "world_size": n, "nnodes": nodes, "size_bytes": sizes,
                         "time_us": t * 1e6})


def test_calibration_recovers_the_network_that_timed_the_sweep():
    truth = preset_network(8, 300, 200).calibrated(alpha_step_us=4.0, alpha_level_us=50.0)
    rows = pd.concat([_sweep(truth, 8, 1), _sweep(truth, 4, 1), _sweep(truth, 32, 4)])
    # Timed with NCCL's protocols: LL and LL128 below 64 MiB, which the fit leaves out (it recovers Simple's line).
    assert (rows["time_us"] < 1e6 * collective_time_s("all_reduce", rows["size_bytes"], rows["world_size"], 8,
                                                      truth.calibrated(protocols=("Simple",)))).any()
    table = preset_network(8, 450, 400)  # starts from another machine's figures: all of them get replaced
    net, notes = calibrate(table, rows)
    # In-domain from the largest single-node run (8 ranks): B = NVLink busbw, alpha / 14 ring steps.
    assert net.intra_GBps == pytest.approx(truth.intra_GBps) and net.alpha_step_us == pytest.approx(4.0)
    # Across 4 nodes of 8: B = min(240, 8 x 23) = 184 is eight NICs' worth; alpha - 14 steps = 2 x 2 levels.
    assert net.nic_GBps == pytest.approx(truth.nic_GBps) and net.alpha_level_us == pytest.approx(50.0)
    assert len(notes) == 2 and "8-rank" in notes[0] and "4-node" in notes[1] and net.source != table.source


def test_calibration_refuses_what_it_cannot_use():
    net = preset_network(8, 450, 400)
    with pytest.raises(ValueError, match="not an allreduce-bench sweep"):
        calibrate(net, pd.DataFrame({"collective": ["all_reduce"], "size_bytes": [1]}))
    one_rank = _sweep(net, 8, 1).assign(world_size=1)
    with pytest.raises(ValueError, match="no all_reduce rows with world_size >= 2"):
        calibrate(net, one_rank)
    short = _sweep(net, 8, 1).head(5)  # 1-16 KiB: latency only, far below n_1/2
    cal, notes = calibrate(net, short)
    assert "EXTRAPOLATED n_1/2 and B" in notes[0]
