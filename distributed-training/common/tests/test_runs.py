"""Run folders: one writer at a time, nothing published before a run completes, atomic byte-exact
promotion, explicit merges by key, earlier unpublished runs kept, a dead holder's lock released."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.runs import RunError, RunFolder, check_free, check_resumable, lock_holder, main, promote_run

HEADER = "op,size,time_us\r\n"


def _run(tmp_path, mode="fresh") -> RunFolder:
    return RunFolder.open(tmp_path / "runs" / "sweep", tmp_path / "results", mode)


def _write(run: RunFolder, rows: list[str], name: str = "sweep.csv") -> None:
    run.file(name, key=["op", "size"]).write_text(HEADER + "".join(r + "\r\n" for r in rows), newline="")


def test_a_second_writer_is_refused_with_the_holder_named(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(RunError) as e:
        _run(tmp_path)
    assert f"pid {os.getpid()}" in str(e.value) and "being written by another run" in str(e.value)
    with pytest.raises(RunError, match="being written"):
        check_free(run.path)  # what a runner checks before launching
    run.close()
    assert lock_holder(run.path) is None
    _run(tmp_path).close()


def test_a_killed_holder_releases_the_lock(tmp_path):
    code = ("import sys, time; from pathlib import Path; from common.runs import RunFolder; "
            "run = RunFolder.open(Path(sys.argv[1]), Path(sys.argv[2])); print('locked', flush=True); time.sleep(60)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "runs" / "sweep"), str(tmp_path / "results")],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "locked"
    assert f"pid {proc.pid}" in lock_holder(tmp_path / "runs" / "sweep")
    proc.kill()  # kill -9: no cleanup ran, yet the kernel dropped the flock
    proc.wait()
    assert lock_holder(tmp_path / "runs" / "sweep") is None
    _run(tmp_path, "resume").close()


def test_nothing_is_published_until_complete_then_atomically_and_byte_exact(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "sweep.csv").write_text("the committed sweep\n")
    run = _run(tmp_path)
    _write(run, ["a,1,2.5"])
    assert run.finish(complete=False, changed=[])[0].startswith("results so far in")
    assert (results / "sweep.csv").read_text() == "the committed sweep\n"
    with pytest.raises(RunError, match="unfinished run"):
        promote_run(run.path)
    run = _run(tmp_path, "resume")
    _write(run, ["a,1,2.5", "a,2,3.5"])
    (run.path / "sub").mkdir()
    (run.path / "sub" / "page.html").write_text("<html>")
    lines = run.finish(complete=True, changed=[])
    assert lines == [f"published 2 file(s) into {results}"] or "published 2 file(s)" in lines[0]
    assert (results / "sweep.csv").read_bytes() == (run.path / "sweep.csv").read_bytes()
    assert (results / "sub" / "page.html").read_text() == "<html>"
    assert not list(results.glob(".*tmp")) and json.loads((run.path / "run.json").read_text())["state"] == "promoted"


def test_an_experiment_stays_in_its_run_folder_unless_asked(tmp_path):
    results = tmp_path / "results"
    run = _run(tmp_path)
    _write(run, ["a,1,2.5"])
    msg = run.finish(complete=True, changed=["--iters"])[0]
    assert "experiment (--iters differ from the preset)" in msg and "python -m common.runs promote" in msg
    assert not results.exists()
    assert main(["promote", str(run.path)]) == 0 and (results / "sweep.csv").exists()


def test_merge_replaces_rows_by_key_and_keeps_the_others(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    (results / "sweep.csv").write_text(HEADER + "a,1,1.0\r\nb,1,9.0\r\n", newline="")
    (results / "sweep.config.json").write_text('{"iters": 20}')
    run = _run(tmp_path)
    _write(run, ["b,1,2.0", "c,1,3.0"])
    (run.path / "sweep.config.json").write_text('{"iters": 5}')
    assert "results so far" in run.finish(complete=False, changed=["--iters"], promote="merge")[0]
    assert main(["promote", str(run.path), "--merge"]) == 0  # asked by hand: an unfinished run's rows are whole
    assert (results / "sweep.csv").read_text().splitlines() == ["op,size,time_us", "a,1,1.0", "b,1,2.0", "c,1,3.0"]
    assert "merged 2 file(s)" in capsys.readouterr().out
    assert json.loads((results / "sweep.config.json").read_text()) == {"iters": 20, "merged": [{"iters": 5}]}
    (results / "sweep.csv").write_text("x,y\n1,2\n")
    assert main(["promote", str(run.path), "--merge"]) == 2  # the old file lacks the key: refused, nothing replaced
    assert "lacks the key column(s) op, size" in capsys.readouterr().err
    assert (results / "sweep.csv").read_text() == "x,y\n1,2\n"


def test_merge_into_a_file_with_older_columns_keeps_both_and_leaves_the_missing_cells_empty(tmp_path):
    """A partial GPU run (new columns) merged into a folder written before them (and with one they dropped)."""
    results = tmp_path / "results"
    results.mkdir()
    (results / "sweep.csv").write_text("op,size,old_col\na,1,x\nb,1,y\n")
    run = _run(tmp_path)
    _write(run, ["b,1,2.0", "c,1,3.0"])
    run.finish(complete=False, changed=[])  # a launch stopped by its time limit: its rows stay in runs/
    assert main(["promote", str(run.path), "--merge"]) == 0
    assert (results / "sweep.csv").read_text().splitlines() == [
        "op,size,time_us,old_col", "a,1,,x", "b,1,2.0,", "c,1,3.0,"]


def test_a_damaged_file_is_never_published(tmp_path, capsys):
    run = _run(tmp_path)
    _write(run, ["a,1,2.5"])
    with open(run.path / "sweep.csv", "a") as f:
        f.write("b,1")  # a half-written row
    with pytest.raises(SystemExit):
        run.finish(complete=True, changed=[])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "could not publish" in err and "half-written last row" in err
    assert not (tmp_path / "results").exists() and lock_holder(run.path) is None


def test_a_fresh_run_keeps_an_unpublished_one_aside(tmp_path):
    run = _run(tmp_path)
    _write(run, ["a,1,2.5"])
    run.finish(complete=False, changed=[])
    again = _run(tmp_path)
    assert "is kept as" in again.notes[0]
    aside = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("sweep@")]
    assert len(aside) == 1 and (aside[0] / "sweep.csv").read_bytes().endswith(b"a,1,2.5\r\n")
    assert not (again.path / "sweep.csv").exists()
    again.close()
    time.sleep(1.1)  # a published run is simply replaced
    _write(_run(tmp_path, "resume"), ["a,1,2.5"])
    with pytest.raises(RunError, match="nothing to resume"):
        check_resumable(tmp_path / "runs" / "other")


@pytest.mark.parametrize("argv, needle", [
    (["promote", "/nonexistent/runs/x"], "is not a run folder (no run.json)"),
    (["promote"], "the following arguments are required: run_dir"),
    (["publish", "x"], "invalid choice: 'publish'"),
], ids=["no-run-folder", "no-argument", "no-command"])
def test_the_command_line_refuses_bad_input(argv, needle, capsys, tmp_path):
    from testkit import expect_bad_input
    expect_bad_input(lambda: main(argv), needle, capsys, watch=[tmp_path])


def _hold(lock_file: Path, mode: str, seconds: float) -> subprocess.Popen:
    """Another process holding an flock (`sh`: what a probe takes for an instant; `ex`: a run's) for a while."""
    code = ("import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
            f"fcntl.flock(f, fcntl.LOCK_{mode.upper()}); print('held', flush=True); time.sleep({seconds})")
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock_file)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_probe_is_never_mistaken_for_a_holder(tmp_path):
    """Two checks at once (every node of a job probing the same run folder) each see a free folder, and a
    run that starts while a probe looks waits for that instant instead of being refused."""
    _run(tmp_path).close()
    lock_file = tmp_path / "runs" / "sweep.lock"
    probe = _hold(lock_file, "sh", 0.5)  # a probe caught in its instant
    try:
        assert lock_holder(tmp_path / "runs" / "sweep") is None  # another probe does not see it as a holder
        check_free(tmp_path / "runs" / "sweep")
        run = _run(tmp_path, "resume")  # waits the probe out
    finally:
        probe.wait()
    assert f"pid {os.getpid()}" in lock_file.read_text()
    run.close()


def test_the_lock_file_names_the_current_holder_only(tmp_path):
    lock_file = tmp_path / "runs" / "sweep.lock"
    code = ("import sys, time; from pathlib import Path; from common.runs import RunFolder; "
            "run = RunFolder.open(Path(sys.argv[1]), Path(sys.argv[2])); print('locked', flush=True); time.sleep(60)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    dead = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "runs" / "sweep"), str(tmp_path / "results")],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert dead.stdout.readline().strip() == "locked"
    dead.kill()  # kill -9: its line stays in the file, its lock does not
    dead.wait()
    run = _run(tmp_path, "resume")
    assert f"pid {dead.pid} " not in lock_file.read_text() and f"pid {os.getpid()} " in lock_file.read_text()
    run.close()
    assert lock_file.read_text() == ""  # released: nobody is named
    holder = _hold(lock_file, "ex", 30)  # a run that holds the lock but names nobody yet: refused, not stale
    try:
        with pytest.raises(RunError, match=r"another process, starting"):
            _run(tmp_path, "resume")
        assert lock_holder(tmp_path / "runs" / "sweep") == "another process, starting"
    finally:
        holder.kill()
        holder.wait()


def test_a_filesystem_without_locks_is_one_line(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(RunError, match="the filesystem does not support file locks") as e:
        _run(tmp_path)
    assert "\n" not in str(e.value)


def test_a_held_lock_covers_the_whole_invocation_and_refuses_everyone_else(tmp_path, monkeypatch):
    """hold(): what a make target runs under the lock (its launches) writes there without taking it again; a
    process outside that invocation is refused naming the holder; the lock is released when the command ends."""
    from common.runs import Lock, hold

    folder = tmp_path / "runs" / "sweep"
    lock = Lock(folder)
    lock.acquire()
    inside = ("import os, subprocess, sys; from pathlib import Path; from common.runs import RunFolder, check_free, "
              "lock_holder\n"
              "folder, results = Path(sys.argv[1]), Path(sys.argv[2])\n"
              "assert lock_holder(folder) is None; check_free(folder)\n"
              "run = RunFolder.open(folder, results, 'append'); run.close(); RunFolder.open(folder, results).close()\n"
              "env = {k: v for k, v in os.environ.items() if k != 'DT_RUN_LOCKS'}\n"
              "other = subprocess.run([sys.executable, '-c', 'import sys; from pathlib import Path; "
              "from common.runs import RunFolder; RunFolder.open(Path(sys.argv[1]), Path(sys.argv[2]))', "
              "*sys.argv[1:]], env=env, capture_output=True, text=True)\n"
              "assert other.returncode == 1 and f'pid {os.getppid()} ' in other.stderr, other.stderr\n"
              "print(lock_holder(folder), flush=True)")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    assert hold(lock, [sys.executable, "-c", inside, str(folder), str(tmp_path / "results")]) == 0
    assert lock_holder(folder) is None  # released with the command's end
    again = Lock(folder)
    again.acquire()
    assert hold(again, ["sh", "-c", "exit 3"]) == 3 and hold(None, ["sh", "-c", "kill -9 $$"]) == 137
    assert lock_holder(folder) is None


def test_every_publishing_target_decides_by_the_one_rule():
    """Preset or experiment is common.runner.experiment everywhere (on common.runs.experiment_flags): no runner
    filters the flags it compares (fsdp-scaling's studies once published `--strategies ddp` runs,
    their config recording flags they ignored)."""
    labs = Path(__file__).resolve().parents[2]
    publishes = re.compile(r"open_run\(|finish\(complete=")  # the spine's context manager, or RunFolder.finish
    runners = [p for p in [*labs.glob("*/*.py"), *labs.glob("*/*/*.py")]  # a lab's scripts and its rooms' modules
               if not {"tests", "testkit"} & set(p.parts[-3:-1]) and not p.parent.is_symlink()  # each lab's common
               and p.relative_to(labs).as_posix() not in ("common/runner.py", "common/runs.py")
               and publishes.search(p.read_text())]
    assert len(runners) == 13, runners  # 10 of four labs, fp8-train's 2, tp- and cp-attention's (attention_sweep)
    for path in runners:
        text = path.read_text()
        assert "changed_flags" not in text, path
        assert "experiment(" in text or "experiment_flags(" in text or "from bench import" in text and "changed" in text, \
            path


def test_a_run_folder_never_lands_beside_an_arbitrary_output_folder():
    """Beside a lab's results/ (its layout); inside any other folder: `train.py --results /some/dir` publishes into
    /some, and runs/ beside /some was the filesystem root."""
    from common.runs import run_dir_for

    assert run_dir_for(Path("/labs/fp8-train/results"), "cpu_ws1") == Path("/labs/fp8-train/runs/cpu_ws1")
    assert run_dir_for(Path("/some"), "dir") == Path("/some/runs/dir")
    assert run_dir_for(Path("/tmp/x/results"), "r") == Path("/tmp/x/runs/r")
