"""Every sentence that compares or explains is picked by the data: change the committed CSVs (in memory) and the
sentence changes. In-process, without plots: the opening and the bf16 section from the rows alone."""

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


def test_the_byte_winner_and_correctness_follow_the_csvs(committed):
    benches, corrs = committed
    before = _opening(benches, corrs)
    assert "MHA 8/8 Ulysses (ring = all-gather 1.50x/3.00x at N = 2/4)" in before["Answer"]
    assert "GQA 8/2 ring = all-gather (Ulysses 1.67x at N = 2, cannot split 2 K/V heads 4 ways)" in before["Answer"]
    n = sum(int(c["impl"].isin(findings.OURS).sum()) for c in corrs.values())
    assert before["Correct"].startswith("Ring, all-gather and Ulysses match one device at N = 2 and 4 (causal and "
                                        "document masks") and f"in {n} of {n} checks" in before["Correct"]

    bench = benches["cpu_ws4"].copy()
    bench.loc[bench["impl"] == "ulysses", "bwd_sent_bytes"] *= 9  # Ulysses now sends most: the ring wins MHA too
    corr = corrs["cpu_ws4"].copy()
    corr.loc[corr.index[corr["impl"] == "ulysses"][0], ["pass", "bytes_ok"]] = False
    after = _opening({**benches, "cpu_ws4": bench}, {**corrs, "cpu_ws4": corr})
    assert "MHA 8/8 ring = all-gather (Ulysses" in after["Answer"]
    assert after["Correct"].startswith(f"Not everywhere: {n - 1} of {n} checks")


def test_time_is_a_difference_only_outside_the_spread_and_never_on_shared_cores(committed):
    benches, corrs = committed
    before = _opening(benches, corrs)["Time"]
    assert "N = 2, load" in before and "4 ranks on 2 cores not compared" in before and "GPUs at N > 1" in before

    ws2 = benches["cpu_ws2"].copy()
    wide = ws2.assign(time_min_ms=ws2["time_ms"] / 10, time_max_ms=ws2["time_ms"] * 10)  # every spread holds 1
    assert "no design beats the ring beyond the iterations'" in _opening({**benches, "cpu_ws2": wide}, corrs)["Time"]
    at = (wide["impl"] == "ulysses") & (wide["cp"] == 2) & (wide["seq_len"] == 1024) & (wide["n_kv_heads"] == 8)
    ring = wide[(wide["impl"] == "ring") & (wide["cp"] == 2) & (wide["seq_len"] == 1024) & (wide["n_kv_heads"] == 8)]
    fast = ring["time_min_ms"].iloc[0] / 2  # Ulysses' slowest iteration beats the ring's fastest
    wide.loc[at, ["time_ms", "time_min_ms", "time_max_ms"]] = [fast * 0.9, fast * 0.8, fast]
    after = _opening({**benches, "cpu_ws2": wide}, corrs)["Time"]
    assert "1 of 24 ratios beyond the spread: Ulysses/ring 0." in after and "at s = 1024, MHA 8/8" in after

    shared = _opening({"cpu_ws4": benches["cpu_ws4"]}, corrs)["Time"]  # only oversubscribed times: no comparison
    assert shared.startswith("No timing with a core per rank at N > 1 yet") and "not compared" in shared


def test_the_bf16_explanation_follows_the_rows(committed):
    benches, corrs = committed
    text = findings.bf16_sentence(benches, corrs)
    assert "32-65x further from single-device SDPA than PyTorch's CP" in text
    assert "as close to fp32 as SDPA itself or closer" in text and "Ulysses, which runs SDPA's kernel" in text
    worse = {k: c.assign(err_vs_fp32=c["err_vs_fp32"] * 3) for k, c in corrs.items()}
    assert "further from fp32 than SDPA itself" in findings.bf16_sentence(benches, worse)
    assert findings.bf16_sentence({k: b for k, b in benches.items() if k.startswith("cpu")}, corrs) == \
        findings.S("bf16.none")
