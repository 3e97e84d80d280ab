"""Delayed scaling: TransformerEngine's per-tensor scale update, reimplemented to be read and tested.

TransformerEngine's DelayedScaling recipe (transformer_engine/common/recipe/__init__.py; the
Python path `_default_get_amax_and_update_history` / `_default_sf_compute` in
transformer_engine/pytorch/quantization.py and the fused kernel in delayed_scaling.cu; summary in
../shared/reference/fp8-anchors.md section 1.4) keeps, per FP8 tensor, a window of recent amaxes:

    history: (history_len, n_tensors); row 0 is the staging slot for the current step's amax.
    Each step, after the tensors were cast with the *current* scales:
        amax  = max over the history window (algo "max") or history[0] ("most_recent")
        scale = (fp8_max / amax) / 2^margin
                kept unchanged where amax == 0 or amax is Inf/NaN;
                fp32 max where the division overflows (a tiny amax; TE PR #786)
        history = roll(history, -1) with row 0 zeroed: the newest amax moves to the last row,
                  the oldest leaves the window.

So the scale used at step t comes from the amaxes of steps < t: the cast never waits for a
reduction over the tensor it casts (the point of "delayed"), at the price of saturating when a
value jumps above the window's max. Initial state: scale 1, history 0 (step 1 runs at scale 1).

Consequences worth seeing in a dashboard: with "max" over a long window, one outlier depresses
the scale (underflow risk) until it leaves the window; a NaN amax freezes the scale for the
whole window, which is why NaN recovery scrubs non-finite entries (`scrub_history`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

FP32_MAX = torch.finfo(torch.float32).max


@dataclass(frozen=True)
class DelayedScaling:
    """The recipe knobs TransformerEngine exposes (its defaults: margin 0, history 1024, "max").

    The lab defaults to a 16-step window, as TE's own getting-started benchmark does: 1024 steps is
    longer than a short lab run, and TE's maintainers call 16-32 the faster-adapting choice (TE #1169).
    """

    margin: int = 0
    history_len: int = 16
    algo: Literal["max", "most_recent"] = "max"

    def __post_init__(self):
        if self.history_len < 1:
            raise ValueError(f"--amax-history must be >= 1, got {self.history_len}")
        if self.margin < 0:
            raise ValueError(f"--fp8-margin must be >= 0, got {self.margin}")
        if self.algo not in ("max", "most_recent"):
            raise ValueError(f"--amax-algo must be max or most_recent, got {self.algo!r}")


def scale_from_amax(amax: torch.Tensor, fp8_max: torch.Tensor | float, margin: int,
                    prev_scale: torch.Tensor) -> torch.Tensor:
    """TE's scale rule, element-wise over tensors: (fp8_max / amax) / 2^margin with TE's edge cases."""
    sf = (fp8_max / amax) / (2.0 ** margin)
    sf = torch.where(amax > 0.0, sf, prev_scale)  # also False for NaN amax
    sf = torch.where(torch.isfinite(amax), sf, prev_scale)
    return torch.where(torch.isinf(sf), torch.full_like(sf, FP32_MAX), sf)


@torch.no_grad()
def update(history: torch.Tensor, scale: torch.Tensor, fp8_max: torch.Tensor | float,
           recipe: DelayedScaling) -> None:
    """One delayed-scaling update, in place: history (L, n) and scale (n,) of n tensors."""
    window_amax = history.amax(dim=0) if recipe.algo == "max" else history[0].clone()
    # torch.amax propagates NaN, as TE's torch.max path does: a NaN in the window keeps the scale.
    scale.copy_(scale_from_amax(window_amax, fp8_max, recipe.margin, scale))
    if history.shape[0] > 1:
        history.copy_(torch.roll(history, -1, dims=0))
    history[0].zero_()


@torch.no_grad()
def scrub_history(history: torch.Tensor) -> None:
    """Replace non-finite amaxes by 0 ("no information"), so one bad step does not freeze the scale."""
    history.copy_(torch.where(torch.isfinite(history), history, torch.zeros_like(history)))
