"""Backend `native`: the lab's Fp8Linear over torch._scaled_mm (fp8_linear.py), per-tensor delayed or current
scaling, its amax history shared by every layer (one update per step). Its scale state is the lab's own
buffers, and it counts underflow/saturation fractions.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from precision.backend import Converted, fp8_gpu, fp8_only, named, swap, unchanged
from precision.fp8_linear import Fp8Linear, share_scaling_state


def _status(precision: str, device: torch.device) -> tuple[bool, str]:
    wrong = fp8_only("native", precision)
    if wrong:
        return False, wrong
    if device.type == "cuda":
        ok, why = fp8_gpu(device)
        if not ok:
            return False, f"torch._scaled_mm needs FP8 tensor cores: {why}; use --fp8-backend emulated"
    try:  # the CPU kernel exists in recent torch; probe rather than trust the version
        from precision.fp8_linear import scaled_mm
        a = torch.ones(16, 16, device=device).to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        scaled_mm(a, a.t(), one, one, torch.float32)
    except Exception as e:  # noqa: BLE001
        return False, f"torch._scaled_mm does not run on {device.type} in torch {torch.__version__} ({e}); " \
                      "use --fp8-backend emulated"
    return True, f"torch._scaled_mm on {device.type}"


def fp8_layers(engine: str, model: nn.Module, names: list[str], s, round_out) -> Converted:
    """The named linears as Fp8Linear with `engine` (native or emulated), one shared scaling state."""
    swap(model, names, lambda lin: Fp8Linear(lin, engine, s.recipe, s.scaling, round_out))
    share_scaling_state(model)  # one amax history for every layer: one update per step
    return unchanged(names)


def _convert(model: nn.Module, names: list[str], precision: str, s, round_out) -> Converted:
    return fp8_layers("native", model, names, s, round_out)


def own_state(precision: str, scaling: str) -> bool:
    """Fp8Linear keeps (amax, scale) per layer and role in its buffers, whichever scaling it runs."""
    return precision == "fp8"


NATIVE = named("native", package=None, library="", status=_status, convert=_convert, auto_precisions=("fp8",),
               keeps_scale_state=own_state, own_layer=True)
