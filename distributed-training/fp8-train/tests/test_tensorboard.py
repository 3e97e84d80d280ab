"""TensorBoard events: written during a CPU run, read back with TensorBoard's own EventAccumulator, and
equal to the CSV rows (as float32, TensorBoard's scalar type); alerts as text; never published."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from health import panels

EventAccumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator").EventAccumulator
RUN = "fp8-emulated-s0"


def _events(run_folder: Path) -> EventAccumulator:
    ea = EventAccumulator(str(run_folder / "tb" / RUN), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def _scalars(ea: EventAccumulator, tag: str) -> dict[int, float]:
    out = {}
    for e in ea.Scalars(tag):
        assert e.step not in out, f"{tag}: step {e.step} written twice"
        out[e.step] = e.value
    return out


def _assert_equal(ea: EventAccumulator, tag: str, csv: pd.DataFrame, column: str) -> None:
    """The tag holds exactly the CSV column's non-empty values, step for step (TensorBoard stores float32)."""
    want = csv.dropna(subset=[column]).set_index("step")[column]
    got = _scalars(ea, tag)
    assert sorted(got) == sorted(want.index), tag
    assert all(np.float32(want[s]) == np.float32(v) for s, v in got.items()), tag


def test_every_health_scalar_is_an_event_equal_to_its_csv_row(demo_runs):
    results = demo_runs[1]  # the faulted run: alerts, a NaN step, a rollback
    run_folder = results.parent.parent / "runs" / results.name
    ea = _events(run_folder)
    steps = pd.read_csv(results / "steps.csv")
    for s in panels.STEP_SERIES:
        if steps[s.column].notna().any():
            _assert_equal(ea, panels.tag(s), steps, s.column)
        else:  # e.g. mfu (GPU only): no event rather than a NaN one
            assert panels.tag(s) not in ea.Tags()["scalars"]
    train = _scalars(ea, "loss/train")  # every step but the NaN one (its alert text and nan_steps tell it)
    assert len(steps) == 28 and sorted(train) == [s for s in range(28) if s != 16]
    assert len(_scalars(ea, "loss/val")) == 4
    fp8 = pd.read_csv(results / "fp8.csv")
    for (module, role), g in fp8.groupby(["module", "role"]):
        for s in panels.FP8_SERIES:
            _assert_equal(ea, panels.tag(s, f"{module}.{role}"), g, s.column)
    layers = pd.read_csv(results / "layers.csv")
    for layer, g in layers.groupby("layer"):
        for s in panels.LAYER_SERIES:
            if g[s.column].notna().any():
                _assert_equal(ea, panels.tag(s, layer), g, s.column)
    events = pd.read_csv(results / "events.csv")
    text = {e.step: e.tensor_proto.string_val[0].decode() for e in ea.Tensors(f"{panels.ALERT_TAG}/text_summary")}
    assert sorted(text) == sorted(set(events["step"]))
    for r in events.itertuples():
        assert f"**{r.kind}**" in text[r.step]
    assert "rolled back" in text[16]
    assert not (results / "tb").exists()  # events stay in the run folder, never published into results/


def test_a_writer_resumed_within_the_same_second_is_read_last(tmp_path, monkeypatch):
    """Event files sort by name: <seconds>.<host>.<pid>.<n>. Within one second and one process, n = 9 then 10
    sorts the resumed file first ("10" < "9"); the log waits for the next second so purge_step applies."""
    from tensorboard.summary.writer import event_file_writer

    from health.tblog import TensorBoardLog
    monkeypatch.setattr(event_file_writer._global_uid, "_value", 9)
    first = TensorBoardLog(tmp_path, purge_step=0)
    for s in range(6):
        first.step(s, {"loss": float(s)})
    first.close()  # an interrupted run's events, on disk up to its checkpoint and beyond
    again = TensorBoardLog(tmp_path, purge_step=3)  # resumed from the checkpoint at step 3
    for s in range(3, 6):
        again.step(s, {"loss": 10.0 + s})
    again.close()
    ea = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    ea.Reload()
    assert [(e.step, e.value) for e in ea.Scalars("loss/train")] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 13.0),
                                                                      (4, 14.0), (5, 15.0)]
