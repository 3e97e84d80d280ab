"""Backends `te` and `te-fused`: NVIDIA TransformerEngine, as records over te_adapter.py's adapters.

    te        te.Linear in place of nn.Linear, forward under te.autocast (fp8_autocast before TE 2.9) with a
              recipe: DelayedScaling(HYBRID) or Float8CurrentScaling for FP8, MXFP8BlockScaling /
              NVFP4BlockScaling on Blackwell.
    te-fused  TE's fused modules (LayerNormLinear with fused QKV, LayerNormMLP), the way TE's users run it;
              per-tensor FP8 only, chosen by name only (it changes the model's modules, not just its linears).

Both share the install, the recipes and the state: DelayedScaling keeps fp8_meta in each module (read,
snapshotted and scrubbed by te_adapter), pickled into checkpoints as `_extra_state`; both run eagerly.
API names follow the TE 2.x documentation (fp8-anchors.md section 1). TE is not installed in this
repository's CI: its paths are checked on a GPU (tests/test_te.py) and its wiring against a stand-in
(tests/test_te_wiring.py).
"""

from __future__ import annotations

import functools
import importlib

import torch
import torch.nn as nn

from precision import te_adapter
from precision.backend import Converted, LibraryState, importable, named

TE_HOW = ("install TransformerEngine with `make setup-fp8` (its core wheel for this torch's CUDA and its torch "
          "extension compiled against this torch; offline: WHEELHOUSE=dir, see the README)")
_RECIPES = {"fp8": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}  # precision -> TE's availability check


def _te_check(te, name: str) -> tuple[bool, str]:
    """te.is_<name>_available(return_reason=True) (TE >= 2.9), else the older check_*_support()."""
    fn = getattr(te, f"is_{name}_available", None)
    if fn is not None:
        try:
            ok, reason = fn(return_reason=True)
        except TypeError:
            ok, reason = fn(), ""
        return bool(ok), str(reason)
    try:
        quant = importlib.import_module("transformer_engine.pytorch.fp8")
        return quant.check_fp8_support() if name == "fp8" else (False, f"this TE has no {name} check")
    except Exception as e:  # noqa: BLE001
        return False, str(e)


def _status(name: str, precision: str, device: torch.device) -> tuple[bool, str]:
    need = _RECIPES.get(precision)
    if need is None:
        return False, f"TransformerEngine has no {precision} recipe; use --fp8-backend emulated"
    if precision != "fp8" and name == "te-fused":
        return False, f"te-fused runs per-tensor FP8 only; use --fp8-backend te for {precision}"
    if device.type != "cuda":  # before the install advice: `make setup-fp8` refuses a CPU torch
        return False, "TransformerEngine needs a CUDA GPU; use --fp8-backend native or emulated on this machine"
    te, err = importable("transformer_engine.pytorch")
    if te is None:
        return False, f"TransformerEngine is not importable ({err}); {TE_HOW}"
    ok, reason = _te_check(te, need)
    version = getattr(importlib.import_module("transformer_engine"), "__version__", "?")
    return ok, (f"TransformerEngine {version}, {need} available" if ok else
                f"TransformerEngine cannot run {need} on this GPU ({reason}); use --fp8-backend emulated")


def _recipe(precision: str, s):
    return te_adapter.recipe(precision, s.scaling, s.recipe.margin, s.recipe.history_len, s.recipe.algo)


def _convert_linear(model: nn.Module, names: list[str], precision: str, s, round_out) -> Converted:
    return Converted(te_adapter.convert_linear(model, names, _recipe(precision, s)), names)


def _convert_fused(model: nn.Module, names: list[str], precision: str, s, round_out) -> Converted:
    context, low = te_adapter.convert_fused(model, names, _recipe(precision, s))
    return Converted(context, low)


def _delayed(precision: str, scaling: str) -> bool:
    return precision == "fp8" and scaling == "delayed"


_COMMON = dict(package="transformer_engine", library="TransformerEngine", keeps_scale_state=_delayed,
               library_state=LibraryState(te_adapter.snapshot_scales, te_adapter.delayed_state, te_adapter.scrub),
               compiles=False, checkpoint_pickles=True,
               eager_note="not compiled: TransformerEngine modules run eagerly (its fused kernels are its own)")
TE = named("te", status=functools.partial(_status, "te"), convert=_convert_linear,
           auto_precisions=("fp8", "mxfp8", "mxfp4", "nvfp4"), **_COMMON)
TE_FUSED = named("te-fused", status=functools.partial(_status, "te-fused"), convert=_convert_fused,
                 probes=False, fused_norm=True, **_COMMON)
