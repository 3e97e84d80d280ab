"""The report's opening lines come from the CSVs: change committed results (in a copy) and the sentences change."""

import shutil
from pathlib import Path

import pandas as pd

import report
from testkit import report_opening

RESULTS = Path(report.__file__).resolve().parent / "results"


def test_the_answer_follows_the_csvs(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    before = report_opening(report.main, tmp_path)
    hardware = pd.read_csv(res / "runs_cpu.csv")["hardware"].iloc[0]
    assert before["Answer"].startswith(f"Yes on {hardware}") and "Every study fits" in before["Memory"]

    runs = pd.read_csv(res / "runs_cpu.csv", dtype={"git_commit": str})
    runs.loc[runs["tp"] == 2, "loss_last"] += 0.01  # the 3D runs no longer end where one process does
    runs.to_csv(res / "runs_cpu.csv", index=False)
    rows = pd.read_csv(res / "at_scale.csv", dtype={"git_commit": str})
    busiest = max(r.param_bytes + r.opt_bytes + r.peak_bytes for r in rows[rows["study"] == "70B@512"].itertuples())
    rows.loc[rows["study"] == "70B@512", "peak_bytes"] += 81e9 - busiest  # 81 GB at its busiest rank: no fit
    rows.to_csv(res / "at_scale.csv", index=False)
    after = report_opening(report.main, tmp_path)
    assert after["Answer"].startswith(f"Not exactly on {hardware}")
    assert "70B@512 at 81.0 GB does not fit" in after["Memory"] and "Every study fits" not in after["Memory"]
