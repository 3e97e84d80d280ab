"""Which low-precision backend runs, and the adapters for the two libraries made for this.

    te        NVIDIA TransformerEngine: te.Linear in place of nn.Linear, forward under te.autocast
              (fp8_autocast before TE 2.9) with a recipe: DelayedScaling(HYBRID) or
              Float8CurrentScaling for FP8, MXFP8BlockScaling / NVFP4BlockScaling on Blackwell.
    torchao   torchao.float8.convert_to_float8_training with the tensorwise or rowwise recipe
              (dynamic scaling; compile it for speed).
    native    the lab's Fp8Linear over torch._scaled_mm (fp8_linear.py).
    emulated  Fp8Linear's emulated engine, or the block formats of mx.py: any hardware.

`auto` takes the first that works here, in that order (fp8-anchors.md section 8), and says why.
A backend asked for by name that cannot run here is a BackendUnavailable with one line that says
how to get it; the runner prints it and exits 2. API names follow the TE 2.x and torchao 0.18
documentation (fp8-anchors.md sections 1-2). Neither library is installed in this repository's
CI: the te and torchao paths are written against those documents and skipped by the tests when
the import fails, and the report says they were not run.
"""

from __future__ import annotations

import importlib
from contextlib import nullcontext
from typing import Callable, ContextManager

import torch
import torch.nn as nn

from formats import E4M3, amax

TE_HOW = ("install TransformerEngine as distributed-training/fp8-train/README.md says (core wheel "
          "transformer_engine_cu13 + transformer_engine_torch built against your torch)")
TORCHAO_HOW = "install torchao with `make setup-fp8` (pip install torchao==0.18.0)"


class BackendUnavailable(RuntimeError):
    pass


def _import(name: str):
    try:
        return importlib.import_module(name), ""
    except Exception as e:  # noqa: BLE001 - TE raises ImportError, OSError, FileNotFoundError, AssertionError
        first = str(e).splitlines()[0][:120] if str(e) else ""
        return None, f"{type(e).__name__}: {first}"


def _fp8_gpu(device: torch.device) -> tuple[bool, str]:
    if device.type != "cuda":
        return False, "no CUDA device"
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 9):
        name = torch.cuda.get_device_name(device)
        return False, f"{name} is sm_{cap[0]}{cap[1]}, FP8 needs sm_89+ (Ada/Hopper/Blackwell)"
    return True, f"sm_{cap[0]}{cap[1]}"


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


def status(backend: str, precision: str, device: torch.device) -> tuple[bool, str]:
    """(can this backend run this precision here, why / why not)."""
    if backend == "emulated":
        return True, "quantize-dequantize + fp32 GEMMs, runs anywhere"
    if backend == "te":
        te, err = _import("transformer_engine.pytorch")
        if te is None:
            return False, f"TransformerEngine is not importable ({err}); {TE_HOW}"
        need = {"fp8": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}.get(precision)
        if need is None:
            return False, f"TransformerEngine has no {precision} recipe; use --fp8-backend emulated"
        if device.type != "cuda":
            return False, "TransformerEngine needs a CUDA GPU; use --fp8-backend native or emulated on this machine"
        ok, reason = _te_check(te, need)
        version = getattr(importlib.import_module("transformer_engine"), "__version__", "?")
        return ok, (f"TransformerEngine {version}, {need} available" if ok else
                    f"TransformerEngine cannot run {need} on this GPU ({reason}); use --fp8-backend emulated")
    if precision != "fp8":
        return False, f"{precision} runs through --fp8-backend te (Blackwell) or emulated, not {backend}"
    if backend == "torchao":
        ao, err = _import("torchao.float8")
        if ao is None:
            return False, f"torchao is not importable ({err}); {TORCHAO_HOW}"
        if device.type == "cuda":
            ok, why = _fp8_gpu(device)
            if not ok:
                return False, f"torchao float8 training needs FP8 tensor cores: {why}; use --fp8-backend emulated"
        return True, f"torchao {getattr(importlib.import_module('torchao'), '__version__', '?')} float8"
    if backend == "native":
        if device.type == "cuda":
            ok, why = _fp8_gpu(device)
            if not ok:
                return False, f"torch._scaled_mm needs FP8 tensor cores: {why}; use --fp8-backend emulated"
        try:  # the CPU kernel exists in recent torch; probe rather than trust the version
            from fp8_linear import scaled_mm
            a = torch.ones(16, 16, device=device).to(torch.float8_e4m3fn)
            one = torch.ones((), device=device)
            scaled_mm(a, a.t(), one, one, torch.float32)
        except Exception as e:  # noqa: BLE001
            return False, f"torch._scaled_mm does not run on {device.type} in torch {torch.__version__} ({e}); " \
                          "use --fp8-backend emulated"
        return True, f"torch._scaled_mm on {device.type}"
    raise ValueError(f"unknown backend {backend!r}")


def resolve(precision: str, requested: str, device: torch.device) -> tuple[str, str]:
    """(backend, reason) for a low-precision run; BackendUnavailable with how-to-get-it if impossible."""
    if requested != "auto":
        ok, why = status(requested, precision, device)
        if not ok:
            raise BackendUnavailable(f"--fp8-backend {requested} for {precision}: {why}")
        return requested, why
    tried = []
    order = ("te", "torchao", "native", "emulated") if precision == "fp8" else ("te", "emulated")
    for b in order:
        ok, why = status(b, precision, device)
        if ok:
            return b, f"auto -> {b}: {why}" + (f" (skipped {'; '.join(tried)})" if tried else "")
        tried.append(f"{b}: {why.split(';')[0]}")
    raise AssertionError("emulated is always available")


# ---- TransformerEngine -----------------------------------------------------------------------

def te_recipe(precision: str, scaling_mode: str, margin: int, history_len: int, algo: str):
    from transformer_engine.common import recipe as r
    if precision == "mxfp8":
        return r.MXFP8BlockScaling()
    if precision == "nvfp4":
        return r.NVFP4BlockScaling()
    if scaling_mode == "current":
        return r.Float8CurrentScaling(fp8_format=r.Format.HYBRID)
    return r.DelayedScaling(margin=margin, fp8_format=r.Format.HYBRID, amax_history_len=history_len,
                            amax_compute_algo=algo)


def te_convert(model: nn.Module, names: list[str], recipe) -> Callable[[], ContextManager]:
    """Swap the named nn.Linears for te.Linear (same weights); return the forward context factory."""
    import transformer_engine.pytorch as te
    try:  # one process trains several runs: clear TE's global FP8 buffers between them (TE #814)
        from transformer_engine.pytorch.quantization import FP8GlobalStateManager
    except ImportError:
        from transformer_engine.pytorch.fp8 import FP8GlobalStateManager
    FP8GlobalStateManager.reset()
    for name in names:
        parent, attr = _parent(model, name)
        lin = getattr(parent, attr)
        new = te.Linear(lin.in_features, lin.out_features, bias=lin.bias is not None,
                        params_dtype=lin.weight.dtype, device=lin.weight.device.type)
        with torch.no_grad():
            new.weight.copy_(lin.weight)
            if lin.bias is not None:
                new.bias.copy_(lin.bias)
        setattr(parent, attr, new)
    if hasattr(te, "autocast"):  # TE >= 2.9; fp8_autocast is the deprecated name (fp8-anchors.md 1.2)
        return lambda: te.autocast(enabled=True, recipe=recipe)
    return lambda: te.fp8_autocast(enabled=True, fp8_recipe=recipe)


def _te_recipe_states(model: nn.Module):
    """(name, module, forward state, backward state) of every TE module with delayed-scaling state.

    TE 2.x keeps it in module.fp8_meta["scaling_fwd" / "scaling_bwd"], DelayedScalingRecipeState objects
    with `scale` (n,) and `amax_history` (L, n); columns per GEMM are (input, weight, output) forward and
    (grad_output, grad_input) backward. Current and block scaling keep no such state.
    """
    for name, m in model.named_modules():
        meta = getattr(m, "fp8_meta", None)
        if not isinstance(meta, dict) or "scaling_fwd" not in meta or "scaling_bwd" not in meta:
            continue
        fwd, bwd = meta["scaling_fwd"], meta["scaling_bwd"]
        if hasattr(fwd, "amax_history") and hasattr(fwd, "scale"):
            yield name, m, fwd, bwd


@torch.no_grad()
def te_snapshot_scales(model: nn.Module) -> None:
    """Remember the scales TE will cast with this step (call before the forward).

    TE updates scales after the step (forward ones at autocast exit, backward ones after backward), so
    what fp8_meta holds afterwards is the *next* step's scale; fp8.csv records the scale used.
    """
    for _, m, fwd, bwd in _te_recipe_states(model):
        m._lab_scale_used = torch.stack([fwd.scale[0], fwd.scale[1], bwd.scale[0]]).float()


def te_delayed_state(model: nn.Module) -> list[tuple[str, str, torch.Tensor, torch.Tensor]]:
    """(module, role, amax, scale used) per FP8 tensor from TE's DelayedScaling state, read after backward.

    The amax is this step's: TE's update rolls the history so the newest amax sits in the last row.
    The scale is the one snapshotted before the step (te_snapshot_scales); 1 on the first step,
    TE's initial scale.
    """
    out = []
    for name, m, fwd, bwd in _te_recipe_states(model):
        used = getattr(m, "_lab_scale_used", None)
        if used is None:
            used = torch.ones(3, device=fwd.scale.device)
        out += [(name, "input", fwd.amax_history[-1, 0], used[0]),
                (name, "weight", fwd.amax_history[-1, 1], used[1]),
                (name, "grad_output", bwd.amax_history[-1, 0], used[2])]
    return out


@torch.no_grad()
def te_scrub(model: nn.Module) -> None:
    """Zero non-finite entries of TE's amax histories in place (see scaling.scrub_history)."""
    for _, _, fwd, bwd in _te_recipe_states(model):
        for state in (fwd, bwd):
            state.amax_history.copy_(torch.where(torch.isfinite(state.amax_history), state.amax_history,
                                                 torch.zeros_like(state.amax_history)))


# ---- torchao ---------------------------------------------------------------------------------

def torchao_convert(model: nn.Module, names: list[str], recipe: str) -> None:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    wanted = set(names)
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda mod, fqn: fqn in wanted)


# ---- amax probes for backends whose scales are not kept as state ------------------------------

class AmaxProbe:
    """Forward/backward hooks that record each module's (amax, scale) per role every step.

    For dynamic (current) scaling the scale a tensor gets is fmt_max / amax(tensor) (torchao
    float8_utils, TE Float8CurrentScaling), so amax is the whole story ("current"). Block formats
    have one scale per block; their per-tensor number is fmt_max / amax ("derived": for NVFP4 that is
    the real per-tensor encode scale, 448 * 6 / amax). `last` mirrors Fp8Linear.last.
    """

    def __init__(self, modules: list[tuple[str, nn.Module]], fwd_max: float, grad_max: float, kind: str,
                 backward: bool = True):
        self.modules, self.fwd_max, self.grad_max = modules, fwd_max, grad_max
        self.handles = []
        for _, m in modules:
            m.register_buffer("last", torch.full((3, 2), float("nan"), device=m.weight.device), persistent=False)
            m.scale_kind = kind
            self.handles.append(m.register_forward_pre_hook(self._fwd))
            if backward:  # full backward hooks break torch.compile graphs: gradient amaxes are eager-only
                self.handles.append(m.register_full_backward_pre_hook(self._bwd))

    @torch.no_grad()
    def _fwd(self, m, args):
        a_x, a_w = amax(args[0]), amax(m.weight)
        m.last.copy_(torch.stack([torch.stack([a_x, self.fwd_max / a_x]), torch.stack([a_w, self.fwd_max / a_w]),
                                  m.last[2]]))

    @torch.no_grad()
    def _bwd(self, m, grad_output):
        a_g = amax(grad_output[0])
        m.last[2] = torch.stack([a_g, self.grad_max / a_g])

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


BLOCK_MAX = {"mxfp8": E4M3.max, "mxfp4": 6.0, "nvfp4": E4M3.max * 6.0}  # element max (x per-tensor scale max)


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (model.get_submodule(path) if path else model), attr


def no_context() -> ContextManager:
    return nullcontext()


# ---- provenance ------------------------------------------------------------------------------

# The package behind each library backend, by the backend name's first word (te, te-fused -> TE);
# every other backend (torch, native, emulated) is torch itself.
_BACKEND_PACKAGES = {"te": "transformer_engine", "torchao": "torchao"}


def backend_version(backend: str) -> str:
    """What ran the precision, with its version, for every result row: 'transformer_engine 2.20.2',
    'torchao 0.17.0', 'torch 2.13.0+cpu'. Read from the installed distribution's metadata (no import)."""
    package = _BACKEND_PACKAGES.get(backend.split("-")[0])
    if package is None:
        return f"torch {torch.__version__}"
    from importlib import metadata
    try:
        return f"{package} {metadata.version(package)}"
    except metadata.PackageNotFoundError:
        module, _ = _import(package)  # a source checkout on sys.path has no metadata
        return f"{package} {getattr(module, '__version__', 'unknown') if module else 'not installed'}"
