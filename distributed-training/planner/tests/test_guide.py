"""make guide regenerates PARALLELISM_GUIDE.md deterministically, and the committed file is current."""

import os
import re
import subprocess
import sys
from pathlib import Path

from planner import guide

HERE = Path(__file__).resolve().parents[1]


def test_guide_is_deterministic_and_committed(tmp_path):
    # One generation in a fresh process (what `make guide` runs), one in this one: the same bytes, and the
    # same as the committed guide and its evidence document (regenerate them with `make guide` after changing the
    # planner). Rendering writes no file; main() draws the MFU plot beside a guide written elsewhere.
    a, b = tmp_path / "a" / "guide.md", tmp_path / "b" / "guide.md"
    a.parent.mkdir()
    b.parent.mkdir()
    proc = subprocess.run([sys.executable, "-m", "planner.guide", "--out", str(a)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    assert proc.returncode == 0, proc.stderr
    assert guide.main(["--out", str(b)]) == 0
    for name in ("guide.md", "guide_validation.md"):
        assert (a.parent / name).read_text() == (b.parent / name).read_text()
    assert (a.parent / "guide_mfu.png").read_bytes() == (b.parent / "guide_mfu.png").read_bytes()
    assert "](guide_validation.md)" in a.read_text() and "](guide_mfu.png)" in a.read_text()
    text, evidence = guide.render(), guide.render(guide.VALIDATION_TEMPLATE)
    assert guide.OUT.read_text() == text, "PARALLELISM_GUIDE.md is stale: run `make guide`"
    assert guide.validation_path(guide.OUT).read_text() == evidence, "PLANNER_VALIDATION.md is stale: `make guide`"
    for doc in (text, evidence):
        assert "{{" not in doc and "projection" in doc
        assert not re.search(r"/(work|tmp|root|home)/", doc)  # no machine paths in a committed file
    lines = text.splitlines()
    assert len(lines) <= 300 and lines.index("<!-- /findings -->") < 15  # a decision guide, answering first
    assert "```mermaid" in text and text.count("**") > 8 and "## 3. Worked scenarios" in text


def test_a_calibrated_guide_from_the_committed_csvs(tmp_path, capsys):
    # Issue 24: the H100 GEMM benchmark calibrates the compute of an H100 guide. The guide says which figures came
    # from the measurements and which stayed the table's, and its plans follow them.
    labs = HERE.parent
    out = tmp_path / "calibrated.md"
    assert guide.main(["--calibrate", f"{labs}/fp8-train/results/h100_ws1/bench_gemm.csv", "--out", str(out)]) == 0
    text = out.read_text()
    assert "**Calibrated for your cluster**" in text and "planned on H100 SXM 80GB" in text
    assert "- sustained matmul fraction 0.734" in text
    assert "the per-GPU network rate" in " ".join(text.split("Everything else is")[1][:200].split())  # the table's
    default = guide.render()  # main() restored the hardware table's context
    assert "Calibrated" not in default
    assert "{{" not in text and not re.search(r"/(tmp|root|home)/", text.split("## 1.")[1])


def test_a_sweep_of_another_gpu_is_refused(tmp_path, capsys):
    # Issue 32: a CPU gloo sweep once "calibrated" an H100 guide with 0.892 GB/s of NVLink. Now one line, exit 2,
    # nothing written, as a CPU GEMM file already was.
    labs = HERE.parent
    files = f"{labs}/allreduce-bench/results/sweep_cpu_ws4.csv,{labs}/fp8-train/results/h100_ws1/bench_gemm.csv"
    out = tmp_path / "calibrated.md"
    assert guide.main(["--calibrate", files, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sweep_cpu_ws4.csv was measured on cpu, not h100" in err and not out.exists()
    assert "Calibrated" not in guide.render()


def test_calibrating_with_a_bad_file_is_one_line(tmp_path, capsys):
    assert guide.main(["--calibrate", str(tmp_path / "nowhere.csv"), "--out", str(tmp_path / "g.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nowhere.csv" in err and not (tmp_path / "g.md").exists()
    assert "Calibrated" not in guide.render()  # the context is restored
