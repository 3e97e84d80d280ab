"""`make doctor`: what this machine has, for the labs.

    make doctor                       # or: PYTHONPATH=distributed-training python -m provision.doctor
    make doctor GPU=h100              # also show the figures a named preset would use

Prints Python, torch and the CUDA version it was built for beside the NVIDIA driver and the newest
CUDA that driver runs (nvidia-smi), NCCL, the GPUs and their NVLink/P2P links (through NVML), which
FP8 backends can be imported (TransformerEngine, torchao, torch._scaled_mm) and which GPU preset
GPU=auto picks. A missing GPU or library is not a failure (it says what is missing and how to get
it). Three things are: an nvidia-smi that hangs (beyond DT_SMI_TIMEOUT_S), fails or prints no driver
(named so, exit 1: a GPU in a bad state, not a machine without GPUs); GPUs that nvidia-smi lists and this
torch cannot use (one line naming both and the command that installs the build that fits, exit 1;
common/cuda_env.py); and a GPU preset named (GPU=h100, ...) on a machine without a CUDA GPU (one line,
exit 2).
"""

from __future__ import annotations

import importlib
import platform
import sys
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from common.config import parse_config
from common.cuda_env import DriverFault, build_text, describe, mismatch, probe_driver
from common.hardware import (CHOICES, NVMLUnavailable, bounded, cpu_count, cpu_model, detect_preset, fmt, get_preset,
                             nvml, nvml_timeout_s)


@dataclass(frozen=True)
class DoctorConfig:
    gpu: str = field(default="auto", metadata={"help": f"preset to describe: {', '.join(CHOICES)}"})

    def __post_init__(self):
        if self.gpu.lower() != "auto":  # auto is what the doctor examines, never refused here
            get_preset(self.gpu)  # an unknown name is a ValueError listing the valid ones -> exit 2


def _try_import(name: str) -> str:
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - TE raises OSError/FileNotFoundError for a missing .so
        return f"not importable ({type(e).__name__}: {str(e).splitlines()[0][:90] if str(e) else ''})"
    top = sys.modules.get(name.split(".")[0])  # transformer_engine.pytorch has no __version__ of its own
    return f"importable, version {getattr(mod, '__version__', None) or getattr(top, '__version__', '?')}"


def _te_fp8() -> str:
    """What TransformerEngine itself says about FP8 here (te.is_fp8_available), when it imports."""
    try:
        te = importlib.import_module("transformer_engine.pytorch")
    except Exception:  # noqa: BLE001 - reported by the import line already
        return ""
    try:
        ok, reason = te.is_fp8_available(return_reason=True)
    except TypeError:
        ok, reason = te.is_fp8_available(), ""
    except Exception as e:  # noqa: BLE001 - no GPU, no driver
        return f"; is_fp8_available: {type(e).__name__}"
    return f"; is_fp8_available: {bool(ok)}" + (f" ({reason})" if reason else "")


def _links(pynvml, n: int) -> list[str]:
    out = []
    for i in range(n):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        active = 0
        for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                active += pynvml.nvmlDeviceGetNvLinkState(h, link) == pynvml.NVML_FEATURE_ENABLED
            except pynvml.NVMLError:
                break
        peers = []
        for j in range(n):
            if j == i:
                continue
            # Decide NVLink connectivity from the P2P NVLink status, not the remote PCI bus id
            # (on NVSwitch systems that id is the switch, not the peer GPU).
            try:
                st = pynvml.nvmlDeviceGetP2PStatus(h, pynvml.nvmlDeviceGetHandleByIndex(j),
                                                   pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
                if st == pynvml.NVML_P2P_STATUS_OK:
                    peers.append(str(j))
            except pynvml.NVMLError:
                pass
        out.append(f"GPU{i}: {active} NVLink links active; NVLink peers: {','.join(peers) or 'none'}")
    return out


def _nvml_lines() -> list[str]:
    with nvml() as pynvml:
        return [f"nvml        driver {pynvml.nvmlSystemGetDriverVersion()}"] + \
            ["            " + s for s in _links(pynvml, pynvml.nvmlDeviceGetCount())]


def report(gpu: str = "auto", driver=None) -> list[str]:
    lines = [f"python      {platform.python_version()} ({sys.executable})",
             f"torch       {torch.__version__}, {build_text(torch.version.cuda)}",
             f"driver      {describe(driver)}",
             f"cpu         {cpu_model()}, {cpu_count()} cores usable",
             f"backends    gloo={'yes' if dist.is_gloo_available() else 'no'}  "
             f"nccl={'yes' if dist.is_nccl_available() else 'no'}"]
    if isinstance(driver, DriverFault):  # CUDA and NVML would wait on the same driver: not asked
        return lines + ["cuda        not asked: the driver does not answer (see the error below)"]
    if torch.cuda.is_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if dist.is_nccl_available() else "n/a"
        lines.append(f"cuda        {torch.version.cuda}  cudnn {torch.backends.cudnn.version()}  nccl {nccl}")
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            lines.append(f"gpu {i}       {p.name}, {p.total_memory / 2**30:.1f} GiB, sm_{p.major}{p.minor}, "
                         f"{p.multi_processor_count} SMs")
    elif driver is None or not driver.gpus:
        lines.append("cuda        not available (CPU presets and gloo will be used)")
    else:
        lines.append("cuda        not available to this torch (see the problem below)")
    try:
        lines += bounded(_nvml_lines, 2 * nvml_timeout_s(), "NVML (driver version, NVLink links)")
    except NVMLUnavailable as e:
        lines.append(f"nvml        {e}")
    fp8_hw = torch.cuda.is_available() and torch.cuda.get_device_capability(0) >= (8, 9)
    if torch.cuda.is_available():
        # torch's own cuDNN loaded first, so that TE's search finds it by its soname: on the lent H200 image,
        # whose /lib holds a system cuDNN of another build, doctor's TE import failed on a missing symbol
        # ("libcudnn_heuristic.so.9: undefined symbol") while the same TE ran in training (not re-checked on
        # a GPU since).
        torch.backends.cudnn.version()
    lines += [
        f"fp8 hw      {'yes (sm_89+)' if fp8_hw else 'no FP8 tensor cores here (native/emulated FP8 still run)'}",
        f"fp8 te      transformer_engine.pytorch: {_try_import('transformer_engine.pytorch')}{_te_fp8()}",
        f"fp8 torchao torchao.float8: {_try_import('torchao.float8')}",
        f"fp8 torch   torch._scaled_mm: {'present' if hasattr(torch, '_scaled_mm') else 'missing'}",
    ]
    preset = detect_preset() if gpu.lower() == "auto" else get_preset(gpu)
    lines.append(f"preset      GPU={gpu} -> {preset.name} ({preset.label}; peak bf16 "
                 f"{fmt(preset.bf16_tflops, '.0f', ' TFLOP/s')}, fp8 {fmt(preset.fp8_tflops, '.0f', ' TFLOP/s')})")
    return lines


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(DoctorConfig, argv, description=__doc__.split("\n\n")[0], prog="doctor")
    driver = probe_driver()
    for line in report(cfg.gpu, driver):
        print(line)
    print("hint        TransformerEngine and torchao are optional: `make setup-fp8` installs both "
          "(TE= for torchao alone)")
    if isinstance(driver, DriverFault):  # a hanging or failing driver is not "no GPU"
        print(f"doctor: error: the NVIDIA driver does not answer: {driver.problem}", file=sys.stderr)
        return 1
    problem = mismatch(torch.__version__, torch.version.cuda, torch.cuda.is_available(), driver)
    if problem:
        print(f"doctor: error: {problem}", file=sys.stderr)
        return 1
    if cfg.gpu.lower() != "auto" and get_preset(cfg.gpu).name != "cpu" and not torch.cuda.is_available():
        # Asked to validate a GPU preset on a machine without one: say it plainly, and fail.
        print(f"doctor: error: GPU={cfg.gpu} is a GPU preset and torch sees no CUDA GPU here: every GPU target "
              "will refuse to run; use GPU=cpu (or auto) on this machine", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
