"""report.py with GPU results beside the CPU ones: one section per hardware, nothing averaged across them."""

import shutil

import pandas as pd

import report
from testkit import as_gpu_rows


def test_gpu_rows_beside_cpu_rows_get_their_own_section(tmp_path, monkeypatch):
    res = tmp_path / "results"
    shutil.copytree(report.RES, res)
    cpu = pd.read_csv(res / "scaling_cpu_ws4.csv")
    gpu = as_gpu_rows(cpu[cpu["world_size"] == 1], model="d1024-L24-h16-T1024-V256", mfu=0.41)
    gpu.to_csv(res / "scaling_h100_ws1.csv", index=False)
    assert report.main(["--results", str(res), "--out", str(tmp_path / "REPORT.md")]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "### 1x NVIDIA H100 80GB HBM3" in text and "(CPU: contention, not scaling)" in text
    assert "- GPU: 1x NVIDIA H100 80GB HBM3 (nccl; 1 rank;" in text and "no result is committed yet" not in text
    h100 = text.split("### 1x NVIDIA H100 80GB HBM3")[1]
    assert "d1024-L24" in h100 and "41" in h100  # its own model and MFU, not the CPU rows'
    assert not (res / "scaling_measured_h100_ws1.png").exists()  # E(1) = 1: no information
    assert "One rank: what it can and cannot show" in h100 and "no scaling plot is drawn" in h100


def test_one_rank_gpu_results_say_what_they_show():
    """The committed H100 sweep (world size 1): per-rank wrapper costs as measurements, the loss spread flagged."""
    full = (report.LAB / "REPORT.md").read_text()
    text = full.split("### 1x NVIDIA H100 80GB HBM3")[1].split("## 4.")[0]
    audit = full.split("`scaling_h100_ws1.csv` (1x NVIDIA H100 80GB HBM3):")[1].split("\n### ")[0]  # the appendix
    assert "spread by up to 0.012 (1 of 2 world-size/mode groups above 0.001; the appendix explains)" in text
    assert "| 1 | strong | 3.21137 | 3.22369 | 0.0123169 | **no** |" in audit
    assert "zero2, zero3, hsdp start at 6.000445; single, ddp, zero1 start at 6.000599" in audit
    assert "MixedPrecisionPolicy(param_dtype=bf16)" in audit
    assert "| weak | zero3 | 222.5 (186.7-261.6) | +87% (+43% to +129%) | +71% (+35% to +120%) |" in text
    assert "Beyond the spread: hsdp weak +100%, zero3 weak +87%" in text and "no difference: ddp strong" in text
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


def _section(text: str, name: str) -> str:
    """The measured-scaling subsection of one result set (up to the next heading)."""
    part = next(p for p in text.split("\n### ") if f"`{name}.csv`" in p.split("\n")[0])
    return part.split("\n## ")[0]


def test_each_result_set_has_its_own_table(tmp_path):
    """A sweep to 2 ranks and a 2-node launch beside the sweep to 4, on the same machine: three tables, none
    averaged into another, and the 2-node set (no world-size-1 run) says why it has no efficiency."""
    res = tmp_path / "results"
    shutil.copytree(report.RES, res)
    assert report.main(["--results", str(res), "--out", str(tmp_path / "alone.md")]) == 0
    s = pd.read_csv(res / "scaling_cpu_ws4.csv", dtype={"git_commit": str})
    s[s["world_size"] <= 2].assign(tokens_per_s=123456.0).to_csv(res / "scaling_cpu_ws2.csv", index=False)
    s[s["world_size"] == 4].assign(nnodes=2, tokens_per_s=654321.0).to_csv(res / "scaling_cpu_ws4_n2.csv",
                                                                          index=False)
    assert report.main(["--results", str(res), "--out", str(tmp_path / "REPORT.md")]) == 0
    alone, text = (tmp_path / "alone.md").read_text(), (tmp_path / "REPORT.md").read_text()
    assert _section(text, "scaling_cpu_ws4") == _section(alone, "scaling_cpu_ws4")  # untouched by the others
    assert "123,456" in _section(text, "scaling_cpu_ws2") and "world size 1, 2" in text
    multi = _section(text, "scaling_cpu_ws4_n2")
    assert "world size 4 on 2 nodes" in multi and "654,321" in multi and "No efficiency here" in multi
