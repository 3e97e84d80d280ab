"""Which low-precision backend runs: the registry of backend records and the one place a run's backend is chosen.

    te        NVIDIA TransformerEngine's te.Linear swap (backend_te.py, over te_adapter.py)
    te-fused  TransformerEngine's fused modules, as TE's users run it (backend_te.py)
    torchao   torchao.float8.convert_to_float8_training, tensorwise or rowwise (backend_torchao.py)
    native    the lab's Fp8Linear over torch._scaled_mm (backend_native.py, fp8_linear.py)
    emulated  Fp8Linear's emulated engine, or the block formats of mx.py: any hardware (backend_emulated.py)

Each is one record (backend.Backend): whether it can run here and why not, how it converts a model, its scale
state, whether it compiles, what its checkpoints hold. REGISTRY lists them under the names of
common/fp8_names.py, which the planner's cost records (planner/model/fp8_cost.py) share; the report reads names,
packages and display names from here. Adding a backend: one file and one entry below (README.md says how).

`auto` takes the first record, in registry order, whose auto_precisions hold the precision and that works here
(te, torchao, native, emulated for FP8; fp8-anchors.md section 8), and says why; te-fused is chosen by name
only (it changes the model's modules, not just its linears). A backend asked for by name that cannot run here
is a BackendUnavailable with one line that says how to get it; the runner prints it and exits 2.
"""

from __future__ import annotations

import torch

from common.fp8_names import NAMES
from precision.backend import Backend, BackendUnavailable, backend_version, named, unchanged  # noqa: F401 (re-exported)
from precision.backend_emulated import EMULATED
from precision.backend_native import NATIVE
from precision.backend_te import TE, TE_FUSED
from precision.backend_torchao import TORCHAO

REGISTRY: dict[str, Backend] = {b.name: b for b in (TE, TE_FUSED, TORCHAO, NATIVE, EMULATED)}
assert tuple(REGISTRY) == NAMES, "fp8-train's backends and common/fp8_names.py list the same names, in order"


def _torch_status(precision: str, device: torch.device) -> tuple[bool, str]:
    return True, "torch"


# fp32, bf16 and fp16 runs: no FP8 backend; torch itself, nothing converted (not in REGISTRY, not an FP8 choice).
TORCH = Backend("torch", "PyTorch's own fp32/bf16/fp16 arithmetic", package=None, library="", status=_torch_status,
                convert=lambda model, names, precision, s, round_out: unchanged(names), fp8_gemms=False)


def lookup(name: str) -> Backend | None:
    """The record of a name from a CSV or a config ("torch" included); None for a name no record has."""
    return TORCH if name == TORCH.name else REGISTRY.get(name)


def get(name: str) -> Backend:
    if name not in REGISTRY:
        raise ValueError(f"unknown backend {name!r}")
    return REGISTRY[name]


def status(name: str, precision: str, device: torch.device) -> tuple[bool, str]:
    """(can the backend of this name run this precision here, why / why not)."""
    return get(name).status(precision, device)


def libraries() -> list[tuple[str, str]]:
    """(package, display name) of each library behind a backend, in registry order, once each."""
    out: list[tuple[str, str]] = []
    for b in REGISTRY.values():
        if b.package is not None and (b.package, b.library) not in out:
            out.append((b.package, b.library))
    return out


def resolve(precision: str, requested: str, device: torch.device) -> tuple[Backend, str]:
    """(backend, reason) for a low-precision run; BackendUnavailable with how-to-get-it if impossible."""
    if requested != "auto":
        ok, why = status(requested, precision, device)
        if not ok:
            raise BackendUnavailable(f"--fp8-backend {requested} for {precision}: {why}")
        return get(requested), why
    tried = []
    for b in [b for b in REGISTRY.values() if precision in b.auto_precisions]:
        ok, why = b.status(precision, device)
        if ok:
            return b, f"auto -> {b.name}: {why}" + (f" (skipped {'; '.join(tried)})" if tried else "")
        tried.append(f"{b.name}: {why.split(';')[0]}")
    raise AssertionError("emulated is always available")
