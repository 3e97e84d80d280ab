"""TransformerEngine in fp8-train: the te.Linear swap (backend `te`) and TE's fused modules (`te-fused`).

    te         every mapped nn.Linear becomes a te.Linear holding the same weight; LayerNorm, GELU,
               residuals and attention stay PyTorch's, under BF16 autocast. It is what the course asks
               for first: FP8 GEMMs and nothing else changed. Each te.Linear casts its own input, so q,
               k and v cast the same LayerNorm output three times, and the LayerNorm writes it first.
    te-fused   TE as its users run it. Per block: LayerNorm + q/k/v as one te.LayerNormLinear (the norm
               kernel writes the FP8 input of one fused QKV GEMM, (3d, d)), the output projection as a
               te.Linear, and LayerNorm + w1 + GELU + w2 as one te.LayerNormMLP (the norm and the GELU
               each write FP8 for the GEMM after them; TE's "gelu" is the tanh form the GPT uses).
               Causal attention (SDPA, flash) stays BF16, as in every other mode.

Both keep fp32 parameters: every mode trains with the same AdamW and the same fp32 state, so modes
differ only in arithmetic (TE casts an fp32 weight straight to FP8). Both run eagerly: TorchDynamo
cannot trace TE's modules, and what te-fused leaves outside them per block is the attention call,
two residual adds and views, nothing that compiling would fuse further.

FP8 state, read the supported way. DelayedScaling keeps per module `fp8_meta["scaling_fwd"]` and
`["scaling_bwd"]` (DelayedScalingRecipeState: `scale` (n,), `amax_history` (L, n)); the columns are
named by TE's own index constants (FP8FwdTensorIdx: GEMM1_INPUT, GEMM1_WEIGHT, GEMM2_INPUT, ...;
FP8BwdTensorIdx: GRAD_OUTPUT1, GRAD_OUTPUT2, ...). A te.Linear or LayerNormLinear holds one GEMM,
a LayerNormMLP two (fc1: GEMM1_* and GRAD_OUTPUT1, fc2: GEMM2_* and GRAD_OUTPUT2), recorded in
fp8.csv as `<path>.w1` and `<path>.w2`. TE updates scales after the step, so the scale a step cast
with is snapshotted before it (te_snapshot_scales). Float8CurrentScaling keeps no state in TE 2.x
(its quantizer computes amax and scale inside the cast kernel and stores neither): those runs are
observed with forward/gradient probes on the --stats-every steps (amax_probe.AmaxProbe); the tensors
inside a fused module (the GELU output, fc1's gradient) have no hook point and are reported as such.
"""

from __future__ import annotations

from typing import Callable, ContextManager, Iterator, NamedTuple

import torch
import torch.nn as nn

from common.model import causal_attention
from precision.backend import parent_of

FUSED_BLOCK = ("attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.w1", "mlp.w2")  # what te-fused takes per block


class TeGemm(NamedTuple):
    """One FP8 GEMM of a TE module and its columns in the module's delayed-scaling state."""
    name: str  # fp8.csv module name: the TE module's path, or <path>.w1 / <path>.w2 inside a LayerNormMLP
    module: nn.Module
    fwd_input: int  # column of fp8_meta["scaling_fwd"]
    fwd_weight: int
    bwd_grad: int  # column of fp8_meta["scaling_bwd"]: the GEMM's output gradient


class TeReading(NamedTuple):
    module: str
    role: str  # input | weight | grad_output
    amax: torch.Tensor  # 0-d, this step's
    scale: torch.Tensor  # 0-d, the scale this step cast with


def recipe(precision: str, scaling_mode: str, margin: int, history_len: int, algo: str):
    from transformer_engine.common import recipe as r
    if precision == "mxfp8":
        return r.MXFP8BlockScaling()
    if precision == "nvfp4":
        return r.NVFP4BlockScaling()
    if scaling_mode == "current":
        return r.Float8CurrentScaling(fp8_format=r.Format.HYBRID)
    return r.DelayedScaling(margin=margin, fp8_format=r.Format.HYBRID, amax_history_len=history_len,
                            amax_compute_algo=algo)


def _reset_global_state() -> None:
    """One process trains several runs: clear TE's global FP8 buffers between them (TE #814)."""
    try:
        from transformer_engine.pytorch.quantization import FP8GlobalStateManager
    except ImportError:  # TE < 2.9
        from transformer_engine.pytorch.fp8 import FP8GlobalStateManager
    FP8GlobalStateManager.reset()


def _autocast(te, fp8_recipe) -> Callable[[], ContextManager]:
    if hasattr(te, "autocast"):  # TE >= 2.9; fp8_autocast is the deprecated name (fp8-anchors.md 1.2)
        return lambda: te.autocast(enabled=True, recipe=fp8_recipe)
    return lambda: te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe)


@torch.no_grad()
def _linear_like(te, lin: nn.Linear):
    new = te.Linear(lin.in_features, lin.out_features, bias=lin.bias is not None, params_dtype=lin.weight.dtype,
                    device=lin.weight.device.type)
    new.weight.copy_(lin.weight)
    if lin.bias is not None:
        new.bias.copy_(lin.bias)
    return new


def convert_linear(model: nn.Module, names: list[str], fp8_recipe) -> Callable[[], ContextManager]:
    """Backend te: swap the named nn.Linears for te.Linear (same weights); returns the forward context."""
    import transformer_engine.pytorch as te
    _reset_global_state()
    for name in names:
        parent, attr = parent_of(model, name)
        setattr(parent, attr, _linear_like(te, getattr(parent, attr)))
    return _autocast(te, fp8_recipe)


class FusedAttention(nn.Module):
    """norm1 + q/k/v as one te.LayerNormLinear, causal SDPA in BF16, wo as a te.Linear."""

    def __init__(self, te, norm: nn.LayerNorm, attn: nn.Module):
        super().__init__()
        self.head_dim = attn.head_dim
        self.splits = (attn.wq.out_features, attn.wk.out_features, attn.wv.out_features)
        w = attn.wq.weight
        self.wqkv = te.LayerNormLinear(attn.wq.in_features, sum(self.splits), eps=norm.eps, bias=False,
                                       params_dtype=w.dtype, device=w.device.type)
        with torch.no_grad():
            self.wqkv.weight.copy_(torch.cat([attn.wq.weight, attn.wk.weight, attn.wv.weight]))  # (3d, d)
            _copy_norm(self.wqkv, norm)
        self.wo = _linear_like(te, attn.wo)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.wqkv(x).split(self.splits, dim=-1)  # (B, T, Hq*hd), (B, T, Hkv*hd) x2
        return self.wo(causal_attention(q, k, v, self.head_dim))  # (B, T, d)


def _fused_mlp(te, norm: nn.LayerNorm, mlp: nn.Module):
    """norm2 + w1 + GELU (tanh) + w2 as one te.LayerNormMLP holding the same weights."""
    w1, w2 = mlp.w1, mlp.w2
    if w1.bias is not None:
        raise ValueError("te-fused: the GPT's MLP has biases; this adapter maps the bias-free GPT only")
    new = te.LayerNormMLP(w1.in_features, w1.out_features, eps=norm.eps, bias=False, activation="gelu",
                          params_dtype=w1.weight.dtype, device=w1.weight.device.type)
    with torch.no_grad():
        new.fc1_weight.copy_(w1.weight)  # (ffn, d)
        new.fc2_weight.copy_(w2.weight)  # (d, ffn)
        _copy_norm(new, norm)
    return new


def _copy_norm(fused: nn.Module, norm: nn.LayerNorm) -> None:
    """The GPT's LayerNorm has a gain and no bias; TE's LayerNorm has both: the bias is zero and frozen."""
    fused.layer_norm_weight.copy_(norm.weight)
    if norm.bias is not None:
        fused.layer_norm_bias.copy_(norm.bias)
    else:
        fused.layer_norm_bias.zero_()
        fused.layer_norm_bias.requires_grad_(False)


def fused_blocks(n_layers: int, names: list[str]) -> list[int]:
    """The blocks te-fused converts: those whose six linears the precision map puts in FP8.

    A block is fused whole or not at all: a map that keeps part of a block high precision cannot be
    honoured by fused modules, and is refused here rather than silently changed.
    """
    chosen = set(names)
    blocks = []
    for i in range(n_layers):
        mine = [f"layers.{i}.{s}" for s in FUSED_BLOCK]
        hit = [n for n in mine if n in chosen]
        if hit and len(hit) < len(mine):
            raise ValueError(f"--fp8-backend te-fused fuses whole blocks; the precision map puts only "
                             f"{', '.join(hit)} of block {i} in FP8 (map all six linears of a block, or none, "
                             "or use --fp8-backend te)")
        if hit:
            blocks.append(i)
    extra = sorted(chosen - {f"layers.{i}.{s}" for i in blocks for s in FUSED_BLOCK})
    if extra:
        raise ValueError(f"--fp8-backend te-fused converts whole blocks only; {extra[0]} is outside them "
                         "(use --fp8-backend te for other linears)")
    return blocks


def convert_fused(model: nn.Module, names: list[str], fp8_recipe) -> tuple[Callable[[], ContextManager], list[str]]:
    """Backend te-fused: rebuild each fully mapped block from TE's fused modules (same weights).

    Returns the forward context and the names of the TE modules (the run's low-precision modules).
    The block keeps its forward (x + attn(norm1(x)); x + mlp(norm2(x))): the norms become
    identities because the fused modules normalise their own input.
    """
    import transformer_engine.pytorch as te
    _reset_global_state()
    low = []
    for i in fused_blocks(len(model.layers), names):
        block = model.layers[i]
        block.attn = FusedAttention(te, block.norm1, block.attn)
        block.mlp = _fused_mlp(te, block.norm2, block.mlp)
        block.norm1, block.norm2 = nn.Identity(), nn.Identity()
        low += [f"layers.{i}.attn.wqkv", f"layers.{i}.attn.wo", f"layers.{i}.mlp"]
    return _autocast(te, fp8_recipe), low


# ---- FP8 state ---------------------------------------------------------------------------------

def _indices() -> tuple[int, int, int, int, int, int]:
    """TE's column constants: (GEMM1_INPUT, GEMM1_WEIGHT, GEMM2_INPUT, GEMM2_WEIGHT, GRAD_OUTPUT1, GRAD_OUTPUT2)."""
    try:
        from transformer_engine.pytorch.constants import FP8BwdTensorIdx as B, FP8FwdTensorIdx as Fw
    except ImportError:  # older TE: the enums of the extension
        import transformer_engine_torch as tex
        Fw, B = tex.FP8FwdTensors, tex.FP8BwdTensors
    return (int(Fw.GEMM1_INPUT), int(Fw.GEMM1_WEIGHT), int(Fw.GEMM2_INPUT), int(Fw.GEMM2_WEIGHT),
            int(B.GRAD_OUTPUT1), int(B.GRAD_OUTPUT2))


def _delayed_modules(model: nn.Module) -> Iterator[tuple[str, nn.Module, object, object]]:
    """(path, module, forward state, backward state) of every TE module holding delayed-scaling state."""
    for name, m in model.named_modules():
        meta = getattr(m, "fp8_meta", None)
        if not isinstance(meta, dict) or "scaling_fwd" not in meta or "scaling_bwd" not in meta:
            continue
        fwd, bwd = meta["scaling_fwd"], meta["scaling_bwd"]
        if hasattr(fwd, "amax_history") and hasattr(fwd, "scale"):
            yield name, m, fwd, bwd


def gemms(name: str, module: nn.Module) -> list[TeGemm]:
    """The FP8 GEMMs of one TE module, with their state columns."""
    in1, w1, in2, w2, g1, g2 = _indices()
    if hasattr(module, "fc2_weight"):  # LayerNormMLP: fc1 then fc2
        return [TeGemm(f"{name}.w1", module, in1, w1, g1), TeGemm(f"{name}.w2", module, in2, w2, g2)]
    return [TeGemm(name, module, in1, w1, g1)]


@torch.no_grad()
def snapshot_scales(model: nn.Module) -> None:
    """Remember the scales TE will cast with this step (call before the forward).

    TE updates scales after the step (forward ones at autocast exit, backward ones after backward), so
    what fp8_meta holds afterwards is the next step's scale; fp8.csv records the scale used.
    """
    for name, m, fwd, bwd in _delayed_modules(model):
        m._lab_scale_used = torch.stack([torch.stack([fwd.scale[g.fwd_input], fwd.scale[g.fwd_weight],
                                                      bwd.scale[g.bwd_grad]]) for g in gemms(name, m)]).float()


def delayed_state(model: nn.Module) -> list[TeReading]:
    """Per FP8 tensor of every TE module: this step's amax and the scale it was cast with.

    Read after backward: TE's update rolls each history so the newest amax sits in the last row. The
    scale is the one snapshotted before the step; 1 (TE's initial scale) if none was.
    """
    out = []
    for name, m, fwd, bwd in _delayed_modules(model):
        for i, g in enumerate(gemms(name, m)):
            used = getattr(m, "_lab_scale_used", None)
            used = torch.ones(3, device=fwd.scale.device) if used is None else used[i]
            out += [TeReading(g.name, "input", fwd.amax_history[-1, g.fwd_input], used[0]),
                    TeReading(g.name, "weight", fwd.amax_history[-1, g.fwd_weight], used[1]),
                    TeReading(g.name, "grad_output", bwd.amax_history[-1, g.bwd_grad], used[2])]
    return out


@torch.no_grad()
def scrub(model: nn.Module) -> None:
    """Zero non-finite entries of TE's amax histories in place (see scaling.scrub_history)."""
    for _, _, fwd, bwd in _delayed_modules(model):
        for state in (fwd, bwd):
            state.amax_history.copy_(torch.where(torch.isfinite(state.amax_history), state.amax_history,
                                                 torch.zeros_like(state.amax_history)))
