"""Reports take any results set, and each report target turns a damaged input into one line (issue 44).

Each lab's report generator, run as `make <lab>-report` runs it (report.py's main, the lab's folder first on
sys.path), on its committed results plus GPU-shaped copies of its CPU sets (testkit.gpu_shaped_results: each CPU set
again as an H100's and an H200's run, at the CPU sets' worlds; fp8-train's as a rerun of a committed folder), as a
user's first GPU runs add them: the report must be written (exit 0, its opening one screen, which
common.findings.block enforces) and speak of the new GPU. Then, in the same child, the report is run again on one of
the inputs it opened damaged per damage class, the classes shared out among the labs so that together they take every
one of testkit.DAMAGES (testkit.in_copy.report_problems): one line naming the file, exit 2, nothing written. Every
input of every report damaged every way is each lab's tests/test_damaged_inputs.py; the other entry points
(the guide, plan --from-run, README's findings, results-import) are test_entry_points.py.

The six children run at once (a lab's modules share names with another's), started by the module's fixture and
each waited for by its own case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit import DAMAGES
from testkit.gpu import gpu_shaped_results

LABS = Path(__file__).resolve().parents[2]
REPORTS = ("allreduce-bench", "cp-attention", "fp8-train", "fsdp-scaling", "parallel-3d", "tp-attention")
KINDS = {lab: list(DAMAGES[i::len(REPORTS)]) for i, lab in enumerate(REPORTS)}
CHILD = ("import json, sys\nimport report\nfrom testkit.in_copy import report_problems\n"
         "print(json.dumps(report_problems(report.main, *json.loads(sys.argv[1]))))")


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, tuple[subprocess.Popen, Path]]:
    started = {}
    for lab in REPORTS:
        where = tmp_path_factory.mktemp(lab)
        results = gpu_shaped_results(LABS / lab / "results", where / "results")
        args = [str(results), str(where / "REPORT.md"), KINDS[lab]]
        started[lab] = (subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], cwd=LABS / lab,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         env={**os.environ, "PYTHONPATH": f"{LABS / lab}{os.pathsep}{LABS}",
                                              "MPLBACKEND": "Agg"}), where)
    yield started
    for proc, _ in started.values():
        if proc.poll() is None:
            proc.kill()


def test_the_damage_classes_are_shared_out_among_the_reports():
    assert sorted(k for kinds in KINDS.values() for k in kinds) == sorted(DAMAGES)


@pytest.mark.parametrize("lab", REPORTS)
def test_each_report_takes_gpu_shaped_results_and_refuses_damaged_ones_in_one_line(reports, lab):
    proc, where = reports[lab]
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["clean"] == ""
    assert "H200" in (where / "REPORT.md").read_text(), "the report does not speak of the added GPU's sets"
    assert got["problems"] == [] and [c.split()[-1] for c in got["cases"]] == KINDS[lab], got
