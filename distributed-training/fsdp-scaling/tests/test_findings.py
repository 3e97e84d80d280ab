"""The report's opening lines come from the CSVs: change committed results (in a copy) and the sentences change."""

import shutil

import pandas as pd

import report
from testkit import report_opening


def test_the_answer_follows_the_csvs(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(report.RES, res)
    before = report_opening(report.main, tmp_path)
    assert "ZeRO-3 0.104 MiB (128x less than DDP)" in before["Answer"]
    assert "zero3 weak +87%" in before["Time"] and "ddp does not" in before["At scale (a projection)"]

    a = pd.read_csv(res / "at_scale.csv", dtype={"git_commit": str})
    z3 = (a["strategy"] == "zero3") & (a["world_size"] == 128)
    a.loc[z3, "param_bytes"] += 4 * 2**20  # 4 MiB more than the formula: no longer ZeRO's 128x saving
    a.to_csv(res / "at_scale.csv", index=False)
    s = pd.read_csv(res / "scaling_h100_ws1.csv", dtype={"git_commit": str})
    slow = (s["strategy"] == "zero3") & (s["mode"] == "weak")
    s.loc[slow, ["step_time_ms", "step_time_min_ms", "step_time_max_ms"]] /= 1.5  # zero3 weak 1.5x faster
    s.to_csv(res / "scaling_h100_ws1.csv", index=False)
    after = report_opening(report.main, tmp_path)
    assert "ZeRO-3 4.1 MiB (3x less than DDP)" in after["Answer"]
    assert "zero3 weak +25%" in after["Time"] and "zero3 weak +87%" not in after["Time"]
