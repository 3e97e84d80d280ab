"""The collective cost model: bus factors by hand, ring/tree time by hand, and the published figures it claims."""

import numpy as np
import pytest

from common.collective_cost import (COLLECTIVES, Network, bus_bandwidth, bus_rate_GBps, busbw_factor, ceil_log2,
                                    collective_time_s, half_bandwidth_bytes, members_per_domain, preset_network,
                                    ring_latency_steps)
from common.hardware import PRESETS

MiB, GiB = 2**20, 2**30
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


def test_bandwidths_in_gb_of_1e9_bytes_and_ring_steps():
    # 1 GiB all_reduce in 10 ms on 8 ranks: algbw = 2^30 / 0.01 / 1e9, busbw = algbw * 7/4.
    alg, bus = bus_bandwidth("all_reduce", 2**30, 0.01, 8)
    assert alg == pytest.approx(107.3741824) and bus == pytest.approx(107.3741824 * 1.75)
    assert set(COLLECTIVES) == {c for c, _ in HAND}
    assert [ring_latency_steps(c, 4) for c in COLLECTIVES] == [6, 3, 3, 3, 3, 1]
    with pytest.raises(ValueError, match="unknown collective 'reduce'"):
        busbw_factor("reduce", 4)
    assert list(ceil_log2(np.array([1, 2, 3, 4, 5, 1024, 1025]))) == [0, 1, 2, 2, 3, 10, 11]
    assert list(members_per_domain(np.array([8, 16, 2, 64]), np.array([1, 1, 4, 8]), 8)) == [8, 8, 2, 1]


TOY = Network(domain=8, intra_GBps=100.0, nic_GBps=10.0, alpha_step_us=1.0, alpha_level_us=10.0)


def test_ring_and_tree_time_by_hand():
    S = 1e9
    # One domain: ring on NVLink, 2(n-1) steps of alpha.
    assert float(collective_time_s("all_reduce", S, 8, 8, TOY)) == pytest.approx(2 * 7 / 8 * S / 100e9 + 14e-6)
    # Two domains of 8: one ring per NIC, bus min(100, 8 x 10) = 80 GB/s; one tree level across.
    assert float(collective_time_s("all_reduce", S, 16, 8, TOY)) == pytest.approx(
        2 * 15 / 16 * S / 80e9 + 14e-6 + 2 * 10e-6)
    # One GPU per domain (DP across nodes beside TP 8): one NIC each, ceil(log2 4) = 2 levels.
    assert float(collective_time_s("all_reduce", S, 4, 1, TOY)) == pytest.approx(2 * 3 / 4 * S / 10e9 + 4 * 10e-6)
    # Half an all-reduce: one ring pass, half the latency.
    assert float(collective_time_s("all_gather", S, 16, 8, TOY)) == pytest.approx(15 / 16 * S / 80e9 + 7e-6 + 10e-6)
    # send_recv: one hop, the NVLink rate and a_step inside a domain, one NIC and a_level across.
    assert float(collective_time_s("send_recv", S, 2, 2, TOY)) == pytest.approx(S / 100e9 + 1e-6)
    assert float(collective_time_s("send_recv", S, 2, 1, TOY)) == pytest.approx(S / 10e9 + 10e-6)
    assert float(collective_time_s("all_reduce", S, 1, 1, TOY)) == 0.0  # one rank: nothing moves
    # Arrays in, arrays out (the planner prices thousands of configurations at once).
    many = collective_time_s("all_reduce", S, np.array([1, 8, 16]), np.array([1, 8, 8]), TOY)
    assert many.shape == (3,) and many[0] == 0 and many[2] > many[1]


def test_half_bandwidth_is_where_busbw_halves():
    for n, nl in ((8, 8), (64, 8), (4, 1)):
        s = float(half_bandwidth_bytes("all_reduce", n, nl, TOY))
        t = float(collective_time_s("all_reduce", s, n, nl, TOY))
        assert bus_bandwidth("all_reduce", s, t, n)[1] == pytest.approx(float(bus_rate_GBps(TOY, n, nl)) / 2)


def _net(preset: str) -> Network:
    p = PRESETS[preset]
    return preset_network(p.nvlink_domain, p.nvlink_gbps, p.net_gbits)


@pytest.mark.parametrize("preset, n, published_MiB, tolerance", [
    # allreduce-anchors section 3.5: ~8 MiB on 8 A100s, ~16 MiB on 8 H200s (the model prices H100 = H200
    # rings), and 64-256 MiB for NVLSTree from 32 to 8192 H100s (GTC24 S62129 slide 35).
    ("a100", 8, 8, 0.2), ("h100", 8, 16, 0.2), ("h100", 32, 64, 0.1), ("h100", 8192, 256, 0.1)])
def test_half_bandwidth_sizes_match_the_published_curves(preset, n, published_MiB, tolerance):
    got = float(half_bandwidth_bytes("all_reduce", n, 8, _net(preset))) / MiB
    assert got == pytest.approx(published_MiB, rel=tolerance)


def test_half_bandwidth_sizes_as_documented():
    # The figures the docstrings and the guide quote, to 0.1 MiB: 9.2 / 13.7 / 62.0 / 252.4.
    got = [float(half_bandwidth_bytes("all_reduce", n, 8, _net(p))) / MiB
           for p, n in (("a100", 8), ("h100", 8), ("h100", 32), ("h100", 8192))]
    assert [round(x, 1) for x in got] == [9.2, 13.7, 62.0, 252.4]


@pytest.mark.parametrize("preset, nodes, published, source", [
    ("h100", 4, 370.0, "GTC25 S72583: DGX H100 (NVL4 + 8x400Gb), 32 GPUs"),
    ("h100", 16, 380.0, "GTC24 S62129: NVL4 + 8x400Gb RDMA (DGX H100)"),
    ("a100", 4, 192.0, "GTC24/25: DGX A100 (NVL3 + 8x200Gb RDMA)"),
    ("b200", 4, 381.8, "ml-engineering: 4 x P6-B200, 8 x 400G EFA per node, 32 ranks, 16 GiB")])
def test_multi_node_busbw_matches_nccl_tests(preset, nodes, published, source):
    # A ring per NIC: 8 GPUs per node get 8 NICs, not one (one NIC would give 46 GB/s on H100).
    n, S = 8 * nodes, 16 * GiB
    t = float(collective_time_s("all_reduce", S, n, 8, _net(preset)))
    assert bus_bandwidth("all_reduce", S, t, n)[1] == pytest.approx(published, rel=0.06), source


def test_pcie_only_runs_everything_at_the_nic_rate():
    net = preset_network(8, 0, 400)
    assert net.domain == 1 and net.intra_GBps == net.nic_GBps == pytest.approx(46.0)
    assert float(bus_rate_GBps(net, 8, 1)) == pytest.approx(46.0)
