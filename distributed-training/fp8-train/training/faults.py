"""Deterministic fault injection, for the demo and the tests: `--inject nan@120,spike@60,overflow@150`.

    nan@S       at step S, one activation (the first block's output, first position) becomes NaN:
                the loss and every gradient follow, as after a real overflow in a kernel.
    spike@S     at step S the backward sees the loss scaled by --spike-scale (1e3 by default): every
                gradient of that one batch is that much larger, a grad-norm spike (clipping still
                bounds the update).
    overflow@S  at step S the input of the first low-precision linear is multiplied by
                --overflow-scale (2^12): under delayed scaling it is cast with the scale of earlier
                steps, so it saturates at the FP8 max, and the next steps' scale collapses.

Each fault fires at its step only; a resumed run that replays step S injects it again, exactly as
the uninterrupted run did, which is what bit-identical resume requires.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

KINDS = ("nan", "spike", "overflow")


@dataclass(frozen=True)
class Fault:
    kind: str
    step: int


def parse(items: tuple[str, ...]) -> list[Fault]:
    faults = []
    for item in items:
        kind, _, at = item.partition("@")
        if kind not in KINDS or not at.isdigit():
            raise ValueError(f"--inject {item!r}: expected KIND@STEP with KIND one of {', '.join(KINDS)} "
                             "(e.g. nan@120)")
        faults.append(Fault(kind, int(at)))
    return faults


class Injector:
    """Hooks that fire the configured faults at their steps (call `arm(step)` before each step)."""

    def __init__(self, model: nn.Module, faults: list[Fault], low_modules: list[str], spike_scale: float = 1e3,
                 overflow_scale: float = 2.0 ** 12):
        self.faults = faults
        self.spike_scale, self.overflow_scale = spike_scale, overflow_scale
        self.armed: set[str] = set()
        self.handles = []
        if any(f.kind == "nan" for f in faults):
            self.handles.append(model.get_submodule("layers.0").register_forward_hook(self._nan))
        if any(f.kind == "overflow" for f in faults):
            if not low_modules:
                raise ValueError("--inject overflow@STEP pushes an FP8 tensor out of range; this run has none")
            self.handles.append(model.get_submodule(low_modules[0]).register_forward_pre_hook(self._overflow))

    def arm(self, step: int) -> list[str]:
        self.armed = {f.kind for f in self.faults if f.step == step}
        return sorted(self.armed)

    def loss_scale(self) -> float:
        return self.spike_scale if "spike" in self.armed else 1.0

    def _nan(self, module, args, out):
        if "nan" in self.armed and module.training:
            out = out.clone()
            out[:, 0] = float("nan")
            return out
        return None

    def _overflow(self, module, args):
        if "overflow" in self.armed and module.training:
            return (args[0] * self.overflow_scale,) + tuple(args[1:])
        return None

    def disarm(self) -> None:
        self.armed = set()

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

