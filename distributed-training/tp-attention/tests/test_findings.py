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
    assert before["Answer"].startswith("Yes: 52 checks, 0 failed") and "0.70 in the median row" in before[
        "Against DTensor"]

    corr = pd.read_csv(res / "correctness_cpu_ws4.csv", dtype={"git_commit": str})
    corr.loc[corr.index[0], "pass"] = False  # one check fails
    corr.to_csv(res / "correctness_cpu_ws4.csv", index=False)
    bench = pd.read_csv(res / "bench_cpu_ws4.csv", dtype={"git_commit": str})
    bench["ours_over_dtensor"] *= 2  # ours now twice as slow as DTensor
    bench.to_csv(res / "bench_cpu_ws4.csv", index=False)
    after = report_opening(report.main, tmp_path)
    assert after["Answer"].startswith("Not everywhere: 1 of 52 checks failed")
    assert "1.40 in the median row" in after["Against DTensor"]
