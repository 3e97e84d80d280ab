"""report.py with a GPU bench CSV beside the CPU one: each gets its own labelled section."""

import shutil

import pandas as pd

import report
from testkit import as_gpu_rows


def test_gpu_csv_beside_cpu_csv(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(report.LAB / "results", res)
    cpu = pd.read_csv(res / "bench_cpu_ws4.csv")
    as_gpu_rows(cpu, world_size=1).to_csv(res / "bench_h100_ws1.csv", index=False)
    report.main(["--results", str(res), "--out", str(tmp_path / "REPORT.md")])
    text = (tmp_path / "REPORT.md").read_text()
    assert "1x NVIDIA H100 80GB HBM3, 1 rank, nccl" in text and "2 cores), 4 ranks, gloo" in text
    assert "- GPU: 1x NVIDIA H100 80GB HBM3 (nccl; 1 rank;" in text and "no result is committed yet" not in text
    assert text.count("## ") >= 3
