"""Every sentence that compares or explains is picked by the data: change the committed CSVs (in memory) and the
sentence changes. In-process, without plots: the opening and the plot caption from the rows alone."""

import pandas as pd
import pytest

import findings
import report
from common.csvread import read_table
from common.findings import block

RESULTS = report.LAB / "results"


@pytest.fixture(scope="module")
def committed():
    benches = {p.stem.removeprefix("bench_"): read_table(p, report.BENCH) for p in sorted(RESULTS.glob("bench_*.csv"))}
    corrs = {p.stem.removeprefix("correctness_"): read_table(p, report.CORRECTNESS)
             for p in sorted(RESULTS.glob("correctness_*.csv"))}
    return benches, corrs


def _opening(benches, corrs):
    lines = findings.opening(benches, corrs)
    block(lines, one_screen=True)  # fits one screen, whatever the data
    return {f.label: f.text for f in lines}


def test_correctness_and_bytes_follow_the_csvs(committed):
    benches, corrs = committed
    before = _opening(benches, corrs)
    assert before["Answer"].startswith("Yes: 16 of 16 ring checks (N = 2 and 4)")
    assert "ours sends 0.23 and keeps 0.63 of PyTorch's bytes" in before["Bytes"]

    corr = corrs["cpu_ws4"].copy()
    first = corr.index[corr["impl"] == "ours"][0]
    corr.loc[first, ["pass", "bytes_ok"]] = False  # one of ours fails, and sends other bytes than the formula
    bench = benches["cpu_ws4"].copy()
    bench.loc[bench["impl"] == "ours", "bwd_sent_bytes"] *= 3
    after = _opening({**benches, "cpu_ws4": bench}, {"cpu_ws4": corr})
    assert after["Answer"].startswith("Not everywhere: 15 of 16 ring checks at N = 2 and 4 passed and 15 of 16")
    assert "ours sends 0.53 and keeps 0.63" in after["Bytes"]


def test_time_is_a_difference_only_outside_the_spread_and_never_on_shared_cores(committed):
    benches, corrs = committed
    before = _opening(benches, corrs)["Time"]
    assert "within the iterations' [spread]" in before and "at s = 8192 and 32768, +1.6% to +2.0% at 16384" in before
    assert "not compared" in before and "0.82" not in before and "0.60" not in before  # CPU ratios are no finding

    gpu = benches["h200_ws1"].copy()
    ours = gpu["impl"] == "ours"
    gpu.loc[ours & (gpu["seq_len"] == 16384), ["time_ms", "time_min_ms", "time_max_ms"]] = [26.7, 26.5, 26.9]
    gpu.loc[ours & (gpu["seq_len"] == 8192), ["time_ms", "time_min_ms", "time_max_ms"]] = [12.0, 11.9, 12.1]
    after = _opening({**benches, "h200_ws1": gpu}, corrs)["Time"]
    assert "within the iterations' [spread](../../docs/glossary.md#spread) at s = 16384 and 32768" in after
    assert "+43.7% to +44.6% at 8192" in after

    alone = _opening({"h200_ws1": benches["h200_ws1"]}, corrs)["Time"]  # no CPU file: nothing said about one
    assert "not compared" not in alone


def test_the_plot_caption_says_when_pytorchs_rotations_are_one_line(committed):
    benches, _ = committed
    b = benches["cpu_ws4"]
    caption = findings.plot_caption(b, "cpu_ws4")
    assert "send the same bytes, one line" in caption and "the milliseconds measure the scheduler" in caption
    apart = b.copy()
    apart.loc[apart["impl"] == "torch-alltoall", "fwd_sent_bytes"] += 1
    assert "one line" not in findings.plot_caption(apart, "cpu_ws4")
    assert "scheduler" not in findings.plot_caption(apart.assign(world_size=2), "cpu_ws4")  # 2 ranks on 2 cores
