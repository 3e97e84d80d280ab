"""Backend `emulated`: quantize-dequantize with fp32 GEMMs, on any hardware.

FP8 runs through Fp8Linear's emulated engine (fp8_linear.py: the same scaling state as `native`); the
block formats (mxfp8, mxfp4, nvfp4) through mx.py's BlockScaledLinear, one scale per block, observed by amax
probes. The fallback of `--fp8-backend auto`: always available.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from precision.backend import Converted, named, swap, unchanged
from precision.backend_native import fp8_layers, own_state
from precision.mx import BlockScaledLinear


def _status(precision: str, device: torch.device) -> tuple[bool, str]:
    return True, "quantize-dequantize + fp32 GEMMs, runs anywhere"


def _convert(model: nn.Module, names: list[str], precision: str, s, round_out) -> Converted:
    if precision == "fp8":
        return fp8_layers("emulated", model, names, s, round_out)
    swap(model, names, lambda lin: BlockScaledLinear(lin, precision, round_out, s.mx_scale_rule))
    return unchanged(names)


EMULATED = named("emulated", package=None, library="", status=_status, convert=_convert,
                 auto_precisions=("fp8", "mxfp8", "mxfp4", "nvfp4"), keeps_scale_state=own_state, own_layer=True)
