"""The report and the guide's section from the committed CSVs: every section filled, plots in plots/ beside it."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

import report
from testkit import as_gpu_rows
from planner.evidence import against_pytorch

RESULTS = Path(report.__file__).resolve().parent / "results"


def test_report_from_the_committed_csvs(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    out = tmp_path / "REPORT.md"
    assert report.main(["--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "{{" not in text and "core contention" in text
    for heading in ("## What we found", "## 1.", "## 2.", "## 3.", "## Appendix",
                    "### Collectives of one step, per pipeline rank"):
        assert heading in text
    assert "_No runs yet" not in text and "_Not measured yet" not in text
    assert (tmp_path / "plots" / "at_scale.png").exists() and list((tmp_path / "plots").glob("activations_*.png"))
    assert (tmp_path / "plots" / "peak_memory.png").exists() and "| fits 80 GB |" in text
    assert text.count("*What to see:*") == 3  # every plot has its caption
    section = against_pytorch.render(results)  # kept once, in PLANNER_VALIDATION.md, and linked from here
    assert "residual" in section and section not in text and "PLANNER_VALIDATION.md, section 5" in text


def test_report_refuses_a_missing_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        report.main(["--results", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "no results folder" in err
    assert against_pytorch.render(tmp_path).startswith("_Not measured yet")


def test_the_report_says_which_gpu_results_exist(tmp_path):
    """Generated from the files' provenance: none, then (a GPU-labelled copy of the CPU rows) the GPU's."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    out = tmp_path / "REPORT.md"
    assert report.main(["--results", str(results), "--out", str(out)]) == 0
    assert "- GPU: no result is committed yet; `make parallel-3d-gpu`" in out.read_text()
    runs = pd.read_csv(results / "runs_cpu.csv")
    as_gpu_rows(runs[runs["world_size"] == 1], precision="bf16", preset="h100").to_csv(results / "runs_h100.csv",
                                                                                      index=False)
    assert report.main(["--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "- GPU: 1x NVIDIA H100 80GB HBM3 (nccl; 1 rank; torch 2.11.0+cu130;" in text and "`runs_h100.csv`" in text
    assert "no result is committed yet" not in text and "Multi-GPU: no result yet" in text
    assert "**runs_h100** (1x NVIDIA H100 80GB HBM3; 1 rank; nccl;" in text
