"""The lab's own FP8 linear layer: per-tensor scaled E4M3/E5M2 GEMMs with delayed scaling.

This is the part of the lab that shows what TransformerEngine's te.Linear does, in ~100 lines:

    forward   y  = x W^T        x, W quantized to E4M3 with their per-tensor scales
    backward  dx = dy W         dy quantized to E5M2 (gradients need range more than precision)
              dW = dy^T x       reusing the FP8 copies of x and W saved by the forward

Three GEMMs, each with FP8 operands and a higher-precision output. Two engines share all the
scaling and casting code and differ only in the multiply:
    native    torch._scaled_mm(a8, b8, scale_a, scale_b) on CUDA, the FP8 tensor-core GEMM on SM 8.9+
              GPUs; on the CPU its public form torch.nn.functional.scaled_mm (oneDNN) where the
              build has it (see `scaled_mm`). Its scales are the *dequantization* factors
              1/scale. On CUDA, cuBLASLt wants `a` row-major and `b` column-major, and every
              dimension a multiple of 16 (fp8-anchors.md section 3).
    emulated  the same FP8 operands upcast and multiplied in fp32, then scaled: the values an FP8
              GEMM with fp32 accumulation sees, on any hardware (torchao's `emulate=True` does the
              same). It keeps fp32 copies of the FP8 operands for backward: FP8 numerics, fp32
              activation memory. A NaN anywhere in an operand makes the whole output NaN (real
              hardware: only the rows/columns it touches), which is what NaN detection needs.

Scales follow TransformerEngine's delayed scaling (scaling.py): the forward reads the scale kept
from earlier steps and stages this step's amax in row 0 of the history; `update_scales` turns the
staged amaxes into next step's scales after backward (amax all-reduced over ranks first, as TE's
reduce_amax does). `scaling="current"` instead scales each tensor by its own amax
(TE Float8CurrentScaling, torchao tensorwise). Bias, if any, is added in high precision.

Where the time goes, and what this layer does about it (the GPU path, under torch.compile):
    - amax, scale and cast of one operand are element-wise passes over the same tensor, which
      Inductor fuses into one or two kernels; eager mode pays a launch per op.
    - cuBLASLt's FP8 GEMM on Hopper takes `a` row-major and `b` column-major only (fp8-anchors.md
      section 3). The backward's dx = dy W needs W^T in memory and dW = dy^T x needs x^T and
      dy^T, so the forward casts x and W straight into the layouts the backward reads and saves
      those (TE keeps the same "columnwise" copies), and the backward casts dy into both of its
      layouts at once.
    - All FP8 linears of a model share one scaling state (`share_scaling_state`): one history of
      shape (L, 3n) for n layers, so the per-step update is one all-reduce and a handful of
      kernels for the whole model instead of a dozen per layer (TE keeps one global amax buffer
      for the same reason).

The module shares its weight and bias Parameters with the nn.Linear it replaces, so parameter
names, initial values and optimizer state are the same as in every other precision mode; its
scaling state lives in buffers and so travels with model.state_dict() (checkpoints, rollback).

The record (amax, scale used, underflow/saturation per tensor) never mutates state inside the FP8
function. Under torch.compile, AOTAutograd turns a mutation of a graph input into a functional copy
written back at the end of the graph; a mutation made in the *backward* is written back from the
copy the forward saved. With every layer's state in one shared tensor, each compiled block's backward
wrote back its forward-time copy of the whole state, erasing what the later blocks had recorded (the
H200 native rows: layers 1-7 scale 0.0 at step 0, their underflow lost, their staged amaxes lost from
the history) and, with per-layer views instead, Inductor refuses the backward (a saved input modified
in place). So the forward returns its record and Fp8Linear.forward writes it (a forward mutation, in
graph order), and the backward hands its grad_output record out as the *gradient* of a small leaf
tensor per layer (`stage`), which the autograd engine accumulates outside any graph and
`update_scales` lands in the shared state after each backward, with the scale update.
LAYER_VERSION names this record's code in every row (backend_version), so rows of the layer before
it can be told apart.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from precision import scaling
from precision.formats import E4M3, E5M2, amax, current_scale, fp8_fractions, quantize, widen

ROLES = ("input", "weight", "grad_output")  # the three columns of each layer's slot in the state
LAYER_VERSION = 2  # 1: the record written inside the FP8 function (lost under compile); 2: returned out of it
RECORD = 4  # one tensor's record: amax, scale used, underflow, saturation (nan: not counted)


@dataclass(frozen=True)
class Fp8Options:
    engine: str  # "native" | "emulated"
    current: bool  # current scaling instead of delayed
    margin: int
    record: bool  # stage amaxes in the history (training steps only)
    stats: bool  # also count underflow/saturation (costs a few passes; every N steps)
    out_dtype: torch.dtype


class Fp8ScalingState(nn.Module):
    """The delayed-scaling state of n FP8 linears, one column per FP8 tensor (3 per layer).

        history (L, 3n)   amax window; row 0 stages this step's amaxes (TE's amax_history layout)
        scale   (3n,)     the scale each tensor is cast with this step
        fp8_max (3n,)     448 for input and weight (E4M3), 57344 for grad_output (E5M2)
        last    (n, 3, 2) per layer and role: (amax, scale used) of the last training step, for the monitor
        fractions (n, 3, 2) per layer and role: (underflow, saturation) of the last training step, nan
                          where not counted
        stages  n leaves of (RECORD,): each layer's backward returns its grad_output record as their
                          gradient; `land` moves them into the tensors above (see the module docstring)
    """

    def __init__(self, n: int, recipe: scaling.DelayedScaling, device: torch.device | str | None = None):
        super().__init__()
        self.n, self.recipe = n, recipe
        self.register_buffer("history", torch.zeros(recipe.history_len, 3 * n, device=device))
        self.register_buffer("scale", torch.ones(3 * n, device=device))
        self.register_buffer("fp8_max", torch.tensor([E4M3.max, E4M3.max, E5M2.max] * n, device=device),
                             persistent=False)
        self.register_buffer("last", torch.zeros(n, 3, 2, device=device), persistent=False)
        self.register_buffer("fractions", torch.full((n, 3, 2), float("nan"), device=device), persistent=False)
        self._new_stages()
        self.bound: weakref.WeakSet = weakref.WeakSet()  # the layers holding views of these tensors

    def _new_stages(self) -> None:
        # Plain leaves, not buffers or parameters: no optimizer, norm, checkpoint or FSDP sees them.
        self.stages = [torch.zeros(RECORD, device=self.scale.device, requires_grad=True) for _ in range(self.n)]

    def _apply(self, fn, recurse=True):
        """.to(), .cuda(), to_empty() make new tensors: every layer's views are made again on them."""
        out = super()._apply(fn, recurse)
        self._new_stages()
        for layer in list(self.bound):
            layer.bind()
        return out

    @torch.no_grad()
    def land(self) -> None:
        """The backward's grad_output records (the stages' gradients) -> history row 0, last, fractions.

        One gather for the whole model after each backward. A layer whose backward did not run stages
        nothing: amax 0 in the history ("no information", as before a backward), its last record kept.
        """
        grads = [s.grad for s in self.stages]
        ran = [i for i, g in enumerate(grads) if g is not None]
        if not ran:
            return
        rec = torch.stack([grads[i] for i in ran])  # (r, RECORD)
        if len(ran) == self.n:  # every layer ran its backward: plain strided writes
            self.history[0, 2::3] = rec[:, 0]
            self.last[:, 2] = rec[:, :2]
            self.fractions[:, 2] = rec[:, 2:]
        else:
            idx = torch.tensor(ran, device=rec.device)
            self.history[0, 3 * idx + 2] = rec[:, 0]
            self.last[idx, 2] = rec[:, :2]
            self.fractions[idx, 2] = rec[:, 2:]
        for s in self.stages:
            s.grad = None

    @torch.no_grad()
    def update(self, group: dist.ProcessGroup | None = None) -> None:
        """Staged amaxes -> next step's scales for every tensor at once (after each backward).

        Across data-parallel ranks the staged row is first reduced with MAX in one all-reduce, so
        every rank computes the same scales (TE: reduce_amax=True).
        """
        if dist.is_initialized() and dist.get_world_size(group) > 1:
            dist.all_reduce(self.history[0], op=dist.ReduceOp.MAX, group=group)
        scaling.update(self.history, self.scale, self.fp8_max, self.recipe)

    @torch.no_grad()
    def scrub(self) -> None:
        scaling.scrub_history(self.history)


def scaled_mm(a8: torch.Tensor, b8: torch.Tensor, inv_a: torch.Tensor, inv_b: torch.Tensor, out_dtype: torch.dtype,
              fast_accum: bool = False) -> torch.Tensor:
    """Tensorwise-scaled FP8 GEMM: (a8 * inv_a) @ (b8 * inv_b), a8 (M,K), b8 (K,N) -> (M,N) in out_dtype.

    Both torch._scaled_mm and its public form torch.nn.functional.scaled_mm (torch >= 2.10) take the
    *dequantization* scales. On CUDA the private op is the one to call: it is the same cuBLASLt FP8
    GEMM, and TorchDynamo traces it, where torch 2.11 cannot trace the public op's _scaled_mm_v2 and
    breaks the compiled graph at every GEMM (measured: the native layer at 0.6x torchao's speed). On
    the CPU wheel the public op reaches oneDNN while the private one falls back to a reference kernel
    ~1000x slower (bench.py records both); torch 2.11's CPU build has no public kernel at all, so the
    private one is the fallback there.
    """
    if a8.is_cuda:
        return torch._scaled_mm(a8, b8, scale_a=inv_a, scale_b=inv_b, out_dtype=out_dtype, use_fast_accum=fast_accum)
    if _public_scaled_mm_on_cpu():
        tw = F.ScalingType.TensorWise
        return F.scaled_mm(a8, b8, inv_a.reshape(1), tw, inv_b.reshape(1), tw, output_dtype=out_dtype)
    return torch._scaled_mm(a8, b8, scale_a=inv_a, scale_b=inv_b, out_dtype=out_dtype)


@functools.lru_cache(maxsize=1)
def _public_scaled_mm_on_cpu() -> bool:
    """Does this torch build run torch.nn.functional.scaled_mm on the CPU? (probed once)"""
    if not (hasattr(F, "scaled_mm") and hasattr(F, "ScalingType")):
        return False
    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    one = torch.ones(1)
    try:
        tw = F.ScalingType.TensorWise
        F.scaled_mm(a, a.t(), one, tw, one, tw, output_dtype=torch.float32)
    except (NotImplementedError, RuntimeError):
        return False
    return True


def _gemm(a8: torch.Tensor, b8: torch.Tensor, inv_a: torch.Tensor, inv_b: torch.Tensor, engine: str,
          out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
    """(a8 / scale_a) @ (b8 / scale_b) with fp32 accumulation; a8 (M,K) row-major, b8 (K,N) column-major."""
    if engine == "native":
        return scaled_mm(a8, b8, inv_a, inv_b, out_dtype, fast_accum)
    with torch.autocast(a8.device.type, enabled=False):  # the widened FP8 values, multiplied in fp32
        return (a8 @ b8).mul_(inv_a * inv_b).to(out_dtype)


def _nan_guard(a: torch.Tensor) -> torch.Tensor:
    """1, or NaN when the tensor held a NaN (its amax is NaN): see formats.widen."""
    return torch.where(torch.isnan(a), torch.full_like(a, float("nan")), torch.ones_like(a))


def _record(a: torch.Tensor, s: torch.Tensor, x: torch.Tensor, q: torch.Tensor, fmt, counted: bool) -> torch.Tensor:
    """One tensor's record (RECORD,): amax, scale used, underflow and saturation fractions (nan: not counted)."""
    frac = fp8_fractions(x, q, s, fmt) if counted else torch.full((2,), float("nan"), device=a.device)
    return torch.cat([torch.stack([a, s]), frac])


class _Fp8LinearFn(torch.autograd.Function):
    """y = x W^T with FP8 operands. It reads this layer's scales and writes no state (module docstring):
    the forward returns its record beside y, the backward returns its own as the gradient of `stage`."""

    @staticmethod
    def forward(ctx, x, w, scale, stage, opts: Fp8Options):
        # x (M, K), w (N, K) -> y (M, N) and the record (2, RECORD) of input and weight. scale (3,): this
        # layer's scales (0 input, 1 weight, 2 grad_output); stage (RECORD,) only receives the backward's record.
        a_x, a_w = amax(x), amax(w)
        if opts.current:
            s_x, s_w = current_scale(a_x, E4M3, opts.margin), current_scale(a_w, E4M3, opts.margin)
        else:
            s_x, s_w = scale[0].clone(), scale[1].clone()
        x8, w8 = quantize(x, s_x, E4M3), quantize(w, s_w, E4M3)  # (M, K), (N, K) row-major
        rec = torch.stack([_record(a_x, s_x, x, x8, E4M3, opts.stats), _record(a_w, s_w, w, w8, E4M3, opts.stats)])
        inv_x, inv_w = s_x.reciprocal(), s_w.reciprocal()  # dequantization factors
        s_g = scale[2].clone()  # delayed scaling: the gradient's scale is this step's, read now
        if opts.engine == "emulated":
            # Widen once and keep the fp32 copies for backward: the values are exactly the FP8 ones
            # up to a power of two folded into the dequantization factor (so products and their fp32
            # accumulation are exact too). FP8 numerics, fp32 activation memory.
            (x8, mx), (w8, mw) = widen(x8), widen(w8)
            inv_x, inv_w = inv_x * mx * _nan_guard(a_x), inv_w * mw * _nan_guard(a_w)
            y = _gemm(x8, w8.t(), inv_x, inv_w, opts.engine, opts.out_dtype)
            ctx.save_for_backward(x8.t(), w8.t(), inv_x, inv_w, s_g)  # any layout will do for torch.mm
        else:
            y = _gemm(x8, w8.t(), inv_x, inv_w, opts.engine, opts.out_dtype, fast_accum=True)  # w8.t(): col-major
            # The backward's `b` operands, cast straight into column-major form: x8^T (K, M), w8^T (K, N).
            ctx.save_for_backward(x8.t().contiguous(), w8.t().contiguous(), inv_x, inv_w, s_g)
        ctx.opts, ctx.dtypes = opts, (x.dtype, w.dtype)
        ctx.mark_non_differentiable(rec)
        return y, rec

    @staticmethod
    def backward(ctx, dy, _rec):
        xT8, wT8, inv_x, inv_w, s_g = ctx.saved_tensors  # (K, M), (K, N)
        opts = ctx.opts
        a_g = amax(dy)
        if opts.current:
            s_g = current_scale(a_g, E5M2, opts.margin)
        g8 = quantize(dy, s_g, E5M2)  # (M, N) row-major
        rec_g = _record(a_g, s_g, dy, g8, E5M2, opts.stats)  # grad_output's record: `stage`'s "gradient"
        inv_g = s_g.reciprocal()
        gT8 = g8.t()
        if opts.engine == "emulated":
            g8, mg = widen(g8)  # E5M2 widens exactly, Inf and NaN included
            gT8, inv_g = g8.t(), inv_g * mg
        else:
            gT8 = gT8.contiguous()  # dW's `a` operand must be row-major: dy^T (N, M)
        # Gradients come out in the dtypes of x and of the (fp32 master) weight, as TE's dgrad/wgrad do.
        x_dtype, w_dtype = ctx.dtypes
        dx = _gemm(g8, wT8.t(), inv_g, inv_w, opts.engine, x_dtype)  # (M,N) @ (N,K) -> (M,K)
        dw = _gemm(gT8, xT8.t(), inv_g, inv_x, opts.engine, w_dtype)  # (N,M) @ (M,K) -> (N,K)
        return dx, dw, None, rec_g, None


class Fp8Linear(nn.Module):
    """nn.Linear with FP8 GEMMs (engine "native" or "emulated") and per-tensor delayed scaling.

    A new module owns a one-layer Fp8ScalingState (submodule `scaling`); share_scaling_state moves
    the state of all a model's FP8 linears into one. The views below read and write this layer's
    part of whichever state it uses.
    """

    def __init__(self, linear: nn.Linear, engine: str = "native", recipe: scaling.DelayedScaling | None = None,
                 scaling_mode: str = "delayed", round_output: torch.dtype | None = None):
        super().__init__()
        if engine not in ("native", "emulated"):
            raise ValueError(f"engine must be native or emulated, got {engine!r}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias  # the same Parameters: same init, same names
        self.engine, self.recipe = engine, recipe or scaling.DelayedScaling()
        self.current = scaling_mode == "current"
        self.round_output = round_output  # bf16/fp16 emulated on CPU: round y as autocast would
        self.collect_stats = False
        self.scaling = Fp8ScalingState(1, self.recipe, linear.weight.device)
        self.slot = 0
        self.bind()

    @property
    def state(self) -> Fp8ScalingState:
        shared = self.__dict__.get("_shared_state")
        return shared if shared is not None else self.scaling

    def bind(self) -> None:
        """This layer's views into its scaling state, made once: history (L, 3), scale (3,), last (3, 2),
        fractions (3, 2), one column or row per role, and its stage leaf. The forward hands the scale view and
        the stage to the FP8 function as tensors: a compiled block then sees inputs of one shape in every
        block and all of them share one graph (the int slot it used to pass made Dynamo compile each block
        apart, and past its 8 recompiles the rest of a run went eager: the native layer at 0.79x BF16 on the
        H200). The state's tensors are only ever written in place (update, land, load_state_dict), so the
        views stay valid; moving it rebinds them."""
        st, c = self.state, 3 * self.slot
        self.__dict__["_views"] = (st.history[:, c:c + 3], st.scale[c:c + 3], st.last[self.slot],
                                   st.fractions[self.slot], st.stages[self.slot])
        st.bound.add(self)

    # Views of this layer's columns: (L, 2) / (2,) forward (input, weight), (L, 1) / (1,) backward.
    @property
    def amax_history_fwd(self) -> torch.Tensor:
        return self._views[0][:, :2]

    @property
    def scale_fwd(self) -> torch.Tensor:
        return self._views[1][:2]

    @property
    def amax_history_bwd(self) -> torch.Tensor:
        return self._views[0][:, 2:]

    @property
    def scale_bwd(self) -> torch.Tensor:
        return self._views[1][2:]

    @property
    def last(self) -> torch.Tensor:
        """(3, 2): per role (input, weight, grad_output) the amax and the scale used last step."""
        return self._views[2]

    @property
    def fractions(self) -> torch.Tensor:
        """(3, 2): per role the underflow and saturation fractions when counted."""
        return self._views[3]

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"engine={self.engine}, scaling={'current' if self.current else 'delayed'}, slot={self.slot}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        out_dtype = x.dtype
        if torch.is_autocast_enabled(x.device.type):
            out_dtype = torch.get_autocast_dtype(x.device.type)
        opts = Fp8Options(self.engine, self.current, self.recipe.margin,
                          record=self.training and torch.is_grad_enabled(), stats=self.collect_stats,
                          out_dtype=out_dtype)
        history, scale, last, frac, stage = self._views
        y, rec = _Fp8LinearFn.apply(x.reshape(-1, self.in_features), self.weight, scale, stage, opts)
        if opts.record:  # a training step's record; an evaluation's forward leaves it alone
            history[0, :2].copy_(rec[:, 0])  # (2,) amaxes staged for the update
            last[:2].copy_(rec[:, :2])
            frac[:2].copy_(rec[:, 2:])
        y = y.reshape(*lead, self.out_features)  # (..., N)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        if self.round_output is not None:
            y = y.to(self.round_output).to(x.dtype)
        return y


def fp8_modules(model: nn.Module) -> list[tuple[str, Fp8Linear]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, Fp8Linear)]


@torch.no_grad()
def share_scaling_state(model: nn.Module, name: str = "fp8_scaling") -> Fp8ScalingState | None:
    """Move every Fp8Linear's scaling state into one Fp8ScalingState registered on `model` as `name`.

    Call after the model reached its device and before torch.compile / FSDP. The state is a
    submodule of the root, so it moves and checkpoints with the model; each layer keeps a plain
    reference and its slot. Returns None when the model has no FP8 linears.
    """
    mods = [m for _, m in fp8_modules(model)]
    if not mods:
        return None
    recipes = {m.recipe for m in mods}
    if len(recipes) > 1:
        raise ValueError(f"FP8 linears with different recipes cannot share one scaling state: {recipes}")
    shared = Fp8ScalingState(len(mods), mods[0].recipe, mods[0].weight.device)
    for i, m in enumerate(mods):
        old = m.state
        cols = slice(3 * i, 3 * i + 3)
        old_cols = slice(3 * m.slot, 3 * m.slot + 3)
        shared.history[:, cols].copy_(old.history[:, old_cols])
        shared.scale[cols].copy_(old.scale[old_cols])
        shared.last[i].copy_(old.last[m.slot])
        shared.fractions[i].copy_(old.fractions[m.slot])
        if "scaling" in m._modules:
            del m._modules["scaling"]
        m.__dict__["_shared_state"] = shared  # a plain reference: the root owns (and moves) the state
        m.slot = i
        m.bind()
    model.add_module(name, shared)
    return shared


def _states(modules: Iterable[Fp8Linear], delayed: bool = True) -> list[Fp8ScalingState]:
    """The distinct scaling states of these modules (usually one); `delayed`: only those of delayed scaling."""
    seen: dict[int, Fp8ScalingState] = {}
    for m in modules:
        if not (delayed and m.current):
            seen.setdefault(id(m.state), m.state)
    return list(seen.values())


@torch.no_grad()
def update_scales(modules: Iterable[Fp8Linear], group: dist.ProcessGroup | None = None) -> None:
    """After each backward: land every module's grad_output record, then turn the staged amaxes into next
    step's scales (delayed scaling)."""
    modules = list(modules)
    for st in _states(modules, delayed=False):
        st.land()
    for st in _states(modules):
        st.update(group)


@torch.no_grad()
def scrub_histories(modules: Iterable[Fp8Linear]) -> None:
    for st in _states(modules):
        st.scrub()
