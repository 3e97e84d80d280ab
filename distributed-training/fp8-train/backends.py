"""Which low-precision backend runs, and the adapters for the two libraries made for this.

    te        NVIDIA TransformerEngine: te.Linear in place of nn.Linear, forward under te.autocast
              (fp8_autocast before TE 2.9) with a recipe: DelayedScaling(HYBRID) or
              Float8CurrentScaling for FP8, MXFP8BlockScaling / NVFP4BlockScaling on Blackwell.
    te-fused  TransformerEngine's fused modules (LayerNormLinear with fused QKV, LayerNormMLP), the
              way TE's users run it; same recipes (te_adapter.py has both adapters).
    torchao   torchao.float8.convert_to_float8_training with the tensorwise or rowwise recipe
              (dynamic scaling; compile it for speed).
    native    the lab's Fp8Linear over torch._scaled_mm (fp8_linear.py).
    emulated  Fp8Linear's emulated engine, or the block formats of mx.py: any hardware.

`auto` takes the first of te, torchao, native, emulated that works here (fp8-anchors.md section 8),
and says why; te-fused is chosen by name only (it changes the model's modules, not just its linears).
A backend asked for by name that cannot run here is a BackendUnavailable with one line that says
how to get it; the runner prints it and exits 2. API names follow the TE 2.x and torchao 0.18
documentation (fp8-anchors.md sections 1-2). Neither library is installed in this repository's
CI: their paths are checked on a GPU (tests/test_te.py, marked gpu) and their wiring on the CPU
against a stand-in (tests/test_te_wiring.py); the report says which runs could not run and why.
"""

from __future__ import annotations

import importlib
from contextlib import nullcontext
from typing import ContextManager

import torch
import torch.nn as nn

from formats import E4M3, amax

TE_HOW = ("install TransformerEngine with `make setup-fp8` (its core wheel for this torch's CUDA and its torch "
          "extension compiled against this torch; offline: WHEELHOUSE=dir, see the README)")
TORCHAO_HOW = "install torchao with `make setup-fp8` (pip install torchao==0.18.0)"


TE_BACKENDS = ("te", "te-fused")  # both TransformerEngine: same install, same recipes, same state


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
    if backend in TE_BACKENDS:
        need = {"fp8": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}.get(precision)
        if need is None:
            return False, f"TransformerEngine has no {precision} recipe; use --fp8-backend emulated"
        if precision != "fp8" and backend == "te-fused":
            return False, f"te-fused runs per-tensor FP8 only; use --fp8-backend te for {precision}"
        if device.type != "cuda":  # before the install advice: `make setup-fp8` refuses a CPU torch
            return False, "TransformerEngine needs a CUDA GPU; use --fp8-backend native or emulated on this machine"
        te, err = _import("transformer_engine.pytorch")
        if te is None:
            return False, f"TransformerEngine is not importable ({err}); {TE_HOW}"
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


# ---- torchao ---------------------------------------------------------------------------------

def torchao_convert(model: nn.Module, names: list[str], recipe: str) -> None:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    wanted = set(names)
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda mod, fqn: fqn in wanted)


# ---- amax probes for backends whose scales are not kept as state ------------------------------

class AmaxProbe:
    """Record (amax, scale) per role for the backends that keep no scaling state of their own.

    For dynamic (current) scaling the scale a tensor gets is fmt_max / amax(tensor) (torchao
    float8_utils, TE Float8CurrentScaling), so amax is the whole story ("current"). Block formats
    have one scale per block; their per-tensor number is fmt_max / amax ("derived": for NVFP4 that is
    the real per-tensor encode scale, 448 * 6 / amax). `last` (3, 2) mirrors Fp8Linear.last.

    Nothing of this belongs to the training step, so as little as possible runs inside it:
    - weights: the weights a step multiplies are those before its optimizer step, so `weights()`
      reads their amax before the step, outside the timed region;
    - inputs and output gradients need hooks. On an eager model they are attached only for the steps
      that record (`arm(True)` on the --stats-every steps) and removed after. A compiled model cannot
      gain or lose hooks between steps (see health.ActivationProbe): there the input hook is traced
      into the graph once and runs every step (a fused reduction per input; its cost is part of the
      monitoring overhead bench.py measures), and gradients have no hook point (torch.compile does not
      trace backward hooks), which the report shows as "not recorded".
    """

    def __init__(self, modules: list[tuple[str, nn.Module]], fwd_max: float, grad_max: float, kind: str,
                 compiled: bool = False):
        self.modules, self.fwd_max, self.grad_max, self.compiled = modules, fwd_max, grad_max, compiled
        self.handles: list = []
        for _, m in modules:
            m.register_buffer("last", torch.full((3, 2), float("nan"), device=m.weight.device), persistent=False)
            m.scale_kind = kind
        if compiled:
            self._attach(grads=False)

    def arm(self, on: bool) -> None:
        """Eager models: hooks on for a recording step, off otherwise (compiled: always on, inputs only)."""
        if self.compiled:
            return
        if on and not self.handles:
            self._attach(grads=True)
        elif not on and self.handles:
            self.remove()

    def _attach(self, grads: bool) -> None:
        for _, m in self.modules:
            self.handles.append(m.register_forward_pre_hook(self._input))
            if grads:
                self.handles.append(m.register_forward_hook(self._watch_output))

    @torch.no_grad()
    def weights(self) -> None:
        for _, m in self.modules:
            a_w = amax(m.weight)
            m.last[1].copy_(torch.stack([a_w, self.fwd_max / a_w]))

    @torch.no_grad()
    def _input(self, m, args):
        a_x = amax(args[0])
        m.last[0].copy_(torch.stack([a_x, self.fwd_max / a_x]))

    def _watch_output(self, m, args, out):
        # The gradient w.r.t. the module's output is the GEMM's grad_output: a tensor hook sees it in every
        # backward (a module's full backward hooks did not fire around TE's autograd functions).
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda g, m=m: self._grad(m, g))

    @torch.no_grad()
    def _grad(self, m, g):
        a_g = amax(g)
        m.last[2].copy_(torch.stack([a_g, self.grad_max / a_g]))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


BLOCK_MAX = {"mxfp8": E4M3.max, "mxfp4": 6.0, "nvfp4": E4M3.max * 6.0}  # element max (x per-tensor scale max)


def parent_of(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    """(the module holding `name`, the attribute it holds it under): where a swap puts the new module."""
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
