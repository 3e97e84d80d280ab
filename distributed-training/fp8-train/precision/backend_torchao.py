"""Backend `torchao`: torchao.float8's convert_to_float8_training with the tensorwise or rowwise recipe.

Dynamic scaling only (each tensor scaled by its own amax: no state to read, amax probes observe it), compiled
for speed. API names follow the torchao 0.18 documentation (fp8-anchors.md section 2); torchao is not
installed in this repository's CI (its path is checked on a GPU).
"""

from __future__ import annotations

import importlib

import torch
import torch.nn as nn

from precision.backend import Converted, fp8_gpu, fp8_only, importable, named, unchanged
from precision.formats import E4M3, E5M2

TORCHAO_HOW = "install torchao with `make setup-fp8` (pip install torchao==0.18.0)"


def _status(precision: str, device: torch.device) -> tuple[bool, str]:
    wrong = fp8_only("torchao", precision)
    if wrong:
        return False, wrong
    ao, err = importable("torchao.float8")
    if ao is None:
        return False, f"torchao is not importable ({err}); {TORCHAO_HOW}"
    if device.type == "cuda":
        ok, why = fp8_gpu(device)
        if not ok:
            return False, f"torchao float8 training needs FP8 tensor cores: {why}; use --fp8-backend emulated"
    return True, f"torchao {getattr(importlib.import_module('torchao'), '__version__', '?')} float8"


def torchao_convert(model: nn.Module, names: list[str], recipe: str) -> None:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    wanted = set(names)
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda mod, fqn: fqn in wanted)


def _convert(model: nn.Module, names: list[str], precision: str, s, round_out) -> Converted:
    torchao_convert(model, names, s.torchao_recipe)
    return unchanged(names)


def _grad_max(s) -> float:
    """torchao's rowwise recipes cast gradients to E4M3 too."""
    return E4M3.max if s.torchao_recipe.startswith("rowwise") else E5M2.max


TORCHAO = named("torchao", package="torchao", library="torchao", status=_status, convert=_convert,
                auto_precisions=("fp8",), probe_grad_max=_grad_max, dynamic_only=True)
