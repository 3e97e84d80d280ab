"""report.py with GPU results beside the CPU ones: one section per hardware, nothing averaged across them."""

import shutil

import pandas as pd

import report
from common.testing import as_gpu_rows


def test_gpu_rows_beside_cpu_rows_get_their_own_section(tmp_path, monkeypatch):
    res = tmp_path / "results"
    shutil.copytree(report.RES, res)
    cpu = pd.read_csv(res / "scaling_cpu.csv")
    gpu = as_gpu_rows(cpu[cpu["world_size"] == 1], model="d1024-L24-h16-T1024-V256", mfu=0.41)
    gpu.to_csv(res / "scaling_h100.csv", index=False)
    assert report.main(["--results", str(res), "--out", str(tmp_path / "REPORT.md")]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "### 1x NVIDIA H100 80GB HBM3" in text and "(CPU: contention, not scaling)" in text
    assert "- GPU: 1x NVIDIA H100 80GB HBM3 (nccl; 1 rank;" in text and "no result is committed yet" not in text
    h100 = text.split("### 1x NVIDIA H100 80GB HBM3")[1]
    assert "d1024-L24" in h100 and "41" in h100  # its own model and MFU, not the CPU rows'
    assert not (res / "scaling_measured_1x-nvidia-h100-80gb-hbm3.png").exists()  # E(1) = 1: no information
    assert "One rank: what it can and cannot show" in h100 and "no scaling plot is drawn" in h100


def test_one_rank_gpu_results_say_what_they_show():
    """The committed H100 sweep (world size 1): per-rank wrapper costs as measurements, the loss spread flagged."""
    text = (report.LAB / "REPORT.md").read_text().split("### 1x NVIDIA H100 80GB HBM3")[1].split("## 4.")[0]
    assert "| 1 | strong | 3.21137 | 3.22369 | 0.0123169 | **no** |" in text
    assert "zero2, zero3, hsdp start at 6.000445; single, ddp, zero1 start at 6.000599" in text
    assert "MixedPrecisionPolicy(param_dtype=bf16)" in text
    assert "zero3 in weak mode +87% (+63%) vs single, +71% (+57%) vs DDP" in text
    assert "hsdp in weak mode +100% (+82%) vs single" in text
    assert "![measured scaling]" not in text


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
