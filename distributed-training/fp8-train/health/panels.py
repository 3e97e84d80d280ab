"""The training-health panels, defined once for every place that draws them.

Three readers, one table: the HTML dashboard (dashboard.py embeds PANELS and STYLE as JSON, and
dashboard.js takes each panel's title, axis label and scale from it), the PNG copy in REPORT.md
(reporting/health_report.py draws the panels marked `png`), and the TensorBoard events (tblog.py: a panel
is a tag group, "p-grad" -> "grad/...", so TensorBoard shows the same panels with the same series).

SERIES says which CSV column feeds which panel under which name: steps.csv columns per step,
layers.csv columns per layer, fp8.csv columns per tensor. A column added here reaches the
dashboard's data and TensorBoard at once.
"""

from __future__ import annotations

from typing import NamedTuple


class Panel(NamedTuple):
    id: str  # HTML element id; without "p-", the TensorBoard tag group
    title: str
    ylabel: str
    log: bool  # log y-axis
    png: bool  # in the report's PNG copy of the dashboard (the six that tell a run's health story)

    @property
    def group(self) -> str:
        return self.id.removeprefix("p-")


PANELS = (
    Panel("p-loss", "Loss (train, and validation dots)", "loss", False, True),
    Panel("p-grad", "Gradient norm (before clipping); markers: alerts", "||g||", True, True),
    Panel("p-param", "Parameter norm", "||theta||", False, False),
    Panel("p-update", "Update / parameter ratio (total; thin: per layer)", "||dtheta|| / ||theta||", True, True),
    Panel("p-scale", "FP8 scale per tensor (colour: role)", "scale (fp8_max / amax)", True, True),
    Panel("p-amax", "FP8 amax per tensor (colour: role)", "amax = max |x|", True, False),
    Panel("p-act", "Activation ranges (amax per block output)", "max |activation|", True, True),
    Panel("p-speed", "Throughput", "tokens/s", False, False),
    Panel("p-mem", "Memory (MiB)", "MiB", True, False),
    Panel("p-lr", "Learning rate (fp16 runs: GradScaler loss scale, dashed)", "lr / loss scale", True, False),
    Panel("p-events", "Alerts and recovery actions", "", False, True),
)
BY_ID = {p.id: p for p in PANELS}


class Series(NamedTuple):
    panel: str  # Panel.id
    column: str  # the CSV column
    name: str  # its name in the panel: TensorBoard tag "<group>/<name>" (per-layer and per-tensor: the key)


STEP_SERIES = (  # steps.csv, one value per step
    Series("p-loss", "loss", "train"), Series("p-loss", "val_loss", "val"),
    Series("p-grad", "grad_norm", "total"), Series("p-grad", "grad_snr", "snr"),
    Series("p-param", "param_norm", "total"), Series("p-update", "update_ratio", "total"),
    Series("p-speed", "tokens_per_s", "tokens_per_s"), Series("p-speed", "step_time_s", "step_time_s"),
    Series("p-speed", "mfu", "mfu"),
    *(Series("p-mem", c, c.removesuffix("_MiB"))
      for c in ("peak_mem_MiB", "alloc_MiB", "reserved_MiB", "rss_peak_MiB", "saved_act_MiB")),
    Series("p-lr", "lr", "lr"), Series("p-lr", "loss_scale", "loss_scale"),
    Series("p-events", "nan_steps", "nan_steps"), Series("p-events", "skipped_steps", "skipped_steps"),
)
LAYER_SERIES = (  # layers.csv, one value per layer group every --health-every steps; name = the layer
    Series("p-grad", "grad_norm", ""), Series("p-param", "param_norm", ""), Series("p-update", "update_ratio", ""),
    Series("p-act", "act_amax", ""),
)
FP8_SERIES = (  # fp8.csv, one value per FP8 tensor every --stats-every steps; name = "<module>.<role>"
    Series("p-scale", "scale", ""), Series("p-amax", "amax", ""),
)
ALERT_TAG = "alerts"  # TensorBoard text: every alert of a step, what it saw and the action taken

# Colours and marker shapes, the same in the HTML and the PNGs (shape names: dashboard.js draws them,
# MPL_MARKERS maps them for matplotlib).
ROLE_COLORS = {"input": "#1f77b4", "weight": "#2ca02c", "grad_output": "#d62728"}
EVENT_STYLE = {"grad_spike": ("#ff7f0e", "triangle"), "nonfinite": ("#d62728", "cross"),
               "plateau": ("#9467bd", "square"), "scale_drop": ("#8c564b", "down"),
               "scale_rise": ("#17becf", "up"), "loss_scale_backoff": ("#7f7f7f", "circle")}
MPL_MARKERS = {"triangle": "^", "cross": "X", "square": "s", "down": "v", "up": "^", "circle": "o"}


def tag(series: Series, key: str = "") -> str:
    """The TensorBoard tag of a series (key: the layer or tensor of a per-layer/per-tensor series)."""
    return f"{BY_ID[series.panel].group}/{key or series.name}"


def as_json() -> dict:
    """What the HTML page embeds: panels by id, series columns, colours and markers."""
    return {"panels": {p.id: p._asdict() for p in PANELS},
            "steps": [s.column for s in STEP_SERIES], "roles": ROLE_COLORS,
            "events": {k: list(v) for k, v in EVENT_STYLE.items()}}
