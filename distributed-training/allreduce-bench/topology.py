"""TOPOLOGY.md: which links the collectives of this machine can use, read from NVML, sysfs and nvidia-smi.

    python topology.py                  # print this machine's section (bench.py writes it on rank 0)

GPUs (through common.hardware.nvml, i.e. nvidia-ml-py): model, PCI bus id, PCIe generation and
width (current and max: the current generation drops while a GPU idles), NUMA node and CPU
affinity, active NVLink links and their version, and a GPU x GPU matrix in nvidia-smi's codes.
Traps avoided (../shared/reference/allreduce-anchors.md section 4.2):
- a GPU pair is NVLink-connected when nvmlDeviceGetP2PStatus(.., NVML_P2P_CAPS_INDEX_NVLINK) is OK,
  never by matching a link's remote PCI bus id: on NVSwitch systems (HGX/DGX) that id is the switch's;
- nvmlDeviceGetNvLinkVersion returns an nvmlNvlinkVersion_t code (6 = NVLink 4.0), not a generation;
- pynvml's NVML_P2P_CAPS_INDEX_READ is a 1-tuple (a stray comma), so constants are unwrapped.
Also: `nvidia-smi topo -m` verbatim when the tool is there, InfiniBand ports from
/sys/class/infiniband, and on any machine the CPU model, cores and NUMA nodes. No host names.
Multi-node runs document node 0 (where rank 0 runs).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from common.dist import DistInfo
from common.hardware import NVMLUnavailable, cpu_count, cpu_model, nvml

NVLINK_VERSION = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0"}  # nvmlNvlinkVersion_t
PCIE_LEVEL = {0: "INT", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}  # nvmlGpuTopologyLevel_t
NVLINK_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH


def _const(nv, name: str, default: int) -> int:
    value = getattr(nv, name, default)
    return value[0] if isinstance(value, tuple) else value


def _try(nv, fn: str, *args) -> Any:
    """One NVML query, or None where the driver, GPU or permissions do not support it."""
    try:
        out = getattr(nv, fn)(*args)
    except (nv.NVMLError, AttributeError):
        return None
    return out.decode() if isinstance(out, bytes) else out


def cpu_ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(out)


def collect_gpus(nv) -> tuple[list[dict], list[list[str]]]:
    """Per-GPU facts and the GPU x GPU link matrix, from an initialised pynvml (or a stand-in)."""
    n = nv.nvmlDeviceGetCount()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    words = -(-(os.cpu_count() or 1) // 64)
    max_links = _const(nv, "NVML_NVLINK_MAX_LINKS", 18)
    gpus = []
    for i, h in enumerate(handles):
        pci = _try(nv, "nvmlDeviceGetPciInfo", h)
        active, versions, to_switch = 0, set(), 0
        for link in range(max_links):
            state = _try(nv, "nvmlDeviceGetNvLinkState", h, link)
            if state is None:
                break  # past the GPU's last link (NotSupported / InvalidArgument)
            if state != _const(nv, "NVML_FEATURE_ENABLED", 1):
                continue
            active += 1
            versions.add(NVLINK_VERSION.get(_try(nv, "nvmlDeviceGetNvLinkVersion", h, link), "?"))
            to_switch += _try(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", h, link) == NVLINK_SWITCH
        mask = _try(nv, "nvmlDeviceGetCpuAffinity", h, words) or []
        cpus = [w * 64 + b for w, bits in enumerate(mask) for b in range(64) if (int(bits) >> b) & 1]
        bus = getattr(pci, "busId", None)
        gpus.append({
            "index": i, "name": _try(nv, "nvmlDeviceGetName", h),
            "bus_id": bus.decode() if isinstance(bus, bytes) else bus,
            "pcie_gen": (_try(nv, "nvmlDeviceGetCurrPcieLinkGeneration", h),
                         _try(nv, "nvmlDeviceGetMaxPcieLinkGeneration", h)),
            "pcie_width": (_try(nv, "nvmlDeviceGetCurrPcieLinkWidth", h), _try(nv, "nvmlDeviceGetMaxPcieLinkWidth", h)),
            "numa": _try(nv, "nvmlDeviceGetNumaNodeId", h), "cpus": cpu_ranges(cpus) if cpus else None,
            "nvlinks": active, "nvlink_version": "/".join(sorted(versions)) or None, "switch_links": to_switch,
        })
    ok, idx = _const(nv, "NVML_P2P_STATUS_OK", 0), _const(nv, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    matrix = [["X" if i == j else "" for j in range(n)] for i in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if _try(nv, "nvmlDeviceGetP2PStatus", handles[i], handles[j], idx) == ok:
                direct = _direct_links(nv, handles[i], gpus[j]["bus_id"], max_links)
                matrix[i][j] = f"NV{direct or gpus[i]['nvlinks']}"
            else:
                level = _try(nv, "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
                matrix[i][j] = PCIE_LEVEL.get(level, "?")
    return gpus, matrix


def _direct_links(nv, h, peer_bus: str | None, max_links: int) -> int:
    """Links whose far end is the peer GPU itself (0 on NVSwitch systems: every link ends at a switch)."""
    count = 0
    for link in range(max_links):
        remote = _try(nv, "nvmlDeviceGetNvLinkRemotePciInfo", h, link)
        if remote is None:
            continue  # an inactive or absent link
        bus = getattr(remote, "busId", None)
        bus = bus.decode() if isinstance(bus, bytes) else bus
        count += bool(peer_bus) and bus == peer_bus and \
            _try(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", h, link) != NVLINK_SWITCH
    return count


def gpu_section(gpus: list[dict], matrix: list[list[str]]) -> list[str]:
    def pair(v: tuple) -> str:
        return "/".join("?" if x is None else str(x) for x in v)

    lines = ["| GPU | model | PCI bus | PCIe gen (cur/max) | width (cur/max) | NUMA | CPU affinity | NVLink links "
             "| NVLink version |", "|---|---|---|---|---|---|---|---|---|"]
    for g in gpus:
        via_switch = g["nvlinks"] and g["switch_links"] == g["nvlinks"]
        links = f"{g['nvlinks']}" + (" (all to NVSwitch)" if via_switch else "")
        lines.append(f"| {g['index']} | {g['name']} | {g['bus_id']} | {pair(g['pcie_gen'])} | {pair(g['pcie_width'])} "
                     f"| {g['numa'] if g['numa'] is not None else '?'} | {g['cpus'] or '?'} | {links} "
                     f"| {g['nvlink_version'] or '-'} |")
    lines += ["", "Links between GPUs (nvidia-smi's codes: NV# = # bonded NVLinks, via NVSwitch when every link "
              "ends at a switch; PIX/PXB/PHB/NODE/SYS = PCIe paths from best to worst). NVLink is decided from "
              "NVML's P2P NVLink status, not from the links' remote bus ids.", "",
              "| | " + " | ".join(f"GPU{j}" for j in range(len(gpus))) + " |",
              "|---" * (len(gpus) + 1) + "|"]
    lines += [f"| GPU{i} | " + " | ".join(row) + " |" for i, row in enumerate(matrix)]
    lines.append("\nThe current PCIe generation drops while a GPU idles (power saving): compare the max column.")
    return lines


def infiniband(root: Path = Path("/sys/class/infiniband")) -> list[str]:
    """One line per InfiniBand/RoCE port: device, port, rate, state, link layer (from sysfs)."""
    lines = []
    for dev in sorted(root.glob("*")) if root.is_dir() else []:
        for port in sorted((dev / "ports").glob("*")):
            def read(name: str) -> str:
                try:
                    return (port / name).read_text().strip()
                except OSError:
                    return "?"
            lines.append(f"| {dev.name} | {port.name} | {read('rate')} | {read('state')} | {read('link_layer')} |")
    return (["| device | port | rate | state | link layer |", "|---|---|---|---|---|"] + lines) if lines else []


def numa_nodes(root: Path = Path("/sys/devices/system/node")) -> list[str]:
    out = []
    for node in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        try:
            out.append(f"{node.name}: CPUs {(node / 'cpulist').read_text().strip()}")
        except OSError:
            pass
    return out


def topology_markdown(env: DistInfo | None = None) -> str:
    import torch

    nnodes, backend = (env.nnodes, env.backend) if env else (1, "gloo")
    mem = ""
    try:
        kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
        mem = f", {kib / 2**20:.0f} GiB memory"
    except (OSError, StopIteration, ValueError):
        pass
    numa = numa_nodes()
    lines = [f"## {cpu_model()} ({cpu_count()} cores usable){' - node 0 of ' + str(nnodes) if nnodes > 1 else ''}",
             "", f"- CPU: {cpu_model()}, {cpu_count()} cores usable by this process of {os.cpu_count()} online"
             f"{mem}; {platform.system()} {platform.machine()}",
             f"- NUMA nodes: {len(numa) or 'unknown'}" + (f" ({'; '.join(numa)})" if numa else ""),
             f"- torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}"]
    if backend == "gloo":
        lines.append("- Ranks talk through gloo over TCP: on the loopback interface (127.0.0.1) inside one machine, "
                     "through the kernel's socket stack, so bandwidth is memory copies and the CPU, not a link."
                     if nnodes == 1 else "- Ranks talk through gloo over TCP on the network between nodes.")
    lines.append("")
    try:
        with nvml() as nv:
            lines += ["### GPUs (NVML, driver " + str(_try(nv, "nvmlSystemGetDriverVersion")) + ")", ""]
            lines += gpu_section(*collect_gpus(nv))
    except NVMLUnavailable as e:
        lines.append(f"### GPUs\n\nNone found: {e}.")
    if shutil.which("nvidia-smi"):
        try:
            topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            topo = f"(nvidia-smi topo -m failed: {e})"
        lines += ["", "### nvidia-smi topo -m", "", "```", without_colours(topo).rstrip(), "```"]
    ib = infiniband()
    lines += ["", "### InfiniBand / RoCE", ""] + (ib or ["No /sys/class/infiniband devices on this machine."])
    return "\n".join(lines) + "\n"


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def without_colours(text: str) -> str:
    """nvidia-smi underlines its header with terminal escape codes; a markdown file shows them as junk."""
    return ANSI.sub("", text)


def write_topology(path: Path, env: DistInfo | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(topology_markdown(env))
    tmp.replace(path)
    return path


if __name__ == "__main__":
    print(topology_markdown(), end="")
