"""Every sentence that compares or explains is picked by the data: change the committed sweeps (in memory) and
the sentence changes. In-process and without plots: the opening and the busbw caption from the rows alone."""

from pathlib import Path

import pandas as pd
import pytest

import findings
import report
from common.findings import block, screen_lines

RESULTS = Path(report.__file__).resolve().parent / "results"


@pytest.fixture(scope="module")
def committed():
    return report.load(RESULTS, required=True), report.load(RESULTS, "nccl_tests_*.csv", report.NCCL_TESTS)


def _opening(df, nt=None):
    lines = findings.opening(df, report.summary(df), nt if nt is not None else pd.DataFrame())
    block(lines, one_screen=True)  # fits one screen, whatever the data
    return {f.label: f.text for f in lines}


def _curve(df, run_nodes, coll):
    return (df["collective"] == coll) & (df["nnodes"] == run_nodes) & (df["world_size"] > 1)


def test_the_answer_quotes_measured_peaks_and_their_edge(committed):
    df, nt = committed
    before = _opening(df, nt)
    assert "all_reduce [busbw](../../docs/glossary.md#busbw) peaks at 0.871 GB/s at 8 MiB;" in before["Answer"]
    assert "0.336 GB/s at 4 MiB, the largest size swept" in before["Answer"] and "0 wrong" in before["Answer"]
    assert "0.461" not in " ".join(before.values())  # the 2-node fit's B lies beyond its sweep: never a finding

    flipped = df.copy()
    ar = _curve(flipped, 1, "all_reduce")
    flipped.loc[ar, ["busbw_GBps", "algbw_GBps"]] *= 2
    flipped.loc[ar, ["time_us", "time_min_us", "time_max_us"]] /= 2
    last = _curve(flipped, 2, "all_reduce") & (flipped["size_bytes"] == flipped["size_bytes"].where(
        _curve(flipped, 2, "all_reduce")).max())
    flipped.loc[last, "busbw_GBps"] /= 4  # the 2-node peak moves off its largest size
    flipped.loc[flipped.index[ar][0], "wrong"] = 3
    after = _opening(flipped)
    assert "peaks at 1.74 GB/s at 8 MiB" in after["Answer"] and "3 wrong" in after["Answer"]
    assert "the largest size swept" not in after["Answer"]


def test_the_meaning_uses_only_a_fit_the_sweep_reached(committed):
    df, _ = committed
    assert "Below about 2.91 MiB" in _opening(df)["What it means"]
    small = df[(df["size_bytes"] <= 2**14) | (df["world_size"] == 1)]  # no sweep gets near its bandwidth
    assert _opening(small)["What it means"].startswith("No all_reduce fit reached its bandwidth")


def test_the_busbw_caption_follows_each_curves_end(committed):
    df, _ = committed
    caption = findings.busbw_caption(df)
    assert "plateau: all_to_all on 1 node" in caption and "ending below their peak's spread: all_gather on 1 node" \
        in caption and "still rising at the largest size swept: broadcast on 1 node" in caption
    assert "rising to a plateau" not in caption

    flipped = df.copy()
    gather = _curve(flipped, 1, "all_gather")
    top = gather & (flipped["size_bytes"] == flipped.loc[gather, "size_bytes"].max())
    flipped.loc[top, "busbw_GBps"] *= 10  # all_gather's largest size becomes its peak
    bcast = _curve(flipped, 1, "broadcast")
    end = bcast & (flipped["size_bytes"] == flipped.loc[bcast, "size_bytes"].max())
    flipped.loc[end, ["busbw_GBps", "time_min_us", "time_max_us"]] = [0.01, 1e9, 1e9]  # broadcast ends far below
    after = findings.busbw_caption(flipped)
    assert "still rising at the largest size swept: all_gather on 1 node" in after
    assert "broadcast on 1 node" in after.split("ending below their peak's spread: ")[1].split(";")[0]


def test_the_opening_fits_one_screen_and_the_checks_refuse_a_long_one(committed):
    df, nt = committed
    lines = findings.opening(df, report.summary(df), nt)
    assert screen_lines([f"- **{f.label}.** {f.text}" for f in lines]) <= 8
    with pytest.raises(ValueError, match="fit one screen"):
        block(lines + [lines[0]] * 3, one_screen=True)
