"""Amax probes for the backends whose scales are not kept as state the lab can read.

torchao, TransformerEngine's current scaling and the block formats scale dynamically: hooks on the mapped
modules record each tensor's amax and the scale it implies (prepare._probe attaches them; fp8_state.py
reads their `last` buffers like Fp8Linear's).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from precision.formats import E4M3, amax


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
      gain or lose hooks between steps (see health.metrics.ActivationProbe): there the input hook is traced
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
