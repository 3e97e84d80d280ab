"""Run a module of an older commit's tree: the one way this repository runs old code beside the new.

A before/after study needs the old code itself, not a copy kept in the tree. `git archive` exports the
commit's files into a temporary folder, and `python -m MODULE` runs there with that tree's own folders on
PYTHONPATH, so every import resolves to the old code and none to this tree. Where the old tree has no module
that does what the study needs, a small module of this tree that speaks the old interface (an adapter) is
copied in first (`add`) and run as part of the old tree:

    out = run_module("2fbc6b4", "old_planner", args=["issue15"], stdin=json.dumps(cases),
                     add={"distributed-training/old_planner.py": ADAPTER},
                     path=("distributed-training", "distributed-training/planner"))

(planner/evidence/before_after.py). The module's stdout comes back as text; the rest of the environment is
this process's, PYTHONPATH aside. `is_commit` and `has_path` check a commit given by a user before anything runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


class Failed(RuntimeError):
    """The module ran and exited non-zero; `line` is its last line on stderr."""

    def __init__(self, module: str, commit: str, line: str):
        super().__init__(f"{module} at {commit} failed: {line}")
        self.line = line


def _git_ok(repo: Path, *args: str) -> bool:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, timeout=30, check=False).returncode == 0


def is_commit(commit: str, repo: Path = REPO_ROOT) -> bool:
    """True if `commit` names a commit of `repo` (a hash, a branch, HEAD~3; never an option)."""
    return bool(commit.strip()) and not commit.startswith("-") and \
        _git_ok(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")


def has_path(commit: str, path: str, repo: Path = REPO_ROOT) -> bool:
    """True if the tree of `commit` holds `path` (relative to the repository's root)."""
    return is_commit(commit, repo) and _git_ok(repo, "cat-file", "-e", f"{commit}:{path}")


def export_tree(commit: str, dest: Path, paths: Sequence[str] = ("distributed-training",),
                repo: Path = REPO_ROOT) -> Path:
    """The files of `paths` as they were at `commit`, written under `dest` (git archive); returns `dest`.
    ValueError (one line) when git cannot export them: not a commit of `repo`, or no such path there."""
    if commit.startswith("-"):
        raise ValueError(f"{commit!r} is not a commit (an option?)")
    proc = subprocess.run(["git", "archive", "--format=tar", commit, "--", *paths], cwd=repo, capture_output=True,
                          timeout=120, check=False)
    if proc.returncode:
        why = proc.stderr.decode(errors="replace").strip().splitlines() or ["git archive failed"]
        raise ValueError(f"cannot export {', '.join(paths)} at {commit!r}: {why[-1]}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=proc.stdout, capture_output=True, timeout=120, check=True)
    return dest


def run_module(commit: str, module: str, *, args: Sequence[str] = (), stdin: str = "",
               add: Mapping[str, Path] | None = None, path: Sequence[str] = ("distributed-training",),
               export: Sequence[str] = ("distributed-training",), repo: Path = REPO_ROOT,
               timeout_s: float = 600) -> str:
    """`python -m module *args` in the tree of `commit` (the folders `export`, in a temporary folder that is removed
    after), its stdout. `add`: files of this tree copied in first (path in that tree -> file here); `path`: that tree's
    folders on PYTHONPATH. ValueError when the commit cannot be exported; Failed (the module's last line on stderr)
    when the module fails."""
    with tempfile.TemporaryDirectory(prefix="at-commit-") as tmp:
        tree = export_tree(commit, Path(tmp), export, repo)
        for rel, source in (add or {}).items():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, tree / rel)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(tree / p) for p in path)}
        proc = subprocess.run([sys.executable, "-m", module, *args], cwd=tree, input=stdin, text=True,
                              capture_output=True, env=env, timeout=timeout_s, check=False)
    if proc.returncode:
        raise Failed(module, commit, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1])
    return proc.stdout
