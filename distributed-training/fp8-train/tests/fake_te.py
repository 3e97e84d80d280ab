"""A CPU stand-in for TransformerEngine: its module, parameter and recipe names, plain PyTorch arithmetic.

No FP8 happens here. It exists so that the CPU tests can check the wiring of te_adapter.py (which
weight goes where, which modules a block becomes, which columns of TE's scaling state are read)
on a machine without a GPU; tests/test_te.py checks the same adapters against the real library.
Names follow TE 2.x: te.Linear(weight), te.LayerNormLinear(layer_norm_weight, layer_norm_bias,
weight), te.LayerNormMLP(layer_norm_weight, layer_norm_bias, fc1_weight, fc2_weight), te.autocast,
transformer_engine.common.recipe, transformer_engine.pytorch.constants.FP8FwdTensorIdx/FP8BwdTensorIdx.
"""

from __future__ import annotations

import sys
import types
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# TE's enum values (transformer_engine/common/include/transformer_engine/transformer_engine.h).
FWD = types.SimpleNamespace(GEMM1_INPUT=0, GEMM1_WEIGHT=1, GEMM1_OUTPUT=2, GEMM2_INPUT=3, GEMM2_WEIGHT=4,
                            GEMM2_OUTPUT=5)
BWD = types.SimpleNamespace(GRAD_OUTPUT1=0, GRAD_INPUT1=1, GRAD_OUTPUT2=2, GRAD_INPUT2=3)


def _param(*shape, dtype=None, device="cpu"):
    return nn.Parameter(torch.empty(*shape, dtype=dtype or torch.float32, device=device))


class Linear(nn.Module):
    def __init__(self, in_features, out_features, bias=True, params_dtype=None, device="cuda"):
        super().__init__()
        self.weight = _param(out_features, in_features, dtype=params_dtype, device=device)
        self.bias = _param(out_features, dtype=params_dtype, device=device) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class _Norm(nn.Module):
    def __init__(self, features, eps, params_dtype, device):
        super().__init__()
        self.features, self.eps = features, eps
        self.layer_norm_weight = _param(features, dtype=params_dtype, device=device)
        self.layer_norm_bias = _param(features, dtype=params_dtype, device=device)

    def norm(self, x):
        return F.layer_norm(x, (self.features,), self.layer_norm_weight, self.layer_norm_bias, self.eps)


class LayerNormLinear(_Norm):
    def __init__(self, in_features, out_features, eps=1e-5, bias=True, params_dtype=None, device="cuda",
                 normalization="LayerNorm"):
        super().__init__(in_features, eps, params_dtype, device)
        assert normalization == "LayerNorm" and not bias
        self.weight = _param(out_features, in_features, dtype=params_dtype, device=device)

    def forward(self, x):
        return F.linear(self.norm(x), self.weight)


class LayerNormMLP(_Norm):
    def __init__(self, hidden_size, ffn_hidden_size, eps=1e-5, bias=True, activation="gelu", params_dtype=None,
                 device="cuda", normalization="LayerNorm"):
        super().__init__(hidden_size, eps, params_dtype, device)
        assert activation == "gelu" and not bias
        self.fc1_weight = _param(ffn_hidden_size, hidden_size, dtype=params_dtype, device=device)
        self.fc2_weight = _param(hidden_size, ffn_hidden_size, dtype=params_dtype, device=device)

    def forward(self, x):
        return F.linear(F.gelu(F.linear(self.norm(x), self.fc1_weight), approximate="tanh"), self.fc2_weight)


def autocast(enabled=True, recipe=None):
    return nullcontext()


@dataclass
class DelayedScaling:
    margin: int = 0
    fp8_format: str = "HYBRID"
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"


@dataclass
class Float8CurrentScaling:
    fp8_format: str = "HYBRID"


class FP8GlobalStateManager:
    resets = 0

    @classmethod
    def reset(cls):
        cls.resets += 1


@dataclass
class ScalingState:
    """DelayedScalingRecipeState's two tensors."""
    scale: torch.Tensor  # (n,)
    amax_history: torch.Tensor  # (L, n)


def modules() -> dict[str, types.ModuleType]:
    """sys.modules entries that make `import transformer_engine.pytorch as te` find this stand-in."""
    root, pt, common = (types.ModuleType(n) for n in ("transformer_engine", "transformer_engine.pytorch",
                                                        "transformer_engine.common"))
    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.DelayedScaling, recipe.Float8CurrentScaling = DelayedScaling, Float8CurrentScaling
    recipe.Format = types.SimpleNamespace(HYBRID="HYBRID", E4M3="E4M3")
    quant = types.ModuleType("transformer_engine.pytorch.quantization")
    quant.FP8GlobalStateManager = FP8GlobalStateManager
    const = types.ModuleType("transformer_engine.pytorch.constants")
    const.FP8FwdTensorIdx, const.FP8BwdTensorIdx = FWD, BWD
    pt.Linear, pt.LayerNormLinear, pt.LayerNormMLP, pt.autocast = Linear, LayerNormLinear, LayerNormMLP, autocast
    root.pytorch, root.common, root.__version__ = pt, common, "0.0-fake"
    common.recipe, pt.quantization, pt.constants = recipe, quant, const
    return {"transformer_engine": root, "transformer_engine.pytorch": pt, "transformer_engine.common": common,
            "transformer_engine.common.recipe": recipe, "transformer_engine.pytorch.quantization": quant,
            "transformer_engine.pytorch.constants": const}


def install(monkeypatch) -> None:
    for name, mod in modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
