"""Every sentence that compares or explains is picked by the data: change the committed CSVs (in memory) and the
sentence changes. In-process, without plots: the opening and the captions from the rows alone."""

import copy
from pathlib import Path

import pytest

import findings
import report
from common.findings import block
from planner.evidence import against_pytorch as ap

RESULTS = Path(report.__file__).resolve().parent / "results"


@pytest.fixture(scope="module")
def committed():
    runs = [r for p in sorted(RESULTS.glob("runs_*.csv")) for r in ap.read(p)]
    device_gb, gpu = report.device(RESULTS)
    return runs, ap.read(RESULTS / "at_scale.csv"), device_gb, gpu


def _opening(runs, rows, device_gb, gpu):
    lines = findings.opening(runs, rows, device_gb, gpu)
    block(lines, one_screen=True)  # fits one screen, whatever the data
    return {f.label: f.text for f in lines}


def _busiest(rows, study):
    return max((r for r in rows if r["study"] == study), key=ap.measured_peak)


def test_parity_and_fit_follow_the_csvs(committed):
    runs, rows, device_gb, gpu = committed
    before = _opening(runs, rows, device_gb, gpu)
    assert before["Answer"].startswith("Yes on Intel Xeon (2 cores): 12 runs of 3 layouts")
    assert "all fit an H100 SXM 80GB; the [pytorch stack]" in before["Memory"] and "within +0% to +4%" in before[
        "Memory"]

    runs = copy.deepcopy(runs)
    for r in runs:
        if r["tp"] == "2":
            r["loss_last"] = str(float(r["loss_last"]) + 0.01)  # the 3D runs no longer end where one process does
    rows = copy.deepcopy(rows)
    big = _busiest(rows, "70B@512")
    big["peak_bytes"] = str(float(big["peak_bytes"]) + 81e9 - ap.measured_peak(big))  # 81 GB: no fit
    after = _opening(runs, rows, device_gb, gpu)
    assert after["Answer"].startswith("Not exactly on Intel Xeon (2 cores)")
    assert "81.0 (70B@512) and 43.5 (405B@4096): 70B@512 does not fit an H100 SXM 80GB" in after["Memory"]
    assert "all fit" not in after["Memory"]


def test_the_papers_count_is_judged_by_fit_and_distance(committed):
    runs, rows, device_gb, gpu = committed
    before = _opening(runs, rows, device_gb, gpu)["Papers"]
    assert "within -23% to -5%: the same fits, farther off" in before  # not "would not have seen it"

    near = copy.deepcopy(rows)
    for r in near:  # the megatron stack exactly as close as the pytorch stack: no "farther off"
        r["megatron_total_bytes"] = r["planner_total_bytes"]
    assert _opening(runs, near, device_gb, gpu)["Papers"].endswith("the same fits.")

    flip = copy.deepcopy(rows)
    big = _busiest(flip, "70B@512")
    big["megatron_total_bytes"] = str(90e9)  # the papers' count would call 70B@512 too big for 80 GB
    assert "misjudges 70B@512's fit" in _opening(runs, flip, device_gb, gpu)["Papers"]


def test_captions_follow_the_rows(committed):
    _, rows, device_gb, gpu = committed
    assert findings.peak_caption(rows, device_gb, gpu).endswith("every PyTorch bar lies below the line.")
    assert findings.peak_caption(rows, 60, gpu).endswith("60 GB (dashed): above it, not fitting as run: 70B@512.")
    assert "the widest gap is TP bus bytes / step of 405B@4096 (first stage), +11.6%" in findings.at_scale_caption(rows)
    close = copy.deepcopy(rows)
    for r in close:
        for q in ("tp", "pp", "dp"):
            r[f"planner_{q}_bus_bytes"] = r[f"{q}_bus_bytes"]
    assert "the planner is within 1% of PyTorch in every bar" in findings.at_scale_caption(close)
    acts = report.read(RESULTS / "activations_cpu.csv")
    caption = findings.activations_caption(acts, "activations_cpu")
    assert "equal (within 1%) at t = 1 none, t = 1 full and t = 2 full" in caption
    acts[1]["measured_over_planner"] = "1.0"
    assert "equal (within 1%) at t = 1 none, t = 1 op" in findings.activations_caption(acts, "a")
