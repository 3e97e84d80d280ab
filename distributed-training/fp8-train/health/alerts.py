"""Alerts that catch instability before it ruins a run: pure functions of the metric series.

Each detector sees one value per step (or per evaluation), keeps a bounded window, and returns an
Alert saying what it saw, at which step, against which threshold, and what it means:

    grad_spike    grad norm > mean + k*sigma of the last `window` steps (OLMo-core
                  StabilityMonitorCallback: k = 6, window 128) or > `factor` x the running max
                  (Megatron check_for_large_grads / SPIKY_LOSS_FACTOR: 10x). Active after `warmup`
                  steps; a flagged value is kept out of the statistics, so one spike does not raise
                  the bar for the next.
    plateau       no relative improvement of the validation loss by more than `threshold` for
                  `patience` evaluations (torch ReduceLROnPlateau's criterion: not better than
                  best * (1 - threshold)) while the grad norm is not decreasing (mean since the last
                  evaluation >= mean when the best loss was seen): learning has saturated.
    scale_drop /  an FP8 tensor's scale fell below 1/`factor` of its max (rose above `factor` x its
    scale_rise    min) over the last `window` steps (after `warmup` steps: delayed scaling starts
                  every scale at 1; for E5M2 tensors the factor is scaled to the same fraction of
                  E5M2's wider dynamic range; block formats are exempt, their scales are per block):
                  an amax jumped (overflow risk now, and under
                  delayed scaling the low scale stays for the history window: underflow of everything
                  else) or collapsed (values heading into the underflow range).
    nonfinite     loss or grad norm is NaN/Inf this step.

Detector state is plain lists and floats (state_dict / load_state_dict), saved in checkpoints
so a resumed run raises exactly the alerts an uninterrupted one would.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Thresholds:
    spike_sigma: float = 6.0
    spike_window: int = 128
    spike_factor: float = 10.0
    warmup: int = 20
    plateau_patience: int = 5
    plateau_threshold: float = 1e-3
    scale_factor: float = 8.0
    scale_window: int = 16

    def __post_init__(self):
        if min(self.spike_sigma, self.spike_factor - 1, self.scale_factor - 1, self.plateau_threshold) <= 0:
            raise ValueError("alert thresholds must be positive (and factors > 1)")
        if min(self.spike_window, self.scale_window, self.plateau_patience) < 2 or self.warmup < 0:
            raise ValueError("alert windows and patience must be >= 2, warmup >= 0")


@dataclass
class Alert:
    step: int
    kind: str
    severity: str  # "warning" | "critical"
    metric: str
    value: float
    threshold: float
    message: str
    action: str = ""

    def row(self) -> dict:
        return asdict(self)


class SpikeDetector:
    def __init__(self, t: Thresholds, metric: str = "grad_norm"):
        self.t, self.metric = t, metric
        self.window: deque[float] = deque(maxlen=t.spike_window)
        self.running_max = 0.0
        self.seen = 0

    def observe(self, step: int, value: float) -> Alert | None:
        if not math.isfinite(value):
            return None  # the nonfinite check reports these
        alert = None
        if self.seen >= self.t.warmup and len(self.window) >= 2:
            n = len(self.window)
            mean = sum(self.window) / n
            std = math.sqrt(sum((v - mean) ** 2 for v in self.window) / (n - 1))
            bar = mean + self.t.spike_sigma * std
            big = self.t.spike_factor * self.running_max
            if value > bar or value > big:
                why = (f"> mean + {self.t.spike_sigma:g} sigma of the last {n} steps ({bar:.3g})" if value > bar
                       else f"> {self.t.spike_factor:g}x the running max ({big:.3g})")
                alert = Alert(step, "grad_spike", "warning", self.metric, value, min(bar, big),
                              f"{self.metric} {value:.3g} {why}: one batch pushed the weights much harder than "
                              "usual (bad data, an outlier activation, or the start of divergence)")
        self.seen += 1
        if alert is None:
            self.window.append(value)
            self.running_max = max(self.running_max, value)
        return alert

    def state_dict(self) -> dict:
        return {"window": list(self.window), "running_max": self.running_max, "seen": self.seen}

    def load_state_dict(self, s: dict) -> None:
        self.window = deque(s["window"], maxlen=self.t.spike_window)
        self.running_max, self.seen = s["running_max"], s["seen"]


class PlateauDetector:
    def __init__(self, t: Thresholds):
        self.t = t
        self.best = math.inf
        self.best_grad = math.inf
        self.bad = 0

    def observe(self, step: int, val_loss: float, grad_norm_mean: float) -> Alert | None:
        if not math.isfinite(val_loss):
            return None
        if val_loss < self.best * (1 - self.t.plateau_threshold):
            self.best, self.best_grad, self.bad = val_loss, grad_norm_mean, 0
            return None
        self.bad += 1
        if self.bad >= self.t.plateau_patience and grad_norm_mean >= self.best_grad:
            self.bad = 0  # report once per plateau
            return Alert(step, "plateau", "warning", "val_loss", val_loss, self.best * (1 - self.t.plateau_threshold),
                         f"val loss {val_loss:.4f} has not improved by {self.t.plateau_threshold:.0e} (relative) on "
                         f"the best {self.best:.4f} for {self.t.plateau_patience} evaluations while the grad norm is "
                         f"not falling ({grad_norm_mean:.3g} vs {self.best_grad:.3g}): learning has saturated "
                         "(learning rate too high or too low, or the model is at capacity)")
        return None

    def state_dict(self) -> dict:
        return {"best": self.best, "best_grad": self.best_grad, "bad": self.bad}

    def load_state_dict(self, s: dict) -> None:
        self.best, self.best_grad, self.bad = s["best"], s["best_grad"], s["bad"]


RANGE_BINADES = {"e4m3": 17.8, "e5m2": 31.8}  # log2(max / min subnormal), fp8-anchors.md section 4.1


class ScaleJumpDetector:
    def __init__(self, t: Thresholds):
        self.t = t
        self.history: dict[str, deque[float]] = {}
        self.quiet_until: dict[str, int] = {}
        self.seen = 0

    def observe(self, step: int, scales: dict[str, float], formats: dict[str, str] | None = None) -> list[Alert]:
        alerts = []
        self.seen += 1
        if self.seen <= self.t.warmup:  # the first steps run at the initial scale 1: not a signal
            return alerts
        for key, s in scales.items():
            fmt = (formats or {}).get(key, "e4m3")
            if fmt not in RANGE_BINADES:
                continue  # block formats (MX, NVFP4) scale each block: a tensor-level jump is not a hazard
            h = self.history.setdefault(key, deque(maxlen=self.t.scale_window))
            if len(h) == h.maxlen and math.isfinite(s) and step >= self.quiet_until.get(key, -1):
                hi, lo = max(h), min(h)
                # The factor is for E4M3; a wider format tolerates the same fraction of its dynamic range
                # (E5M2: 31.8 binades vs 17.8, so 8x becomes ~41x): gradients' amax legitimately moves more.
                binades = RANGE_BINADES[fmt]
                f = self.t.scale_factor ** (binades / RANGE_BINADES["e4m3"])
                if s < hi / f:
                    alerts.append(Alert(step, "scale_drop", "warning", f"scale {key}", s, hi / f,
                                        f"FP8 scale of {key} fell to {s:.3g}, below 1/{f:.3g} of its {len(h)}-step max "
                                        f"{hi:.3g}: its amax jumped (an outlier); values beyond the old range "
                                        "saturated, "
                                        "and while the outlier stays in the amax history small values underflow"))
                elif s > lo * f:
                    alerts.append(Alert(step, "scale_rise", "warning", f"scale {key}", s, lo * f,
                                        f"FP8 scale of {key} rose to {s:.3g}, above {f:.3g}x its {len(h)}-step min "
                                        f"{lo:.3g}: its amax collapsed, values are heading for the underflow range"))
                if alerts and alerts[-1].metric == f"scale {key}":
                    self.quiet_until[key] = step + self.t.scale_window  # once per window per tensor
            if math.isfinite(s):
                h.append(s)
        return alerts

    def state_dict(self) -> dict:
        return {"history": {k: list(v) for k, v in self.history.items()}, "quiet_until": dict(self.quiet_until),
                "seen": self.seen}

    def load_state_dict(self, s: dict) -> None:
        self.history = {k: deque(v, maxlen=self.t.scale_window) for k, v in s["history"].items()}
        self.quiet_until, self.seen = dict(s["quiet_until"]), s["seen"]


def nonfinite(step: int, loss: float, grad_norm: float) -> Alert | None:
    bad = [f"{n} = {v}" for n, v in (("loss", loss), ("grad norm", grad_norm)) if not math.isfinite(v)]
    if not bad:
        return None
    return Alert(step, "nonfinite", "critical", "loss/grad_norm", loss if not math.isfinite(loss) else grad_norm,
                 math.inf, f"{' and '.join(bad)}: an overflow or a NaN reached the loss or the gradients; an "
                 "optimizer step now would write it into every weight")


class AlertEngine:
    """All detectors of one run, fed once per step (and once per evaluation)."""

    def __init__(self, t: Thresholds):
        self.t = t
        self.spike = SpikeDetector(t)
        self.plateau = PlateauDetector(t)
        self.scales = ScaleJumpDetector(t)
        self.grad_since_eval: list[float] = []

    def step(self, step: int, loss: float, grad_norm: float, scales: dict[str, float],
             formats: dict[str, str] | None = None) -> list[Alert]:
        out = [a for a in (nonfinite(step, loss, grad_norm), self.spike.observe(step, grad_norm)) if a]
        out += self.scales.observe(step, scales, formats)
        if math.isfinite(grad_norm):
            self.grad_since_eval.append(grad_norm)
        return out

    def evaluation(self, step: int, val_loss: float) -> list[Alert]:
        g = self.grad_since_eval
        mean = sum(g) / len(g) if g else math.nan
        self.grad_since_eval = []
        a = self.plateau.observe(step, val_loss, mean)
        return [a] if a else []

    def state_dict(self) -> dict:
        return {"spike": self.spike.state_dict(), "plateau": self.plateau.state_dict(),
                "scales": self.scales.state_dict(), "grad_since_eval": list(self.grad_since_eval)}

    def load_state_dict(self, s: dict) -> None:
        self.spike.load_state_dict(s["spike"])
        self.plateau.load_state_dict(s["plateau"])
        self.scales.load_state_dict(s["scales"])
        self.grad_since_eval = list(s["grad_since_eval"])
