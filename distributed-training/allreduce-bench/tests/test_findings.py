"""The report's opening lines come from the CSVs: change a committed sweep (in a copy) and the sentence changes."""

import shutil
from pathlib import Path

import pandas as pd

import report
from common.findings import read_block

RESULTS = Path(report.__file__).resolve().parent / "results"


def _opening(tmp_path: Path) -> dict[str, str]:
    out = tmp_path / "REPORT.md"
    report.report(report.Config(results=str(tmp_path / "results"), out=str(out)))
    lines = out.read_text().splitlines()
    found = {f.label: f.text for f in read_block(out)}
    assert lines[0].startswith("# ") and "## What we found" in lines[:4]
    assert 5 <= len(found) <= 8 and lines.index("<!-- /findings -->") < 15  # answered in the first 15 lines
    return found


def test_the_answer_follows_the_sweep(tmp_path):
    shutil.copytree(RESULTS, tmp_path / "results")
    before = _opening(tmp_path)
    assert "all_reduce peaks at 0.871 GB/s of busbw at 8 MiB" in before["Answer"]
    assert before["Checked"].endswith("0 wrong.")

    sweep = tmp_path / "results" / "sweep_cpu_ws4.csv"
    df = pd.read_csv(sweep, dtype={"git_commit": str})
    ar = df["collective"] == "all_reduce"
    df.loc[ar, "busbw_GBps"] *= 2  # twice the bandwidth, and one wrong result
    for col in ("time_us", "time_min_us", "time_max_us"):
        df.loc[ar, col] /= 2
    df.loc[df.index[ar][0], "wrong"] = 3
    df.to_csv(sweep, index=False)
    after = _opening(tmp_path)
    assert "all_reduce peaks at 1.74 GB/s of busbw at 8 MiB" in after["Answer"]
    assert after["Checked"].startswith("3 of the 295 rows") and "not bandwidths" in after["Checked"]
