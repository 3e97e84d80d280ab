"""common/at_commit.py on a small repository made here: a module runs as it was at an older commit, an adapter of
this tree runs inside that tree, and a bad commit or a failing module is one line."""

import subprocess
import sys

import pytest

from common import at_commit


def git(repo, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """Two commits of lib/answer.py: VALUE = 1, then VALUE = 2 (the work tree holds the second)."""
    (tmp_path / "lib").mkdir()
    git(tmp_path, "init", "-q")
    for value in (1, 2):
        (tmp_path / "lib" / "answer.py").write_text(f"import sys\nVALUE = {value}\n"
                                                    "if __name__ == '__main__':\n"
                                                    "    print(VALUE, sys.argv[1:], sys.stdin.read())\n")
        git(tmp_path, "add", "-A")
        git(tmp_path, "commit", "-q", "-m", f"value {value}")
    return tmp_path


def test_a_module_runs_as_it_was_at_the_commit(repo):
    old = git(repo, "rev-parse", "HEAD~1")
    run = dict(path=("lib",), export=("lib",), repo=repo)
    assert at_commit.run_module(old, "answer", args=["x"], stdin="in", **run) == "1 ['x'] in\n"
    assert at_commit.run_module("HEAD", "answer", **run) == "2 [] \n"
    # An adapter of this tree, copied in, imports the old tree's module, not this process's.
    adapter = repo / "adapter.py"
    adapter.write_text("import answer\nprint('old value', answer.VALUE)\n")
    out = at_commit.run_module(old, "adapter", add={"lib/adapter.py": adapter}, **run)
    assert out == "old value 1\n"
    assert "answer" not in sys.modules  # nothing of the old tree was imported here


def test_commits_are_checked_before_anything_runs(repo):
    old = git(repo, "rev-parse", "--short", "HEAD~1")
    assert at_commit.is_commit(old, repo) and at_commit.is_commit("HEAD", repo)
    assert not at_commit.is_commit("no-such-commit", repo) and not at_commit.is_commit("--all", repo)
    assert not at_commit.is_commit(" ", repo)
    assert at_commit.has_path(old, "lib/answer.py", repo) and not at_commit.has_path(old, "lib/other.py", repo)


def test_a_bad_commit_or_a_failing_module_is_one_line(repo):
    with pytest.raises(ValueError, match="cannot export lib at 'no-such-commit'"):
        at_commit.run_module("no-such-commit", "answer", path=("lib",), export=("lib",), repo=repo)
    with pytest.raises(ValueError, match="is not a commit"):
        at_commit.export_tree("--output=/tmp/x", repo / "out", ("lib",), repo)
    with pytest.raises(at_commit.Failed) as failed:
        at_commit.run_module("HEAD", "missing_module", path=("lib",), export=("lib",), repo=repo)
    assert failed.value.line.endswith("No module named missing_module")  # python: its one line
    assert str(failed.value).startswith("missing_module at HEAD failed: ")
