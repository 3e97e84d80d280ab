"""The collective cost model: bus factors by hand, ring/tree time by hand, and the published figures it claims."""

import numpy as np
import pytest

from common.collective_cost import (COLLECTIVES, NCCL_PROTOCOLS, Network, bus_bandwidth, bus_rate_GBps, busbw_factor,
                                    ceil_log2, collective_time_s, half_bandwidth_bytes, members_per_domain,
                                    preset_network, protocol_of, protocol_time_s, ring_latency_steps)
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


NCCL_TOY = TOY.calibrated(protocols=NCCL_PROTOCOLS)


def test_protocols_by_hand():
    # 8 ranks in one domain, 8 KiB. Simple: 14 steps x 1 us + 1.75 x 8192 B / 100 GB/s. NCCL's Simple latency of the
    # same call is 8.4 + 14 x 3.4 = 56 us, LL's 3.6 + 14 x 0.47 = 10.18 us, LL128's 10 + 14 x 1.9 = 36.6 us: LL and
    # LL128 take 10.18/56 and 36.6/56 of the effective 14 us, at 1/4 and 0.92 of the bus rate.
    S, wire = 8192, 1.75 * 8192
    want = {"Simple": 14e-6 + wire / 100e9, "LL": 14e-6 * 10.18 / 56 + wire / 25e9,
            "LL128": 14e-6 * 36.6 / 56 + wire / 92e9}
    for proto, t in want.items():
        assert float(protocol_time_s("all_reduce", S, 8, 8, NCCL_TOY, proto)) == pytest.approx(t), proto
    assert float(collective_time_s("all_reduce", S, 8, 8, NCCL_TOY)) == pytest.approx(want["LL"])
    assert protocol_of("all_reduce", S, 8, 8, NCCL_TOY) == "LL"
    # A bare alpha-beta network (gloo, a fitted sweep) has Simple only: the line as it was.
    assert float(collective_time_s("all_reduce", S, 8, 8, TOY)) == pytest.approx(want["Simple"])
    # Large messages ride Simple's full rate; a medium one LL128 (latency below Simple's, 0.92 of the rate).
    assert protocol_of("all_reduce", 1e9, 8, 8, NCCL_TOY) == "Simple"
    assert protocol_of("all_reduce", 2**20, 8, 8, NCCL_TOY) == "LL128"
    # Across domains the effective Simple line stands (it is fitted to measured multi-node curves, NCCL's choice
    # included): LL and LL128 are priced inside one domain only.
    assert protocol_of("all_reduce", S, 16, 8, NCCL_TOY) == "Simple"
    assert float(protocol_time_s("all_reduce", S, 16, 8, NCCL_TOY, "LL")) == np.inf
    # An all-gather inside one domain: one pass (7 steps), LL at a third of the bus rate (tuning.cc).
    assert float(protocol_time_s("all_gather", S, 8, 8, NCCL_TOY, "LL")) == pytest.approx(
        7e-6 * (3.6 + 7 * 0.47) / (8.4 + 7 * 3.4) + 7 / 8 * S / (100e9 / 3))
    # send_recv: one hop, (3.6 + 0.47) / (8.4 + 3.4) of a_step.
    assert float(protocol_time_s("send_recv", S, 2, 2, NCCL_TOY, "LL")) == pytest.approx(
        1e-6 * 4.07 / 11.8 + S / (100e9 / 3))
    assert float(collective_time_s("all_reduce", S, 1, 1, NCCL_TOY)) == 0.0  # one rank: nothing moves


def test_protocols_against_published_h100_class_curves():
    # Across nodes the effective line still puts half bandwidth where NVIDIA's NVLSTree scan does (64-256 MiB).
    for n, size in ((32, 64 * MiB), (8192, 256 * MiB)):
        t = float(collective_time_s("all_reduce", size, n, 8, _net("h100")))
        assert bus_bandwidth("all_reduce", size, t, n)[1] == pytest.approx(
            float(bus_rate_GBps(_net("h100"), n, 8)) / 2, rel=0.05)
    # 8 x H200, NVLink, ml-engineering's all_reduce_bench (allreduce-anchors section 3.4): busbw 155.5 GB/s at 8 MiB
    # (NCCL LL128's range) and 346.5 at 64 MiB (NVLS there; the ring reaches ~370 at its plateau). Below 1 MiB the
    # measured time carries a per-call floor (launch, synchronisation: ~40 us at 32 KiB) that NCCL's model has not.
    net = _net("h100")
    for size, published, tol in ((8 * MiB, 155.5, 0.1), (64 * MiB, 346.5, 0.2)):
        t = float(collective_time_s("all_reduce", size, 8, 8, net))
        assert bus_bandwidth("all_reduce", size, t, 8)[1] == pytest.approx(published, rel=tol), size
    assert protocol_of("all_reduce", 32 * 1024, 8, 8, net) == "LL"
    assert float(collective_time_s("all_reduce", 32 * 1024, 8, 8, net)) < 20e-6  # latency-bound: LL's ~13 us
