"""The report's opening lines come from the CSVs: change committed results (in a copy) and the sentences change."""

import shutil

import pandas as pd

import report
from testkit import report_opening

RESULTS = report.LAB / "results"


def test_the_answer_follows_the_csvs(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    before = report_opening(report.main, tmp_path)
    assert before["Answer"].startswith("Yes: 16 of 16 checks at N = 2 and 4")
    assert "allgather 0.82 and alltoall 0.60" in before["Against PyTorch"]

    corr = pd.read_csv(res / "correctness_cpu_ws4.csv", dtype={"git_commit": str})
    first = corr.index[corr["impl"] == "ours"][0]
    corr.loc[first, ["pass", "bytes_ok"]] = False  # one of ours fails, and sends other bytes than the formula
    corr.to_csv(res / "correctness_cpu_ws4.csv", index=False)
    bench = pd.read_csv(res / "bench_cpu_ws4.csv", dtype={"git_commit": str})
    bench.loc[bench["impl"] == "ours", "time_ms"] *= 2  # ours twice as slow
    bench.to_csv(res / "bench_cpu_ws4.csv", index=False)
    after = report_opening(report.main, tmp_path)
    assert after["Answer"].startswith("Not everywhere: 15 of 16 checks at N = 2 and 4 passed and 15 of 16")
    assert "allgather 1.65 and alltoall 1.20" in after["Against PyTorch"]
