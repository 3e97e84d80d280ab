"""Every FP8 tensor's state after a step, whichever backend ran it: what fp8.csv and the scale alerts read.

    native, emulated           Fp8Linear's shared scaling state: per layer and role the amax and the scale
                               used, and the underflow/saturation fractions when counted (fp8_linear.py)
    torchao, TE current,       amax_probe.AmaxProbe's `last` buffers: amax and fmt_max / amax, taken on
    block formats              the recording steps (--stats-every)
    te, te-fused (delayed)     TransformerEngine's own fp8_meta, per GEMM (the record's library_state:
                               te_adapter.delayed_state)

Values stay on the device until `rows` turns them into CSV rows with one host transfer.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from precision.fp8_linear import Fp8Linear
from precision.prepare import Prepared

ROLES = ("input", "weight", "grad_output")


class Fp8Tensor(NamedTuple):
    """One FP8 tensor's state after a step."""
    module: str
    role: str  # input | weight | grad_output
    format: str
    values: torch.Tensor  # (2,): amax, scale used
    scale_kind: str  # delayed | current | derived
    fractions: torch.Tensor | None  # (2,): underflow, saturation, when counted


def find(prep: Prepared, precision: str) -> list[Fp8Tensor]:
    """The FP8 tensors of a prepared run: its low-precision modules' buffers, or TE's own state."""
    out = []
    fmts = ("e4m3", "e4m3", "e5m2") if precision == "fp8" else (precision,) * 3
    for name in prep.low_modules:
        m = prep.raw.get_submodule(name)
        last = getattr(m, "last", None)
        if last is None:
            continue
        kind = getattr(m, "scale_kind", "delayed" if isinstance(m, Fp8Linear) and not m.current else "current")
        frac = m.fractions if isinstance(m, Fp8Linear) else None
        for r, role in enumerate(ROLES):
            out.append(Fp8Tensor(name, role, fmts[r], last[r], kind, None if frac is None else frac[r]))
    if prep.backend.library_state is not None and not out:
        for t in prep.backend.library_state.read(prep.raw):
            fmt = "e5m2" if t.role == "grad_output" else "e4m3"
            out.append(Fp8Tensor(t.module, t.role, fmt, torch.stack([t.amax.float(), t.scale.float()]), "delayed",
                                 None))
    return out


def rows(state: list[Fp8Tensor], step: int, with_fractions: bool) -> list[dict[str, Any]]:
    """fp8.csv rows for one step (fractions only when they were counted this step)."""
    if not state:
        return []
    nan2 = torch.full((2,), float("nan"), device=state[0].values.device)
    vals = torch.stack([torch.cat([t.values.float(), t.fractions if t.fractions is not None and with_fractions
                                   else nan2]) for t in state]).tolist()  # the one host transfer
    return [dict(step=step, module=t.module, role=t.role, format=t.format, amax=v[0], scale=v[1],
                 scale_kind=t.scale_kind, underflow_frac=None if math.isnan(v[2]) else v[2],
                 saturation_frac=None if math.isnan(v[3]) else v[3])
            for t, v in zip(state, vals)]
