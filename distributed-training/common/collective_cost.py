"""What a collective costs: nccl-tests' bus factors, ring and tree time, the size at half bandwidth.

The one model of collective time in this repository: allreduce-bench's fit and report, fsdp-scaling's
projection and the planner all price collectives here. No torch: numpy only, and every function takes
plain numbers or numpy arrays (the planner prices thousands of configurations at once).

Bus bandwidth, as NVIDIA nccl-tests defines it (doc/PERFORMANCE.md, src/*.cu `*GetBw`;
../shared/reference/allreduce-anchors.md section 1.1), n ranks, GB = 1e9 bytes:

    algbw = S / t        busbw = algbw x factor(n)

    collective      S (nccl-tests' size)                     count it prints                  factor(n)
    all_reduce      the buffer on each rank                  elements of that buffer          2(n-1)/n
    all_gather      the gathered output (n per-rank parts)   elements per rank                (n-1)/n
    reduce_scatter  the input (n per-rank parts)             elements per rank (the output)   (n-1)/n
    all_to_all      each rank's buffer (n per-peer parts)    elements per peer                (n-1)/n
    broadcast       the buffer                               elements of that buffer          1
    send_recv       the buffer each rank sends               elements of that buffer          1

factor(n) x S is what each rank's link must carry in a bandwidth-optimal ring (Patarasuk & Yuan, JPDC
69(2), 2009), so busbw compares with the link's per-direction rate whatever n is. With n = 1 no byte
crosses a link: factor 0 for all_reduce and the split collectives.

Time (Hockney's alpha-beta; the ring cost forms of Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005;
allreduce-anchors section 5.2). A group of n GPUs, n_l of them per NVLink domain, k = ceil(n / n_l)
domains:

    t = passes x ((n_l - 1) a_step + ceil(log2 k) a_level)  +  factor(n) S / B

passes = 2 for all_reduce (a reduce-scatter ring, then an all-gather ring), 1 for the others; a
send_recv is one hop (a_step inside the domain, a_level across). Inside the domain every ring step
costs a_step; across domains NCCL's tree adds a_level per level (its tuning model: ring latency
linear in the steps, tree latency logarithmic in the nodes; allreduce-anchors section 5.4). B, the
bus rate, is the achieved NVLink busbw inside one domain and, across domains,
min(NVLink, n_l x per-GPU NIC): NCCL runs one ring per NIC, so a group with 8 GPUs per node gets the
node's 8 NICs and a group with one GPU per node gets one NIC.

Constants, from published measurements (allreduce-anchors section 3):
- achieved bandwidth = link rate x efficiency: nccl-tests' ring busbw reaches 77-82% of the
  per-direction NVLink rate (A100 230-235/300, H100/H200 365-370/450, B200 680-700/900) and 92-96% of
  an IB/RoCE NIC (HDR 24/25, NDR 46-48/50): NVLINK_EFFICIENCY 0.80, NETWORK_EFFICIENCY 0.92. With 8 NICs
  of 400 Gb/s that gives 360 GB/s across DGX H100 nodes, where nccl-tests measures 370-380 (GTC24
  S62129, GTC25 S72583), and 184 GB/s across DGX A100 nodes (8 x 200 Gb/s; measured 192).
- latency: a_step = 5 us per ring step and a_level = 70 us per tree level put the size at half
  bandwidth (below) at 9 MiB on 8 A100s, 14 MiB on 8 H100s, 62 MiB on 32 H100s and 252 MiB on 8192,
  where the published curves cross half of their peak at about 8 MiB (8xA100), 16 MiB (8xH200) and
  64-256 MiB (NVIDIA's NVLSTree scan from 32 to 8192 H100s; allreduce-anchors section 3.5).
  These are *effective* latencies: an 8-GPU all-reduce of 32 KiB takes ~44 us (3 us per step) but
  NCCL's protocol ramp (LL, LL128, then Simple) makes medium messages slower than a straight line
  through that latency, and pricing medium and large messages right is what the labs and the planner
  need. Small messages (< 1 MiB) are overpriced by up to 1.6x.

Protocols (NCCL's tuning model, src/graph/tuning.cc; allreduce-anchors section 5.4). NCCL moves a message with
one of three protocols and picks, per call, the one its model says is fastest: LL (8-byte stores, 4 of them flag:
the lowest latency, a quarter of the bus rate for an all-reduce or across nodes and a third otherwise), LL128
(128-byte lines with 8 bytes of flag: 0.92 of the bus rate, a middle latency) and Simple (the full bus rate, the
highest latency). NCCL's constants, per protocol LL / LL128 / Simple, in us: ring base latency 3.6 / 10.0 / 8.4,
per ring step over NVLink 0.47 / 1.9 / 3.4, per tree level across the network 5.0 / 8.5 / 50. The formula above is
the Simple protocol's time with effective latencies; LL and LL128 take NCCL's latency of the same steps and levels,
scaled by the ratio of the effective Simple latency to NCCL's Simple latency (the effective constants then carry
over), and their share of the bus rate:

    t_p = latency x L_p(n_l, k) / L_Simple(n_l, k)  +  factor(n) S / (f_p B),    t = min over p of t_p
    L_p = base_p + passes x ((n_l - 1) hop_p + ceil(log2 k) level_p)

A small message then costs the LL latency (an 8-GPU all-reduce of 32 KiB: 13 us with the H100 figures, where the
Simple line alone gave 70), a medium one LL128's, a large one Simple's bandwidth. Inside one NVLink domain only:
across domains the effective line is itself fitted to measured curves that include NCCL's choice of protocol and
algorithm (NVIDIA's NVLSTree scan, 32 to 8192 H100s, half bandwidth at 64-256 MiB), and NCCL's ratios on top of it
would put half bandwidth at 16-64 MiB there, below what was measured. A Network lists the protocols its library
has: NCCL clusters (preset_network) all three, a bare alpha-beta network (gloo, a fitted sweep as it was measured)
only Simple.

The size at half bandwidth, n_1/2 (Hockney's half-performance length): busbw = B / 2 where the Simple protocol's
latency and bandwidth terms are equal, S = latency x B / factor(n).

Calibration from measured sweeps (allreduce-bench CSVs) is in collective_fit.py; the GPU preset
figures in hardware.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv")
PARTS = frozenset({"all_gather", "reduce_scatter", "all_to_all"})  # S is split into n per-rank/per-peer parts

NVLINK_EFFICIENCY = 0.80
NETWORK_EFFICIENCY = 0.92
ALPHA_STEP_US = 5.0  # per ring step inside an NVLink domain
ALPHA_LEVEL_US = 70.0  # per tree level across domains


class Protocol(NamedTuple):
    """One of NCCL's protocols: its latencies (us) in NCCL's tuning model and its share of the bus rate."""
    name: str
    base_us: float  # per call (ring)
    hop_us: float  # per ring step over NVLink
    level_us: float  # per tree level across the network
    bus_share: float  # of the Simple protocol's bus rate (LL: an all-reduce, or across nodes; see ll_share)


# NVIDIA/nccl src/graph/tuning.cc: baseLat (ring), hwLat[NVLINK][ring], hwLat[NET][tree]; LL's 1/4 and LL128's 0.92.
PROTOCOLS = {"LL": Protocol("LL", 3.6, 0.47, 5.0, 0.25), "LL128": Protocol("LL128", 10.0, 1.9, 8.5, 0.92),
             "Simple": Protocol("Simple", 8.4, 3.4, 50.0, 1.0)}
NCCL_PROTOCOLS = ("LL", "LL128", "Simple")


def busbw_factor(collective: str, n):
    """nccl-tests' bus-bandwidth factor for `collective` on n ranks (n may be an array)."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in PARTS:
        return (n - 1) / n
    if collective in ("broadcast", "send_recv"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")


def bus_bandwidth(collective: str, size_bytes: int, time_s: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one operation on S = size_bytes bytes taking time_s seconds."""
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * busbw_factor(collective, n)


def ring_latency_steps(collective: str, n: int) -> int:
    """Latency steps of the collective's ring form on n ranks in one domain (Thakur et al. 2005)."""
    busbw_factor(collective, n)  # validates the name
    return {"all_reduce": 2 * (n - 1), "send_recv": 1}.get(collective, n - 1)


def ceil_log2(k):
    """Exact ceil(log2 k) for k >= 1 (frexp: no transcendental functions, the same bits on every machine)."""
    return np.frexp(np.asarray(k, float) - 1.0)[1]


def members_per_domain(n, stride, domain: int):
    """How many members of a group (size n, consecutive members `stride` ranks apart) share one domain."""
    n, stride = np.asarray(n, float), np.asarray(stride, float)
    return np.where(stride >= domain, 1.0, np.minimum(n, np.floor(domain / stride)))


@dataclass(frozen=True)
class Network:
    """What the cost model knows of a cluster's links: achieved rates and effective latencies."""
    domain: int  # GPUs per NVLink domain; 1 = PCIe only (every collective then runs at the NIC rate)
    intra_GBps: float  # achieved busbw inside one domain
    nic_GBps: float  # achieved rate of one GPU's NIC (scale-out per GPU)
    alpha_step_us: float = ALPHA_STEP_US
    alpha_level_us: float = ALPHA_LEVEL_US
    source: str = "hardware table"
    protocols: tuple[str, ...] = ("Simple",)  # what the library picks from (NCCL: NCCL_PROTOCOLS)

    def calibrated(self, **changes) -> "Network":
        return replace(self, **changes)


def preset_network(domain: int, nvlink_GBps: float | None, net_Gbits: float, source: str = "hardware table"
                   ) -> Network:
    """The Network of a hardware table row: link rates (per direction, per GPU) times the efficiencies.
    No NVLink (None or 0) or a domain of 1 is a PCIe-only machine: every collective at the NIC rate."""
    nic = net_Gbits / 8 * NETWORK_EFFICIENCY
    if not nvlink_GBps or domain <= 1:
        return Network(1, nic, nic, source=source, protocols=NCCL_PROTOCOLS)
    return Network(int(domain), nvlink_GBps * NVLINK_EFFICIENCY, nic, source=source, protocols=NCCL_PROTOCOLS)


def domains(n, n_local):
    """k: how many NVLink domains a group of n GPUs with n_local per domain spans."""
    return np.ceil(np.asarray(n, float) / np.asarray(n_local, float))


def bus_rate_GBps(net: Network, n, n_local):
    """B: NVLink inside one domain; across domains the domain's NICs or NVLink, whichever is less."""
    n_local = np.asarray(n_local, float)
    across = np.minimum(net.intra_GBps, n_local * net.nic_GBps)
    return np.where(domains(n, n_local) > 1, across, net.intra_GBps)


def latency_s(collective: str, n, n_local, net: Network):
    """The alpha term: ring steps inside the domain, tree levels across it (module docstring)."""
    busbw_factor(collective, 2)  # validates the name
    k = domains(n, n_local)
    step, level = net.alpha_step_us * 1e-6, net.alpha_level_us * 1e-6
    if collective == "send_recv":  # one hop to a neighbour
        return np.where(k > 1, level, step)
    passes = 2 if collective == "all_reduce" else 1
    return passes * ((np.asarray(n_local, float) - 1) * step + ceil_log2(k) * level)


def nccl_latency_us(collective: str, n_local, k, proto: Protocol):
    """NCCL's modelled latency of one call with protocol `proto`: base + ring steps in the domain + tree levels."""
    passes = 2 if collective == "all_reduce" else 1
    if collective == "send_recv":
        return proto.base_us + np.where(np.asarray(k) > 1, proto.level_us, proto.hop_us)
    return proto.base_us + passes * ((np.asarray(n_local, float) - 1) * proto.hop_us + ceil_log2(k) * proto.level_us)


def ll_share(collective: str, k) -> np.ndarray:
    """LL's share of the bus rate: a quarter for an all-reduce or across nodes, a third otherwise (tuning.cc)."""
    across = np.asarray(k) > 1
    return np.where(across | (collective == "all_reduce"), 0.25, 1.0 / 3.0)


def protocol_time_s(collective: str, nbytes, n, n_local, net: Network, protocol: str):
    """Seconds for one collective with one protocol (module docstring); the Simple line is the effective model."""
    n = np.asarray(n, float)
    k = domains(n, n_local)
    wire = busbw_factor(collective, np.maximum(n, 1.0)) * np.asarray(nbytes, float)
    simple = latency_s(collective, n, n_local, net)
    proto = PROTOCOLS[protocol]
    share = ll_share(collective, k) if protocol == "LL" else proto.bus_share
    simple_nccl = nccl_latency_us(collective, n_local, k, PROTOCOLS["Simple"])
    scale = nccl_latency_us(collective, n_local, k, proto) / simple_nccl
    t = simple * scale + wire / (share * bus_rate_GBps(net, n, n_local) * 1e9)
    if protocol != "Simple":  # inside one domain only: across domains the effective line is NCCL's measured choice
        t = np.where(k > 1, np.inf, t)
    return np.where(n > 1, t, 0.0)


def collective_time_s(collective: str, nbytes, n, n_local, net: Network):
    """Seconds for one collective on S = nbytes (nccl-tests' S) over n GPUs, n_local per domain: the fastest of
    the network's protocols (Simple alone on a bare alpha-beta network)."""
    times = [protocol_time_s(collective, nbytes, n, n_local, net, p) for p in net.protocols]
    return np.minimum.reduce(times) if len(times) > 1 else times[0]


def protocol_of(collective: str, nbytes, n, n_local, net: Network) -> str:
    """The protocol collective_time_s prices one call with (scalars): what NCCL's tuner would pick."""
    times = [float(protocol_time_s(collective, nbytes, n, n_local, net, p)) for p in net.protocols]
    return net.protocols[int(np.argmin(times))]


def half_bandwidth_bytes(collective: str, n, n_local, net: Network):
    """n_1/2: the S at which busbw reaches half of the bus rate (latency term = bandwidth term)."""
    latency = latency_s(collective, n, n_local, net)
    return latency * bus_rate_GBps(net, n, n_local) * 1e9 / busbw_factor(collective, np.asarray(n, float))
