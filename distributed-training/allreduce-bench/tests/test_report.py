"""REPORT.md and TOPOLOGY.md from fixture files alone; the topology's NVML logic on a stand-in NVML; the
nccl-tests parser on a fixture of its text format."""

import socket
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

import bench
import report
import topology
from common.collective_cost import COLLECTIVES, busbw_factor
from common.results import PROVENANCE_COLUMNS
from nccl_tests import parse_perf_output

FIXTURES = Path(__file__).parent / "fixtures"


def _sweep_csv(path: Path, preset: str, hardware: str, ws: int, backend: str, alpha_us: float, bw: float) -> None:
    """A synthetic sweep (time = alpha + factor S / B exactly) in the runner's schema: a fixture, not a result."""
    rows = []
    for coll in COLLECTIVES:
        for s in 2 ** np.arange(10, 21):
            t = alpha_us + busbw_factor(coll, ws) * s / (bw * 1e9) * 1e6
            alg = s / t / 1e3
            rows.append({"collective": coll, "size_bytes": s, "count": s // 4, "dtype": "fp32", "world_size": ws,
                         "nnodes": 1, "backend": backend, "hardware": hardware, "time_us": t, "time_min_us": t * 0.9,
                         "time_max_us": t * 1.2, "algbw_GBps": alg, "busbw_GBps": alg * busbw_factor(coll, ws),
                         "time_loop_us": t * 0.9, "busbw_loop_GBps": alg / 0.9 * busbw_factor(coll, ws),
                         "wrong": 0, "warmup": 2, "iters": 20, "timing": "fixture", "preset": preset,
                         "nccl_env": "default", "note": "", "torch_version": "2.13.0", "nccl_version": "none"})
    cols = bench.COLUMNS + [c for c in PROVENANCE_COLUMNS if c not in bench.COLUMNS]
    pd.DataFrame(rows).reindex(columns=cols).to_csv(path, index=False)


def test_report_from_fixture_csvs(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    _sweep_csv(res / "sweep_cpu_ws4.csv", "cpu", "Some CPU (2 cores)", 4, "gloo", alpha_us=800, bw=0.5)
    (res / "topology_cpu.md").write_text("## Some CPU\n\n- fixture topology\n")
    cfg = report.Config(results=str(res), out=str(tmp_path / "REPORT.md"))
    text = report.report(cfg)
    assert "- GPU: no result is committed yet; `make allreduce-bench-gpu`" in text and "### CPU caveats" in text
    assert "| cpu 4 ranks, gloo, fp32 | all_reduce | " in text and "None: published busbw figures" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| cpu 4 ranks, gloo, fp32 | all_gather |"))
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert float(cells[4]) == 0.5 and float(cells[5]) == 800  # B and alpha of the fit, recovered
    # n_1/2 = 800 us x 0.5 GB/s / 0.75 = 533 kB: at 1 MiB busbw is only 66% of B, so B lies beyond the sweep
    assert cells[7:10] == ["521 KiB", "0%", "B"]
    assert (res / "busbw.png").stat().st_size > 10_000 and (res / "time_fit.png").stat().st_size > 10_000
    assert "![busbw vs size](results/busbw.png)" in text and "/tmp" not in text
    assert "- fixture topology" in (tmp_path / "TOPOLOGY.md").read_text()

    # A GPU run on matching hardware: published figures and the link fraction appear beside it.
    _sweep_csv(res / "sweep_h100_ws8.csv", "h100", "8x NVIDIA H100 80GB HBM3", 8, "nccl", alpha_us=20, bw=360)
    _sweep_csv(res / "sweep_h100_ws1.csv", "h100", "1x NVIDIA H100 80GB HBM3", 1, "nccl", alpha_us=8, bw=1000)
    nt = pd.DataFrame(parse_perf_output((FIXTURES / "all_reduce_perf.txt").read_text())[1])
    nt.assign(hardware="8x NVIDIA H100 80GB HBM3", world_size=8, nnodes=1, backend="nccl", preset="h100").to_csv(
        res / "nccl_tests_h100_ws8.csv", index=False)
    text = report.report(cfg)
    # its in-place busbw beside ours with its statistic (the fixture's loop time is 0.9 x the median of max)
    assert "| 8x NVIDIA H100 80GB HBM3 | 8 | fp32 | 1 MiB | 81.2 | 50 | 1.62 | 73.1 |" in text
    assert "no result is committed yet" not in text and "One rank moves bytes only within its own memory" in text
    assert "- GPU: 1x NVIDIA H100 80GB HBM3 (nccl; 1 rank;" in text and "- GPU: 8x NVIDIA H100" in text
    assert "Multi-GPU: no result yet" not in text  # the 8-GPU sweep is one
    # In place on one rank (all_reduce, broadcast) no data moves: left out; out-of-place shown as algbw.
    assert not any(ln.startswith(("| h100 1 rank, nccl, fp32 | broadcast |", "| h100 1 rank, nccl, fp32 | all_reduce |"))
                   for ln in text.splitlines())
    one = [ln for ln in text.splitlines() if ln.startswith("| h100 1 rank, nccl, fp32 | all_gather |")]
    assert len(one) == 1 and "| 1 MiB |" in one[0]  # a 1-rank run: its own algbw table, never beside a busbw
    assert text.index("## One rank: a local copy") < text.index(one[0]) and (res / "one_rank.png").exists()
    bcast = next(ln for ln in text.splitlines() if ln.startswith("| h100 8 ranks, nccl, fp32 | broadcast |"))
    peak = next(ln for ln in text.splitlines() if ln.startswith("| h100 8 ranks, nccl, fp32 | all_reduce |"))
    assert "% of 450 |" in peak
    assert "| 370 | NVLink4, ring (NVLS off) |" in text and "| 480 | NVLink4 SHARP" in text
    assert "| 360 | 20 | 2.86 | 6.87 MiB | 0% | N_1/2 AND B |" in bcast  # recovered, and flagged: 1 KiB-1 MiB


class FakeNVML:
    """Two GPUs on an NVSwitch (every link's far end is the switch's bus id) and a third on PCIe only."""

    NVMLError = type("NVMLError", (Exception,), {})
    NVML_P2P_CAPS_INDEX_NVLINK = (2,)  # a 1-tuple, like pynvml's stray-comma constants
    NVML_P2P_STATUS_OK, NVML_FEATURE_ENABLED, NVML_NVLINK_MAX_LINKS = 0, 1, 18
    SWITCH_BUS = "00000008:00:00.0"

    def nvmlDeviceGetCount(self):
        return 3

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        raise self.NVMLError("NOT_FOUND: a switch has a bus id but no device")

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{0x1b + h:02X}:00.0".encode())

    def _link(self, h, link):
        if h == 2 or link >= 18:
            raise self.NVMLError("NotSupported")

    def nvmlDeviceGetNvLinkState(self, h, link):
        self._link(h, link)
        return 1

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return 6  # nvmlNvlinkVersion_t code for NVLink 4.0

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        self._link(h, link)
        return SimpleNamespace(busId=self.SWITCH_BUS)

    def nvmlDeviceGetP2PStatus(self, a, b, idx):
        assert idx == 2
        return 0 if {a, b} == {0, 1} else 5

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 50  # SYS

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 1  # idle power saving

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetNumaNodeId(self, h):
        raise self.NVMLError("FunctionNotFound")

    def nvmlDeviceGetCpuAffinity(self, h, words):
        return [0b1111 << (4 * h)]


def test_topology_decides_nvlink_from_p2p_status_not_remote_bus_ids():
    gpus, matrix = topology.collect_gpus(FakeNVML())
    assert matrix == [["X", "NV18", "SYS"], ["NV18", "X", "SYS"], ["SYS", "SYS", "X"]]
    assert [g["nvlinks"] for g in gpus] == [18, 18, 0] and gpus[0]["switch_links"] == 18
    assert gpus[0]["nvlink_version"] == "4.0" and gpus[2]["nvlink_version"] is None
    assert gpus[1]["cpus"] == "4-7" and gpus[0]["numa"] is None and gpus[0]["pcie_gen"] == (1, 5)
    md = "\n".join(topology.gpu_section(gpus, matrix))
    assert "| 0 | NVIDIA H100 80GB HBM3 | 00000000:1B:00.0 | 1/5 | 16/16 | ? | 0-3 | 18 (all to NVSwitch) | 4.0 |" in md


def test_topology_of_this_cpu_machine_and_sysfs_infiniband(tmp_path):
    md = topology.topology_markdown()
    assert "loopback" in md and "NUMA nodes:" in md and socket.gethostname() not in md
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    for name, value in (("rate", "400 Gb/sec (4X NDR)"), ("state", "4: ACTIVE"), ("link_layer", "InfiniBand")):
        (port / name).write_text(value + "\n")
    assert topology.infiniband(tmp_path)[2] == "| mlx5_0 | 1 | 400 Gb/sec (4X NDR) | 4: ACTIVE | InfiniBand |"
    assert topology.infiniband(tmp_path / "absent") == [] and topology.cpu_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_nccl_tests_table_is_parsed_without_host_lines():
    version, rows = parse_perf_output((FIXTURES / "all_reduce_perf.txt").read_text())
    assert version == "2.19.6" and len(rows) == 6
    assert rows[2] == {"collective": "all_reduce", "size_bytes": 1048576, "count": 262144, "dtype": "fp32",
                       "placement": "out-of-place", "time_us": 20.0, "algbw_GBps": 52.43, "busbw_GBps": 52.43,
                       "wrong": 0}
    assert (rows[4]["wrong"], rows[5]["wrong"], rows[5]["placement"], rows[5]["busbw_GBps"]) == \
        (2, None, "in-place", 100.0)
    old = "  1024  256  float  sum  11.0  0.09  0.09  0e+00  11.1  0.09  0.09  0e+00"  # no root column, old #wrong
    assert parse_perf_output(old)[1][0]["time_us"] == 11.0
