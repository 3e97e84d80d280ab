"""One FP8 backend as a record: what fp8-train needs to know about it, decided in one place.

The run-time twin of the planner's `Fp8Backend` (planner/fp8_cost.py, what a backend costs): a backend is
chosen once (backends.resolve) and from then on travels as this record, so no module tests its name again.
A record holds
    - whether it can run a precision here, and why not (`status`: one line that says how to get it);
    - how it converts a model under a recipe (`convert`: the mapped linears swapped, the forward context);
    - whether it keeps scale state (`keeps_scale_state`) and how that state is read: the lab's own buffers
      (`last` on each low-precision module, fp8_state.py) or the library's (`library_state`: TE's fp8_meta);
    - whether it compiles (`compiles`; TE's modules run eagerly, `eager_note` says so in the run's notes);
    - what a checkpoint must hold (`checkpoint_pickles`: TE keeps its scaling state as pickled
      `_extra_state`, so its checkpoints load with weights_only=False).
The records live one library per file (backend_te.py, backend_torchao.py, backend_native.py,
backend_emulated.py) and are listed once, in backends.py, under the names of common/fp8_names.py.
"""

from __future__ import annotations

import importlib
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, ContextManager, NamedTuple

import torch
import torch.nn as nn

from common.fp8_names import fp8_name
from common.fp8_record import layer_tag
from precision.formats import E5M2
from precision.fp8_linear import LAYER_VERSION
from precision.modes import PrecisionSettings


class BackendUnavailable(RuntimeError):
    pass


class Converted(NamedTuple):
    context: Callable[[], ContextManager]  # entered around each forward (TE's autocast), else nullcontext
    low_modules: list[str]  # the run's low-precision modules (te-fused: its fused modules, not the linears)


class LibraryState(NamedTuple):
    """Scale state a library keeps in its own modules (not the lab's `last` buffers), and how it is read."""
    snapshot: Callable[[nn.Module], None]  # before each step: remember the scales it will cast with
    read: Callable[[nn.Module], list]  # after a step: per FP8 tensor (module, role, amax, scale used)
    scrub: Callable[[nn.Module], None]  # after a non-finite step: zero its non-finite history entries


Status = Callable[[str, torch.device], "tuple[bool, str]"]  # (precision, device) -> (can run here, why / why not)
Convert = Callable[[nn.Module, "list[str]", str, PrecisionSettings, "torch.dtype | None"], Converted]


def _no_state(precision: str, scaling: str) -> bool:
    return False


def _e5m2_gradients(s: PrecisionSettings) -> float:
    return E5M2.max


@dataclass(frozen=True)
class Backend:
    name: str  # common.fp8_names (the CSVs' precision_backend); "torch" for fp32/bf16/fp16
    description: str
    package: str | None  # the distribution that runs it (provenance, backend_version); None: torch itself
    library: str  # its display name in reports ("TransformerEngine"); "" for the lab's own layers and torch
    status: Status
    convert: Convert  # (model, mapped linear names, precision, settings, CPU rounding dtype) -> Converted
    auto_precisions: tuple[str, ...] = ()  # the precisions `--fp8-backend auto` tries it for (in registry order)
    keeps_scale_state: Callable[[str, str], bool] = _no_state  # (precision, --fp8-scaling) -> the lab reads state
    library_state: LibraryState | None = None  # None: any state is in the lab's buffers (`last`)
    probes: bool = True  # amax hooks can see what it casts (te-fused: made inside TE's kernels, no hook point)
    probe_grad_max: Callable[[PrecisionSettings], float] = _e5m2_gradients  # the format max its gradients cast to
    compiles: bool = True  # its modules run under torch.compile when --compile is on
    eager_note: str = ""  # the run's note when it does not
    checkpoint_pickles: bool = False  # its state_dict holds pickled extra state (weights_only=False to load)
    own_layer: bool = False  # the lab's own FP8 layer: counts underflow/saturation fractions
    dynamic_only: bool = False  # scales by each tensor's own amax whatever --fp8-scaling says
    fused_norm: bool = False  # the norm before a linear is inside its fused module (an input scaled there is renormalised)
    fp8_gemms: bool = True  # its GEMMs run in FP8 (False: the emulator's fp32 GEMMs)


def named(name: str, **fields) -> Backend:
    """A record under one of the common names, with that name's description and fp8_gemms."""
    entry = fp8_name(name)
    return Backend(name, entry.description, fp8_gemms=entry.fp8_gemms, **fields)


# ---- what the status checks share ------------------------------------------------------------

def importable(name: str):
    """(module, "") or (None, 'ErrorType: first line')."""
    try:
        return importlib.import_module(name), ""
    except Exception as e:  # noqa: BLE001 - TE raises ImportError, OSError, FileNotFoundError, AssertionError
        first = str(e).splitlines()[0][:120] if str(e) else ""
        return None, f"{type(e).__name__}: {first}"


def fp8_gpu(device: torch.device) -> tuple[bool, str]:
    if device.type != "cuda":
        return False, "no CUDA device"
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 9):
        name = torch.cuda.get_device_name(device)
        return False, f"{name} is sm_{cap[0]}{cap[1]}, FP8 needs sm_89+ (Ada/Hopper/Blackwell)"
    return True, f"sm_{cap[0]}{cap[1]}"


def fp8_only(name: str, precision: str) -> str | None:
    """Why a per-tensor-FP8-only backend cannot run `precision`, or None."""
    if precision != "fp8":
        return f"{precision} runs through --fp8-backend te (Blackwell) or emulated, not {name}"
    return None


def parent_of(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    """(the module holding `name`, the attribute it holds it under): where a swap puts the new module."""
    path, _, attr = name.rpartition(".")
    return (model.get_submodule(path) if path else model), attr


def swap(model: nn.Module, names: list[str], make: Callable[[nn.Module], nn.Module]) -> None:
    """Replace each named module by make(module)."""
    for n in names:
        parent, attr = parent_of(model, n)
        setattr(parent, attr, make(getattr(parent, attr)))


def unchanged(names: list[str]) -> Converted:
    return Converted(nullcontext, names)


# ---- provenance ------------------------------------------------------------------------------

def backend_version(backend: Backend, precision: str = "") -> str:
    """What ran the precision, with its version, for every result row: 'transformer_engine 2.20.2',
    'torchao 0.17.0', 'torch 2.13.0+cpu'; an fp8 run of the lab's own layer also names that layer's version
    ('torch 2.13.0+cpu, fp8_linear 2': rows an older layer wrote can be told apart, common/fp8_record.py).
    Read from the installed distribution's metadata (no import)."""
    if backend.package is None:
        own = backend.own_layer and precision == "fp8"
        return f"torch {torch.__version__}" + (f", {layer_tag(LAYER_VERSION)}" if own else "")
    from importlib import metadata
    try:
        return f"{backend.package} {metadata.version(backend.package)}"
    except metadata.PackageNotFoundError:
        module, _ = importable(backend.package)  # a source checkout on sys.path has no metadata
        return f"{backend.package} {getattr(module, '__version__', 'unknown') if module else 'not installed'}"
