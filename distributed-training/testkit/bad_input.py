"""Bad input, checked the same way in every lab: exit code 2, one line on stderr, nothing on stdout, no file
changed under the watched folders (expect_bad_input); `git status` the same before and after a module
(keep_tracked_files); a report's command line refused (report_arguments_test); and the runner's check pass exactly as common.launch runs it before N ranks on M nodes
(check_pass, over WORLDS: every lab's tests/test_world_plans.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest


def tree_state(root) -> list[tuple[str, int, int]]:
    """Every file under `root` (results/, runs/, reports...) with its size and mtime: what "writes nothing" means."""
    root = Path(root)
    if root.is_file():
        return [(root.name, root.stat().st_size, root.stat().st_mtime_ns)]
    if not root.exists():
        return []
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def git_status(path) -> str | None:
    """`git status --porcelain` of the checkout holding `path` (tracked changes, new files); None without git."""
    try:
        r = subprocess.run(["git", "status", "--porcelain"], cwd=path, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def expect_bad_input(call: Callable[[], Any], needle: str, capsys, watch=()) -> str:
    """call() must end with exit code 2 (returned or raised) and exactly one line on stderr containing
    `needle`, print nothing else, raise no traceback, and leave every file under `watch` as it was."""
    before = [tree_state(w) for w in watch]
    try:
        code = call()
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2, f"exit code {code!r}, stderr: {err}"
    lines = err.rstrip("\n").split("\n")
    assert len(lines) == 1 and needle in lines[0] and out == "", f"stdout: {out!r}, stderr: {err!r}"
    assert [tree_state(w) for w in watch] == before, "bad input changed files"
    return lines[0]


def keep_tracked_files(lab):
    """A module-scoped autouse fixture: after all of a module's cases, `git status` of `lab` is as before."""
    @pytest.fixture(scope="module", autouse=True)
    def _unchanged():
        before = git_status(lab)
        yield
        assert git_status(lab) == before
    return _unchanged


# Every report generator's command line: (argv, what the one line says).
REPORT_ARGUMENTS = [(["--bogus"], "unrecognized arguments: --bogus"),
                    (["--out", "/nonexistent/dir/REPORT.md"], "the folder /nonexistent/dir does not exist")]


def report_arguments_test(report_main: Callable[[list[str]], Any], lab) -> Callable:
    """A test (bound to test_report_arguments in a lab's module): the report refuses an unknown flag and an --out
    whose folder is missing, in one line, exit 2, nothing under `lab` written."""
    @pytest.mark.parametrize("argv, needle", REPORT_ARGUMENTS, ids=["unknown-flag", "out-folder-missing"])
    def test(argv, needle, capsys):
        expect_bad_input(lambda: report_main(argv), needle, capsys, watch=[lab])
    return test


# ---- the pre-launch check over world sizes (every lab's tests/test_world_plans.py) -----------------------

WORLDS = [(w, 1) for w in range(1, 17)] + [(4, 2), (16, 2)]  # ranks, nodes: one node of 1..16, and 2 nodes


def check_pass(main: Callable[[list[str]], Any], argv: list[str], world: int, nnodes: int, monkeypatch, capsys,
               watch=()) -> str | None:
    """The runner's check pass exactly as common.launch runs it before `world` ranks on `nnodes` nodes (in this
    process: DT_CHECK_ARGS=1, DT_PLANNED_WORLD/_LOCAL): None if the plan holds (exit 0, silent on stderr), else
    its one-line refusal (exit 2, one line on stderr, nothing on stdout, no file under `watch` changed)."""
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DT_CHECK_ARGS", "1")
    monkeypatch.setenv("DT_PLANNED_WORLD", str(world))
    monkeypatch.setenv("DT_PLANNED_LOCAL", str(world // nnodes))
    before = [tree_state(w) for w in watch]
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert [tree_state(w) for w in watch] == before, "the check pass changed files"
    if code in (0, None):
        assert "error" not in err.lower(), err
        return None
    lines = err.rstrip("\n").split("\n")
    assert code == 2 and len(lines) == 1 and out == "", f"exit code {code!r}, stdout {out!r}, stderr {err!r}"
    return lines[0]
