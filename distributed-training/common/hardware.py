"""The hardware table: one row per GPU preset, and the NVML access that degrades without a GPU.

Peak figures are dense (no 2:4 sparsity) vendor numbers, per GPU, as collected in
../shared/reference/parallelism-formulas.md section 6 (Scaling Book gpus.md tables;
glennklockwood.com H100/B200 pages; the Megatron SC21 paper for A100). NVLink bandwidth is
*per direction* (the vendors' headline figures are bidirectional: H100 "900 GB/s" is 450 each
way), because that is what the alpha-beta collective formulas and nccl-tests' busbw compare with.

Memory is what a GPU of the named system exposes, not the HBM stacks' raw capacity: a B200 carries
192 GB of HBM3e, but HGX/DGX B200 systems ship 180 GB per GPU (NVIDIA DGX B200 User Guide,
docs.nvidia.com/dgx/dgxb200-user-guide: "8 x NVIDIA B200 GPUs that provide 1,440 GB total GPU memory")
and GB200 NVL72 about 186 GB (NVIDIA's GB200 NVL72 page, nvidia.com/en-us/data-center/gb200-nvl72:
13.4 TB of HBM3e for 72 GPUs; ../shared/reference/parallelism-formulas.md section 6).

A figure we do not know is None, and everything downstream prints "unknown" for it rather than
guessing (the CPU row, FP8 on A100, FP4 before Blackwell).

SM counts are NVIDIA's data-sheet figures (A100 whitepaper: 108 SMs; H100 SXM5 and H200 SXM: 132; B200: 148
per package of two dies); the planner's GEMM model spreads output tiles over them in waves (planner/model/compute.py).

The achievable matmul rates (MAMF, "maximum achievable matmul FLOPS") are measured, not vendor
figures: the best mean TFLOP/s that ml-engineering's mamf-finder.py found over a search of GEMM
shapes (stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS
comparison table"; its "A100 SXM" row names no memory size, and it states H200 = H100 for BF16).
Cost models (the planner) use them as the large-GEMM ceiling instead of a guessed fraction of peak.

`GPU=auto` picks the row whose name matches torch.cuda.get_device_name(0); an unrecognised GPU
gets a row of unknowns instead of a borrowed guess.
"""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, TypeVar

import torch

from .config import env_seconds


@dataclass(frozen=True)
class GPUPreset:
    name: str  # the GPU= value
    label: str  # what reports print
    bf16_tflops: float | None  # dense peak
    fp8_tflops: float | None  # dense peak; None = no FP8 tensor cores
    fp4_tflops: float | None
    memory_gb: float | None  # HBM capacity, GB = 1e9 bytes as vendors quote it
    hbm_tbps: float | None
    nvlink_gbps: float | None  # per direction, per GPU; None = no NVLink (PCIe only)
    nvlink_domain: int  # GPUs that share one NVLink/NVSwitch fabric
    net_gbits: float | None  # scale-out per GPU in the DGX/HGX reference design, Gbit/s
    device_names: tuple[str, ...] = ()  # substrings of torch.cuda.get_device_name() that select this row
    bf16_mamf_tflops: float | None = None  # measured achievable dense BF16 matmul TFLOP/s (see module docstring)
    fp8_mamf_tflops: float | None = None  # the same for FP8 (e4m3) matmuls
    sm_count: int | None = None  # streaming multiprocessors: how many GEMM tiles run at once (one wave)

    @property
    def supports_fp8(self) -> bool:
        return self.fp8_tflops is not None

    @property
    def supports_fp4(self) -> bool:
        return self.fp4_tflops is not None

    @property
    def tag(self) -> str:
        """The preset in result file names: cpu, h100, ... or a slug of an unrecognised GPU's name."""
        return slug(self.name)

    def run_tag(self, world_size: int, nnodes: int = 1) -> str:
        """A result set's identity in file and folder names: <preset>_ws<N>[_n<nodes>] (sweep_h100_ws8.csv,
        fp8-train/results/h100_ws16_n2/). Hardware, world size and node count: one never replaces another."""
        return f"{self.tag}_ws{world_size}" + (f"_n{nnodes}" if nnodes > 1 else "")

    def peak_tflops(self, precision: str) -> float | None:
        """Peak dense TFLOP/s used for MFU; bf16 and fp16 share the tensor-core rate."""
        return {"bf16": self.bf16_tflops, "fp16": self.bf16_tflops, "fp8": self.fp8_tflops,
                "fp4": self.fp4_tflops}.get(precision)

    def achievable_matmul_tflops(self, precision: str) -> float | None:
        """Measured large-GEMM TFLOP/s (MAMF) for bf16/fp16/fp8; None where nobody measured it."""
        return {"bf16": self.bf16_mamf_tflops, "fp16": self.bf16_mamf_tflops,
                "fp8": self.fp8_mamf_tflops}.get(precision)


PRESETS: dict[str, GPUPreset] = {p.name: p for p in (
    GPUPreset("cpu", "CPU (gloo)", None, None, None, None, None, None, 1, None),
    GPUPreset("a100-40gb", "A100 SXM4 40GB", 312.0, None, None, 40.0, 1.555, 300.0, 8, 200.0,
              ("A100-SXM4-40GB",), bf16_mamf_tflops=271.2, sm_count=108),
    GPUPreset("a100", "A100 SXM4 80GB", 312.0, None, None, 80.0, 2.0, 300.0, 8, 200.0,
              ("A100-SXM4-80GB", "A100-SXM-80GB"), bf16_mamf_tflops=271.2, sm_count=108),
    GPUPreset("h100", "H100 SXM 80GB", 989.4, 1978.9, None, 80.0, 3.35, 450.0, 8, 400.0,
              ("H100 80GB HBM3", "H100 SXM"), bf16_mamf_tflops=794.5, fp8_mamf_tflops=1402.6, sm_count=132),
    # Meta's Grand Teton H100 (torchtitan's benchmark hosts): 96 GB HBM2e at 2.4 TB/s, run at a 500 W power
    # limit (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md). Same silicon as the SXM part;
    # its sustained matmul rate scales with the clock the power limit allows: dynamic power ~ f·V² with V ~ f
    # over the DVFS range, so f ~ P^(1/3) and the MAMF is the SXM one x (500/700)^(1/3) = 0.894 (an estimate).
    GPUPreset("h100-gt", "H100 96GB HBM2e at 500 W (Grand Teton)", 989.4, 1978.9, None, 96.0, 2.4, 450.0, 8, 400.0,
              (), bf16_mamf_tflops=round(794.5 * (500 / 700) ** (1 / 3), 1),
              fp8_mamf_tflops=round(1402.6 * (500 / 700) ** (1 / 3), 1), sm_count=132),
    GPUPreset("h200", "H200 SXM 141GB", 989.4, 1978.9, None, 141.0, 4.8, 450.0, 8, 400.0,
              ("H200",), bf16_mamf_tflops=794.5, fp8_mamf_tflops=1453.4, sm_count=132),
    GPUPreset("b200", "B200 (HGX, 1000 W)", 2250.0, 4500.0, 9000.0, 180.0, 8.0, 900.0, 8, 400.0,
              ("B200",), bf16_mamf_tflops=1745.0, fp8_mamf_tflops=3432.5, sm_count=148),
    GPUPreset("gb200", "GB200 NVL72 (B200 at 1200 W)", 2500.0, 5000.0, 10000.0, 186.0, 8.0, 900.0, 72, 400.0,
              ("GB200",), bf16_mamf_tflops=1822.0, fp8_mamf_tflops=3615.6, sm_count=148),
)}
ALIASES = {"a100-80gb": "a100"}
CHOICES = ("auto", *PRESETS, *ALIASES)

# Variants that share a marketing name with a preset but not its clocks, power or links: never
# auto-matched to the SXM row (an H100 PCIe peaks near 756 TFLOP/s, not 989).
_NOT_SXM = ("PCIE", "NVL", "H100 SXM5 64GB")


class RunTag(NamedTuple):
    """A parsed <preset>_ws<N>[_n<nodes>] (GPUPreset.run_tag), e.g. from a result file's stem."""

    preset: str
    world_size: int
    nnodes: int

    def describe(self) -> str:
        """'h100, 8 ranks' or 'cpu, 4 ranks on 2 nodes': how reports name a result set."""
        return (f"{self.preset}, {self.world_size} rank{'s' if self.world_size != 1 else ''}"
                + (f" on {self.nnodes} nodes" if self.nnodes > 1 else ""))


_RUN_TAG = re.compile(r"(?:^|_)(?P<preset>[a-z0-9-]+)_ws(?P<ws>[0-9]+)(?:_n(?P<n>[0-9]+))?(?=$|-)")


def parse_run_tag(text: str) -> RunTag | None:
    """The run tag at the end of `text` (a file stem such as scaling_h100_ws8 or a folder name such as
    h100_ws16_n2-te), or None if it carries none."""
    found = list(re.finditer(_RUN_TAG, text))
    if not found:
        return None
    m = found[-1]
    return RunTag(m["preset"], int(m["ws"]), int(m["n"] or 1))


def slug(text: str) -> str:
    """Lower-case letters and digits joined by '-': a hardware name as it may appear in a file name."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def get_preset(name: str) -> GPUPreset:
    """A preset by GPU= name, or ValueError listing the valid names (callers turn it into exit 2). GPU=auto on
    a machine whose GPUs torch cannot use (a torch build the driver does not run) is a ValueError too: it
    would otherwise quietly become the CPU preset on a GPU node."""
    key = ALIASES.get(name.lower(), name.lower())
    if key == "auto":
        problem = _unusable_gpus()
        if problem:
            raise ValueError(f"GPU=auto: {problem}; or GPU=cpu for the CPU preset")
        return detect_preset()
    if key not in PRESETS:
        raise ValueError(f"unknown GPU preset {name!r}; valid: {', '.join(CHOICES)}")
    return PRESETS[key]


def device_kind(preset: GPUPreset) -> str:
    """'cpu' for the CPU preset, 'cuda' for any other; ValueError (exit 2 upstream) for a GPU preset on a
    machine where torch sees no CUDA device. The one place every runner checks this."""
    if preset.name == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        problem = _unusable_gpus()
        if problem:  # GPUs are there and torch cannot use them: "use --gpu cpu" would be the wrong advice
            raise ValueError(f"--gpu {preset.name} needs a CUDA GPU and torch sees none: {problem}")
        raise ValueError(f"--gpu {preset.name} needs a CUDA GPU and torch sees none; use --gpu cpu (CPU + gloo)")
    return "cuda"


def _unusable_gpus() -> str | None:
    """One line when nvidia-smi lists GPUs that this torch cannot use, or when nvidia-smi hangs or fails
    (common/cuda_env.py), else None."""
    if torch.cuda.is_available():
        return None
    from .cuda_env import DriverFault, mismatch, probe_driver
    driver = probe_driver()
    if isinstance(driver, DriverFault):
        return f"the NVIDIA driver does not answer: {driver.problem}"
    return mismatch(torch.__version__, torch.version.cuda, False, driver)


def detect_preset() -> GPUPreset:
    """The preset for this machine's GPU 0; the CPU row without CUDA; unknowns for other GPUs."""
    if not torch.cuda.is_available():
        return PRESETS["cpu"]
    device_name = torch.cuda.get_device_name(0)
    found = preset_for(device_name)
    if found is not None:
        return found
    return GPUPreset(f"unknown:{device_name}", device_name, None, None, None, None, None, None, 1, None)


def preset_for(device_name: str) -> GPUPreset | None:
    """The GPU preset a device name selects ("NVIDIA H100 80GB HBM3", or a results row's hardware column
    "1x NVIDIA H100 80GB HBM3"); None for a CPU, a non-SXM variant or a GPU the table does not know."""
    upper = device_name.upper()
    if any(tag in upper for tag in _NOT_SXM):
        return None
    for preset in PRESETS.values():
        if any(tag.upper() in upper for tag in preset.device_names):
            if preset.name == "h200" and "GH200" in upper:
                continue
            return preset
    return None


def fmt(value: float | None, spec: str = ".1f", unit: str = "") -> str:
    """Format a table figure, printing 'unknown' instead of a guess."""
    return "unknown" if value is None else f"{value:{spec}}{unit}"


class NVMLUnavailable(RuntimeError):
    pass


T = TypeVar("T")


def nvml_timeout_s() -> float:
    """How long an NVML query may take (DT_NVML_TIMEOUT_S, default 15 s): a hung GPU makes the driver hang."""
    return env_seconds("DT_NVML_TIMEOUT_S", 15.0)


def bounded(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """fn() in a daemon thread: its value or its exception, or NVMLUnavailable naming `what` as hanging after
    `timeout_s` (the thread is left behind, blocked in the driver; it does not keep the process alive)."""
    out: dict[str, object] = {}

    def call() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            out["error"] = e

    t = threading.Thread(target=call, name=f"probe {what}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise NVMLUnavailable(f"{what} did not answer within {timeout_s:g} s: the NVIDIA driver or a GPU hangs (a GPU "
                              "in a bad state does this; ask for the GPU to be reset or the node rebooted)")
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]  # type: ignore[return-value]


@contextmanager
def nvml() -> Iterator[object]:
    """Yield an initialised pynvml module, or raise NVMLUnavailable with a one-line reason.

    nvidia-ml-py imports everywhere (pure Python) but nvmlInit() raises NVMLError_LibraryNotFound
    on a machine with no NVIDIA driver; that becomes "no NVML on this machine". nvmlInit() that does
    not return within nvml_timeout_s() is a hanging driver, said so (callers bound their own queries).
    """
    try:
        import pynvml
    except ImportError as e:
        raise NVMLUnavailable(f"nvidia-ml-py is not installed ({e})") from None
    try:
        bounded(pynvml.nvmlInit, nvml_timeout_s(), "NVML (nvmlInit)")
    except pynvml.NVMLError as e:
        raise NVMLUnavailable(f"no NVML on this machine ({e})") from None
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def describe_hardware() -> str:
    """One line naming the hardware, with no host name: '1x NVIDIA H100 80GB HBM3' or the CPU model."""
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        uniq = sorted(set(names))
        return "; ".join(f"{names.count(n)}x {n}" for n in uniq)
    return f"{cpu_model()} ({cpu_count()} cores)"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_count() -> int:
    import os
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
