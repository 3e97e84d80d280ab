"""report.py with GPU results beside the CPU ones: one section per hardware, nothing averaged across them."""

import shutil

import pandas as pd

import report
from common.testing import as_gpu_rows


def test_gpu_rows_beside_cpu_rows_get_their_own_section(tmp_path, monkeypatch):
    res = tmp_path / "results"
    shutil.copytree(report.RES, res)
    cpu = pd.read_csv(res / "scaling_cpu_ws4.csv")
    gpu = as_gpu_rows(cpu[cpu["world_size"] == 1], model="d1024-L24-h16-T1024-V256", mfu=0.41)
    gpu.to_csv(res / "scaling_h100_ws1.csv", index=False)
    assert report.main(["--results", str(res), "--out", str(tmp_path / "REPORT.md")]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "### 1x NVIDIA H100 80GB HBM3" in text and "(CPU: contention, not scaling)" in text
    assert "GPU runs are included below." in text
    h100 = text.split("### 1x NVIDIA H100 80GB HBM3")[1]
    assert "d1024-L24" in h100 and "41" in h100  # its own model and MFU, not the CPU rows'
    assert (res / "scaling_measured_h100_ws1.png").exists()


def test_a_sweep_of_one_scaling_mode_is_reported(tmp_path):
    """An experiment published with --promote (e.g. --modes weak) is a valid input, not a crash."""
    res = tmp_path / "results"
    shutil.copytree(report.RES, res)
    for path in res.glob("scaling_*.csv"):
        s = pd.read_csv(path, dtype={"git_commit": str})
        s[s["mode"] == "weak"].to_csv(path, index=False)
    assert report.main(["--results", str(res), "--out", str(tmp_path / "REPORT.md")]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "weak = " in text and "strong = " not in text
