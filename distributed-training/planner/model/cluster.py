"""The cluster as the cost model sees it: compute rates, memory, and the network of collective_cost.

Every figure starts from the hardware table (common/hardware.py) and can be overridden by a flag or
replaced by a measurement (--calibrate with allreduce-bench CSVs):

- peak TFLOP/s: the dense peak of the precision (the MFU/HFU denominator);
- achievable matmul TFLOP/s: the measured large-GEMM rate (MAMF) of that precision; where nobody
  measured it the planner assumes DEFAULT_MATMUL_FRACTION of peak and says so;
- the network (common/collective_cost.py, the model fsdp-scaling's projection uses too): --gpus-per-node
  GPUs share NVLink/NVSwitch at the per-direction NVLink rate, the rest is the per-GPU NIC; 1 GPU per
  domain (or --nvlink-gbps 0) is a PCIe-only machine, where every collective runs at the per-GPU network
  rate (a PCIe Gen4/Gen5 x16 link delivers 24-48 GB/s, allreduce-anchors §3.4-3.5, the order of one
  200-400 Gb/s NIC). Achieved rates, effective latencies per ring step and per tree level, and the sizes
  at half bandwidth they give are documented and tested there;
- --calibrate replaces the network's figures by the fit of allreduce-bench's all_reduce sweeps
  (planner/calibrate/network.py; common/collective_fit.py: the same rule as fsdp-scaling's projection).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.collective_cost import Network, preset_network
from common.hardware import GPUPreset

from .calibration import FITTED, ComputeConstants
from .floor import PUBLISHED, HostCosts

DEFAULT_MATMUL_FRACTION = 0.80  # H100 MAMF 794.5/989.4; used only where the table has no measurement


@dataclass(frozen=True)
class Cluster:
    gpu: str  # preset name
    label: str
    gpus: int
    precision: str
    peak_tflops: float  # dense peak of `precision` (MFU denominator)
    matmul_tflops: float  # achievable large-GEMM rate of `precision`
    bf16_matmul_tflops: float  # attention stays in bf16 under FP8 (TransformerEngine's default)
    memory_gb: float
    hbm_gbps: float  # data-sheet HBM GB/s (the compute model applies the achievable fraction, calibration.py)
    net: Network  # NVLink domain, achieved bus rates and latencies (common/collective_cost.py)
    notes: tuple[str, ...] = ()  # where figures came from when not from the table
    bf16_peak_tflops: float = 0.0  # dense bf16 peak (FlashAttention's efficiency is quoted against it)
    compute: ComputeConstants = FITTED  # the compute model's constants (calibration.py)
    host_costs: HostCosts = PUBLISHED  # the host's cost per unit of the framework's work (floor.py)

    @property
    def domain(self) -> int:
        """GPUs per NVLink domain; 1 = PCIe only."""
        return self.net.domain

    def describe(self) -> str:
        dom = "PCIe only" if self.domain == 1 else f"NVLink domain of {self.domain}"
        return (f"{self.gpus} x {self.label}, {dom}, {self.net.intra_GBps:.0f} GB/s in-domain / "
                f"{self.net.nic_GBps:.1f} GB/s per GPU across (achieved), peak {self.peak_tflops:.0f} "
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
    return Cluster(preset.name, preset.label, gpus, precision, peak, matmul_tflops, bf16_matmul, mem,
                   preset.hbm_tbps * 1000, preset_network(domain, link, net), notes=tuple(notes),
                   bf16_peak_tflops=preset.bf16_tflops or peak)
