"""Every sentence that compares or explains is picked by the data: change the committed CSVs (in memory) and the
sentence changes. In-process, without plots: the opening and the body's judgements from the rows alone."""

import findings
import report
from testkit.sweeps import committed_tables, opening_texts


committed = committed_tables(report.REPORT)  # the fixture: the committed CSVs, checked


def _opening(corrs, benches):
    return opening_texts(findings.opening(corrs, benches))


def test_correctness_follows_the_csvs(committed):
    corrs, benches = committed.corrs, committed.benches
    assert _opening(corrs, benches)["Answer"].startswith("Yes: 52 of 52 checks (Intel Xeon (2 cores), 4 gloo ranks")
    corr = corrs["cpu_ws4"].copy()
    corr.loc[corr.index[0], "pass"] = False
    bench = benches["cpu_ws4"].copy()
    bench.loc[bench["tp"] == 4, "comm_bytes_ours"] += 1  # the t = 4 rows send a byte more than the formula
    after = _opening({**corrs, "cpu_ws4": corr}, {**benches, "cpu_ws4": bench})["Answer"]
    assert after.startswith("Not everywhere: 1 of 52 checks failed") and "(10 of 20 rows, t > 1)" in after


def test_dtensor_is_faster_only_outside_the_spread_of_identical_work(committed):
    corrs, benches = committed.corrs, committed.benches
    before = _opening(corrs, benches)["Against DTensor"]
    assert "0.53-0.99 over 5 rows (median 0.95), all below the 0.99-1.01 of identical work: faster" in before
    assert "not compared" in before and "0.70" not in before  # the CPU median is scheduler noise, no finding

    gpu = benches["h100_ws1"].copy()
    gpu.loc[gpu.index[:2], "ours_over_dtensor"] = 1.0  # two rows inside the band, one above it
    gpu.loc[gpu.index[2], "ours_over_dtensor"] = 1.2
    after = _opening(corrs, {**benches, "h100_ws1": gpu})["Against DTensor"]
    assert "2 faster, 1 slower, 2 no different" in after
    wide = benches["h100_ws1"].assign(ours_over_ref=[0.5, 1.0, 1.0, 1.0, 1.5])  # identical work spans 0.50-1.50
    assert "all inside the 0.50-1.50 of identical work: no difference" in _opening(
        corrs, {**benches, "h100_ws1": wide})["Against DTensor"]


def test_the_share_trend_is_read_only_where_the_ranks_do_not_share_cores(committed):
    benches = committed.benches
    b = benches["cpu_ws4"]
    seq = report.base_shape(b)[0]
    assert "with 4 ranks on 2 cores this run cannot show it" in findings.share_sentence(b, seq)
    own = b.assign(hardware="Intel(R) Xeon(R) Processor (8 cores)")
    assert "in this run it does (one median per row" in findings.share_sentence(own, seq)
    rising = own.assign(comm_share=own["comm_share"] * own["d_model"])
    assert "in this run it does not" in findings.share_sentence(rising, seq)
