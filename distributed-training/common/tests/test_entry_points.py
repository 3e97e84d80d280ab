"""Every entry point catches what its readers raise (issue 44): a damaged input read by `make guide`, `make plan
ARGS="--from-run ..."`, gpu-quick (its plan from the committed rows, and its closing table), README's findings (the
last step of `make reports`) or `make results-import` is one line that names the file, exit 2, never a traceback,
and nothing is written. Each lab's report target (the rest of `make reports`) is damaged the same way where every
report already runs: test_any_results.py, one input per damage class.

Where the entry point is Python it runs in-process, on every input it opened in a clean run: the guide, plan
--from-run and gpu-quick read files at fixed places of the checkout, so they run on a copy, in one child Python
(testkit.in_copy), each input damaged one way, the kind turning over testkit.DAMAGES (each reader's inputs every way
are planner/tests/test_damaged_inputs.py; each lab report's, its tests/test_damaged_inputs.py; gpu-quick's,
provision's test_slot_plan.py; an archive's, provision's test_archive.py). One
real make call per target shows that make adds nothing but its own `make: ***` line.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from common import readme_findings
from testkit import DAMAGES, damage_problems, inputs_of, opened_during
from testkit.damage import damaged
from testkit.in_copy import copy_labs, in_child

ROOT = Path(__file__).resolve().parents[3]
LABS = ROOT / "distributed-training"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"}  # no nvidia-smi, as in CI
# the labs whose results the guide reads (planner: its own regimes_before_after.csv)
GUIDE_LABS = {"allreduce-bench", "fp8-train", "fsdp-scaling", "parallel-3d", "planner", "tp-attention"}


def test_the_guide_and_plan_from_run_turn_each_damaged_input_into_one_line(tmp_path):
    labs, out = copy_labs(tmp_path / "labs"), tmp_path / "guide"
    out.mkdir()
    # the guide's inputs are those its check opens before anything is written (planner/tests/test_guide.py holds that
    # a whole guide run opens no other results file)
    calls = [["planner.guide.guide:main", ["--out", str(out / "PARALLELISM_GUIDE.md")], [str(out)],
              "planner.guide.inputs:check"],
             ["planner.plan:main", ["--from-run", "fp8-train/results/h100_ws1/steps.csv", "--run", "fp8-native-s0"],
              []],
             ["planner.plan:main", ["--from-run", "fsdp-scaling/results/scaling_h100_ws1.csv", "--run",
                                    "zero2 strong, 1 GPU"], []],
             # gpu-quick: what it reads before it starts (its plan from the committed rows), and its closing table
             ["provision.gpu_quick:main", ["--gpu", "h100", "--dry-run"], []],
             ["quick_summary:main", ["--results", "fp8-train/results/h100_ws1"], []]]
    guide, fp8, fsdp, quick, table = in_child(labs, "testkit.in_copy:mains_problems", calls, path=("fp8-train",))
    assert guide["problems"] == fp8["problems"] == fsdp["problems"] == quick["problems"] == table["problems"] == []
    assert quick["inputs"] and table["inputs"], (quick, table)
    # the guide reads every lab's results; each file was damaged once, and every kind of damage was used
    assert {p.split("/")[0] for p in guide["inputs"]} == GUIDE_LABS and len(guide["cases"]) == len(guide["inputs"])
    assert {c.split()[-1] for c in guide["cases"]} == set(DAMAGES)
    # --from-run: the file, the run folders its lab's readers read beside it, the GEMM benchmarks its pricing reads
    assert "fp8-train/results/h100_ws1/steps.csv" in fp8["inputs"] and len(fp8["inputs"]) > 10
    assert set(fsdp["inputs"]) >= {"fsdp-scaling/results/scaling_h100_ws1.csv",
                                   "fp8-train/results/h100_ws1/bench_gemm.csv"}


def test_readme_findings_turns_each_damaged_document_into_one_line(tmp_path, capsys):
    """`make reports` ends by copying each document's answer into README.md: a binary, empty or re-saved document
    (or README itself) is one line naming it, and README is not rewritten."""
    for rel in ["README.md", *(doc for _, _, doc in readme_findings.DOCUMENTS)]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    argv = ["--readme", str(tmp_path / "README.md")]
    code, opened = opened_during(lambda: readme_findings.main(argv))
    capsys.readouterr()
    inputs = inputs_of(tmp_path, opened)
    assert code in (0, None) and len(inputs) == len(readme_findings.DOCUMENTS) + 1
    ran: list[str] = []
    assert damage_problems(lambda: readme_findings.main(argv), inputs, capsys, watch=[tmp_path / "README.md"],
                           ran=ran, named=lambda p: str(p.relative_to(tmp_path))) == []
    assert {c.split()[-1] for c in ran} == {"binary", "empty", "bom-crlf"}  # a report is text: the text damages


# ---- one real make call per target -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout make runs in (its Makefile, requirements, README and the labs)."""
    root = tmp_path_factory.mktemp("checkout")
    for name in ("Makefile", "requirements.txt", "requirements-fp8.txt", "README.md"):
        shutil.copy(ROOT / name, root / name)
    copy_labs(root / "distributed-training")
    return root


def make(root: Path, *args: str, timeout: float = 300) -> tuple[int, list[str]]:
    """(exit code, stderr lines that are not make's own) of `make args` in the copy `root`."""
    r = subprocess.run(["make", *args, f"PYTHON={sys.executable}"], cwd=root, env=ENV, capture_output=True,
                       text=True, timeout=timeout)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r.returncode, [line for line in r.stderr.splitlines() if not line.startswith("make")]


def damage(root: Path, rel: str, kind: str, schema_key: tuple[str, ...] = ()) -> bytes:
    """The file `rel` of the copy damaged as `kind` (testkit.damage); its committed bytes."""
    from common.csvread import Schema
    path = root / "distributed-training" / rel
    raw = path.read_bytes()
    path.write_bytes(damaged(raw, path.suffix, kind, Schema(path.name, key=schema_key)))
    return raw


def test_make_guide_turns_a_damaged_input_into_one_line(checkout):
    """Issue 44's case: a damaged lab CSV read by `make guide` was a 55-line traceback, exit 1."""
    rel, guide = "tp-attention/results/bench_h100_ws1.csv", checkout / "distributed-training" / "PARALLELISM_GUIDE.md"
    before, raw = guide.read_bytes(), damage(checkout, rel, "negative")
    try:
        code, ours = make(checkout, "guide")
    finally:
        (checkout / "distributed-training" / rel).write_bytes(raw)
    assert code == 2 and len(ours) == 1 and rel in ours[0] and "is negative" in ours[0], ours
    assert guide.read_bytes() == before


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    """A results archive as `make results-archive` writes one, holding `members`."""
    manifest = {"commit": "0" * 12, "machine": "test", "preset": "h100_ws1", "created_utc": "2026-01-01T00:00:00Z",
                "files": {name: hashlib.sha256(data).hexdigest() for name, data in members.items()}}
    with tarfile.open(path, "w:gz") as tar:
        for name, data in {"MANIFEST.json": json.dumps(manifest).encode(), **members}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_make_results_import_of_a_damaged_result_is_one_line(checkout, tmp_path):
    """A key given twice with two values reads as a CSV: the archive's own check unpacks it, and `make reports`, which
    results-import runs next, stops at the first report that reads it, in one line (the kinds the archive's check
    refuses before writing anything: provision/tests/test_archive.py)."""
    rel = "distributed-training/allreduce-bench/results/sweep_cpu_ws4.csv"
    key = ("collective", "dtype", "size_bytes", "world_size", "nnodes")
    raw = damage(checkout, rel.split("/", 1)[1], "conflicting-key", key)
    bad = (checkout / rel).read_bytes()
    (checkout / rel).write_bytes(raw)
    try:
        code, ours = make(checkout, "results-import", f"ARCHIVE={_archive(tmp_path / 'r.tar.gz', {rel: bad})}")
    finally:
        (checkout / rel).write_bytes(raw)
    assert code == 2 and len(ours) == 1 and "sweep_cpu_ws4.csv" in ours[0] and "repeats the key" in ours[0], ours
