"""The cluster as the cost model sees it: compute rates, memory, and two alpha-beta networks.

Every figure starts from the hardware table (common/hardware.py) and can be overridden by a flag or
replaced by a measurement (--calibrate with allreduce-bench CSVs):

- peak TFLOP/s: the dense peak of the precision (the MFU/HFU denominator);
- achievable matmul TFLOP/s: the measured large-GEMM rate (MAMF) of that precision; where nobody
  measured it the planner assumes DEFAULT_MATMUL_FRACTION of peak and says so;
- the NVLink domain: --gpus-per-node GPUs share NVLink/NVSwitch at the per-direction NVLink rate;
  1 GPU per domain (or --nvlink-gbps 0) is a PCIe-only machine, where every collective runs at the
  per-GPU network rate (a PCIe Gen4/Gen5 x16 link delivers 24-48 GB/s, allreduce-anchors §3.4-3.5,
  the order of one 200-400 Gb/s NIC);
- achieved bus bandwidth = link rate × efficiency: NVLink rings reach 77-82% of the per-direction
  spec in nccl-tests (A100 230/300, H100 365-370/450, B200 680-700/900), IB/RoCE NICs 92-96%
  (allreduce-anchors §3.5); we take 0.80 and 0.92;
- latency (alpha): 3 us per ring step inside the domain (NCCL tuning.cc ring NVLink Simple 3.4 us per
  hop; 8xA100 nccl-tests all_reduce of 32 KiB takes ~44 us = 14 steps x 3.1 us; it puts the
  half-bandwidth size near 16 MiB, as measured on 8xH200), 40 us per tree level across nodes (NVIDIA's
  NVLSTree scan from 32 to 8192 H100s reaches half of its peak busbw at 64-256 MiB; tuning.cc's NET
  per-hop latency, 9.6 us, is a lower bound that ignores the ramp).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

from common.hardware import GPUPreset

NVLINK_EFFICIENCY = 0.80
NETWORK_EFFICIENCY = 0.92
ALPHA_INTRA_US = 3.0
ALPHA_INTER_US = 40.0
HBM_EFFICIENCY = 0.90  # Calculon's A100 system file: 90% of HBM bandwidth for transfers >= 100 MB
DEFAULT_MATMUL_FRACTION = 0.80  # H100 MAMF 794.5/989.4; used only where the table has no measurement


@dataclass(frozen=True)
class Cluster:
    gpu: str  # preset name
    label: str
    gpus: int
    domain: int  # GPUs per NVLink domain; 1 = PCIe only
    precision: str
    peak_tflops: float  # dense peak of `precision` (MFU denominator)
    matmul_tflops: float  # achievable large-GEMM rate of `precision`
    bf16_matmul_tflops: float  # attention stays in bf16 under FP8 (TransformerEngine's default)
    memory_gb: float
    hbm_gbps: float  # achieved HBM GB/s
    intra_gbps: float  # achieved bus bandwidth per GPU inside the domain, GB/s
    inter_gbps: float  # achieved bus bandwidth per GPU across domains, GB/s
    alpha_intra_us: float = ALPHA_INTRA_US
    alpha_inter_us: float = ALPHA_INTER_US
    notes: tuple[str, ...] = ()  # where figures came from when not from the table

    def describe(self) -> str:
        dom = "PCIe only" if self.domain == 1 else f"NVLink domain of {self.domain}"
        return (f"{self.gpus} x {self.label}, {dom}, {self.intra_gbps:.0f} GB/s in-domain / "
                f"{self.inter_gbps:.1f} GB/s per GPU across (achieved), peak {self.peak_tflops:.0f} "
                f"{self.precision} TFLOP/s, matmul {self.matmul_tflops:.0f}, {self.memory_gb:.0f} GB")


def make_cluster(preset: GPUPreset, gpus: int, precision: str = "bf16", gpus_per_node: int | None = None,
                 nvlink_gbps: float | None = None, inter_node_gbps: float | None = None,
                 peak_tflops: float | None = None, matmul_tflops: float | None = None,
                 memory_gb: float | None = None) -> Cluster:
    """Resolve table figures and overrides; ValueError (exit 2 upstream) for what cannot be planned."""
    notes = []
    peak = peak_tflops if peak_tflops is not None else preset.peak_tflops(precision)
    if peak is None:
        why = "has no FP8 tensor cores" if precision == "fp8" and preset.bf16_tflops else "has no known peak"
        raise ValueError(f"--gpu {preset.name} {why} for {precision}; pass --peak-tflops or pick another --gpu")
    table_peak = preset.peak_tflops(precision) or peak
    mamf = preset.achievable_matmul_tflops(precision)
    if matmul_tflops is None:
        if mamf is None:
            notes.append(f"matmul rate assumed {DEFAULT_MATMUL_FRACTION:.0%} of peak (no MAMF measurement)")
            matmul_tflops = DEFAULT_MATMUL_FRACTION * peak
        else:  # keep the measured fraction when the peak is overridden
            matmul_tflops = mamf * peak / table_peak
    if precision == "bf16":
        bf16_matmul = matmul_tflops
    else:
        bf16_matmul = preset.achievable_matmul_tflops("bf16") or DEFAULT_MATMUL_FRACTION * (preset.bf16_tflops or peak)
    domain = preset.nvlink_domain if gpus_per_node is None else gpus_per_node
    link = preset.nvlink_gbps if nvlink_gbps is None else nvlink_gbps
    if link is not None and link < 0:
        raise ValueError(f"--nvlink-gbps must be >= 0 (0 = PCIe only), got {link}")
    if not link:
        domain = 1  # PCIe only: no fast domain
    net = preset.net_gbits if inter_node_gbps is None else inter_node_gbps
    if net is None:
        raise ValueError(f"--gpu {preset.name} has no scale-out rate in the table; pass --inter-node-gbps")
    mem = preset.memory_gb if memory_gb is None else memory_gb
    if mem is None or preset.hbm_tbps is None:
        raise ValueError(f"--gpu {preset.name} has no known memory size or bandwidth; pick a GPU preset")
    for flag, value in (("--gpus", gpus), ("--gpus-per-node", domain), ("--inter-node-gbps", net),
                        ("--peak-tflops", peak), ("--matmul-tflops", matmul_tflops), ("--memory-gb", mem)):
        if value <= 0:
            raise ValueError(f"{flag} must be positive, got {value}")
    inter = net / 8 * NETWORK_EFFICIENCY
    intra = link * NVLINK_EFFICIENCY if domain > 1 else inter
    return Cluster(preset.name, preset.label, gpus, domain, precision, peak, matmul_tflops, bf16_matmul, mem,
                   preset.hbm_tbps * 1000 * HBM_EFFICIENCY, intra, inter, notes=tuple(notes))


# ---- calibration from allreduce-bench ------------------------------------------------------------

def _column(row: dict, name: str) -> str:
    for key, value in row.items():
        if key and key.lower() == name.lower():
            return value
    raise KeyError(name)


def calibrate(cluster: Cluster, paths: list[str]) -> Cluster:
    """Replace bandwidths and latencies by what allreduce-bench measured (all_reduce rows).

    In-domain: the largest single-node world size; its busbw averaged over the three largest sizes is
    the achieved ring bandwidth, its smallest-size time / (2(n-1)) the per-step latency. Across nodes
    (k nodes, n ranks, g = n/k per node): a ring all-reduce runs one ring per NIC, so its busbw is g
    NICs' worth and the per-GPU network rate is busbw / g (run the sweep with NCCL_ALGO=RING: NCCL's
    tree and NVLS algorithms reduce inside the node first and report more than the NICs carry,
    allreduce-anchors §3.3); the latency is what the smallest size takes beyond the in-node steps,
    per tree level.
    """
    rows = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"--calibrate: no such file {path}")
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                try:
                    if _column(row, "collective") != "all_reduce":
                        continue
                    rows.append((int(_column(row, "world_size")), int(_column(row, "nnodes")),
                                 int(_column(row, "size_bytes")), float(_column(row, "time_us")),
                                 float(_column(row, "busbw_GBps"))))
                except (KeyError, ValueError) as e:
                    raise ValueError(f"--calibrate: {path} is not an allreduce-bench sweep CSV ({e})") from None
    single = [r for r in rows if r[1] == 1 and r[0] > 1]
    multi = [r for r in rows if r[1] > 1]
    if not single and not multi:
        raise ValueError("--calibrate: no all_reduce rows with world_size >= 2 in " + ", ".join(paths))
    changes, notes = {}, list(cluster.notes)
    if single and cluster.domain > 1:
        n = max(r[0] for r in single)
        sel = sorted((r for r in single if r[0] == n), key=lambda r: r[2])
        changes["intra_gbps"] = sum(r[4] for r in sel[-3:]) / len(sel[-3:])
        changes["alpha_intra_us"] = sel[0][3] / (2 * (n - 1))
        notes.append(f"in-domain bandwidth/latency calibrated from a {n}-rank all_reduce sweep")
    if multi:
        n, k = max((r[0], r[1]) for r in multi)
        sel = sorted((r for r in multi if (r[0], r[1]) == (n, k)), key=lambda r: r[2])
        g = n // k
        changes["inter_gbps"] = sum(r[4] for r in sel[-3:]) / len(sel[-3:]) / g
        intra_steps_us = 2 * (g - 1) * changes.get("alpha_intra_us", cluster.alpha_intra_us)
        changes["alpha_inter_us"] = max(0.0, sel[0][3] - intra_steps_us) / (2 * max(1, math.ceil(math.log2(k))))
        notes.append(f"network bandwidth/latency calibrated from a {n}-rank, {k}-node all_reduce sweep")
        if cluster.domain == 1:
            changes["intra_gbps"] = changes["inter_gbps"]
    return replace(cluster, **changes, notes=tuple(notes))
