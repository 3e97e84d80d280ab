"""TensorBoard events of a run, written during the run beside its CSVs.

Every scalar the CSV rows hold for the health panels (panels.py: loss, validation loss, gradient
and parameter norms, update ratio, lr and loss scale, throughput, memory, per-layer norms and
activation ranges, every FP8 tensor's scale and amax) goes to TensorBoard under the panel's tag
group ("loss/train", "grad/total", "scale/layers.0.attn.wq.input", ...), and every alert as text
("alerts"). The values are the CSV rows' own (TensorBoard stores them as float32); a non-finite
value is left out (TensorBoard's charts cannot draw it; the step's alert and nan_steps say it).

    tensorboard --logdir distributed-training/fp8-train/runs      # every run folder's tb/<run>/

Where: `<run folder>/tb/<run>/`, i.e. fp8-train/runs/<preset>/tb/<run>/. Event files are binary,
grow with the run and carry the host name in their file name, so they stay in the run folder
(git-ignored, never published into results/: common.runs leaves tb/ out) and the report reads the
CSVs only. A fresh run of the same preset replaces its run folder, events included.

Resume: the writer opens with purge_step = the first step this process writes (the checkpoint's
step), so TensorBoard drops what an interrupted process wrote from that step on, and the events
are flushed whenever a checkpoint is written: no step is shown twice, none is lost.

All scalars of a step go into one event (one Summary with many values): ~3 us per scalar, against
~160 us for one SummaryWriter.add_scalar call each. Without the tensorboard package the run goes
on without events and says so once.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Iterable

from health.panels import ALERT_TAG, FP8_SERIES, LAYER_SERIES, STEP_SERIES, tag


def _after_existing_files(log_dir: Path) -> None:
    """Wait (under a second) until a new event file sorts after the folder's others.

    TensorBoard reads a run's files in name order, events.out.tfevents.<unix seconds>.<host>.<pid>.<n>, and
    applies a resumed writer's purge_step when it reaches that writer's file. Two writers of one process
    started within the same second tie on the seconds and then compare <n> as text ("10" < "9"), so the
    resumed file could be read first and its events purged by the older ones."""
    stamps = [int(p.name.split(".")[3]) for p in log_dir.glob("events.out.tfevents.*")
              if len(p.name.split(".")) > 3 and p.name.split(".")[3].isdigit()]
    if stamps and max(stamps) >= int(time.time()):
        time.sleep(max(stamps) + 1 - time.time())


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class TensorBoardLog:
    def __init__(self, log_dir: Path, purge_step: int):
        try:
            from tensorboard.compat.proto.summary_pb2 import Summary
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            self.writer, self.note = None, f"no TensorBoard events ({e}); `pip install tensorboard` adds them"
            return
        self._summary = Summary
        _after_existing_files(log_dir)
        self.writer = SummaryWriter(str(log_dir), purge_step=purge_step, flush_secs=30)
        self.note = ""
        self.log_dir = log_dir

    def _scalars(self, step: int, values: Iterable[tuple[str, Any]]) -> None:
        vals = [self._summary.Value(tag=t, simple_value=float(v)) for t, v in values if _finite(v)]
        if self.writer is not None and vals:
            self.writer.file_writer.add_summary(self._summary(value=vals), step)

    def step(self, step: int, row: dict[str, Any]) -> None:
        """One steps.csv row."""
        self._scalars(step, ((tag(s), row.get(s.column)) for s in STEP_SERIES))

    def layers(self, step: int, stats: dict[str, dict[str, float]]) -> None:
        """The per-layer values of one layers.csv step: {layer: {column: value}}."""
        self._scalars(step, ((tag(s, layer), vals.get(s.column)) for layer, vals in stats.items()
                             for s in LAYER_SERIES))

    def fp8(self, step: int, rows: list[dict[str, Any]]) -> None:
        """The fp8.csv rows of one step (module, role, amax, scale, ...)."""
        self._scalars(step, ((tag(s, f"{r['module']}.{r['role']}"), r.get(s.column)) for r in rows
                             for s in FP8_SERIES))

    def alerts(self, step: int, alerts: list) -> None:
        """The step's alerts as one markdown text event (kind, severity, what it saw, the action)."""
        if self.writer is None or not alerts:
            return
        lines = [f"- **{a.kind}** ({a.severity}): {a.message}" + (f" -> {a.action}" if a.action else "")
                 for a in alerts]
        self.writer.add_text(ALERT_TAG, "\n".join(lines), step)

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
