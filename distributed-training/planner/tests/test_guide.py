"""make guide regenerates PARALLELISM_GUIDE.md deterministically, and the committed file is current."""

import re
from pathlib import Path

from planner.guide import guide, guide_answer, inputs
from testkit import opened_during

HERE = Path(__file__).resolve().parents[1]


def test_guide_is_deterministic_and_committed(tmp_path):
    # The committed guide, its evidence document and its MFU plot were written by `make guide` in another process:
    # rendering them here gives the same bytes (regenerate them with `make guide` after changing the planner).
    # main() writes a guide elsewhere with its evidence and plot beside it, linked by those names.
    text, evidence = guide.render(), guide.render(guide.VALIDATION_TEMPLATE)
    assert guide.OUT.read_text() == text, "PARALLELISM_GUIDE.md is stale: run `make guide`"
    assert guide.validation_path(guide.OUT).read_text() == evidence, "PLANNER_VALIDATION.md is stale: `make guide`"
    out = tmp_path / "guide.md"
    code, opened = opened_during(lambda: guide.main(["--out", str(out)]))
    assert code == 0
    png = tmp_path / "guide_mfu.png"  # the plot main() drew beside it: the committed one's bytes
    assert png.read_bytes() == guide_answer.plot_path(guide.OUT).read_bytes(), "the MFU plot is stale: `make guide`"
    # every results file a whole run reads, its check reads before anything is written (a damaged one: one line)
    results = {p for p in opened if "/results/" in p and p.endswith((".csv", ".json"))}
    assert results and results <= opened_during(inputs.check)[1]
    assert (tmp_path / "guide_validation.md").read_text().startswith("#") and (tmp_path / "guide_mfu.png").is_file()
    assert "](guide_validation.md)" in out.read_text() and "](guide_mfu.png)" in out.read_text()
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


def test_every_committed_planner_plot_is_shown():
    """planner/results holds only the plots the committed documents embed (a calibrated guide's are ignored by git)."""
    import subprocess

    shown = guide.OUT.read_text() + guide.validation_path(guide.OUT).read_text()
    tracked = subprocess.run(["git", "ls-files", "*.png"], cwd=HERE / "results", capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked and all(f"planner/results/{name}" in shown for name in tracked), tracked
