"""Tidy CSV: provenance columns, exact floats, row-by-row appends, resume, schema and config checks."""

import csv
import json

import pytest
import torch

from common.dist import DistInfo
from common.results import PROVENANCE_COLUMNS, ResultsWriter, SchemaMismatch, provenance

ENV = DistInfo(rank=0, local_rank=0, world_size=4, local_world_size=2, device=torch.device("cpu"), backend="gloo")


def _writer(path, resume=False, config=None, columns=("op", "size_bytes", "time_us")):
    return ResultsWriter(path, columns=columns, key=["op", "size_bytes", "world_size"],
                         provenance=provenance(ENV, "1"), config=config or {"iters": 5}, resume=resume)


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_rows_carry_provenance_and_exact_values(tmp_path):
    path = tmp_path / "r.csv"
    w = _writer(path)
    w.write({"op": "all_reduce", "size_bytes": 1024, "time_us": 0.1 + 0.2})
    rows = _rows(path)
    assert list(rows[0]) == ["op", "size_bytes", "time_us", *PROVENANCE_COLUMNS]
    assert float(rows[0]["time_us"]) == 0.1 + 0.2  # shortest round-trip repr, bit-exact
    assert rows[0]["world_size"] == "4" and rows[0]["nnodes"] == "2" and rows[0]["backend"] == "gloo"
    assert rows[0]["timestamp_utc"].endswith("Z") and rows[0]["torch_version"] == torch.__version__
    assert json.loads(path.with_suffix(".config.json").read_text()) == {"iters": 5}
    with pytest.raises(ValueError, match="not in the schema"):
        w.write({"op": "x", "size_bytes": 1, "bogus": 1})


def test_resume_skips_measured_rows_and_fresh_run_truncates(tmp_path):
    path = tmp_path / "r.csv"
    w = _writer(path)
    w.write({"op": "all_reduce", "size_bytes": 1024, "time_us": 5.0})
    w.write({"op": "all_reduce", "size_bytes": 2048, "time_us": 6.0})
    r = _writer(path, resume=True)
    assert r.n_done == 2 and r.done({"op": "all_reduce", "size_bytes": 2048})
    assert not r.done({"op": "all_reduce", "size_bytes": 4096})
    r.write({"op": "all_reduce", "size_bytes": 4096, "time_us": 7.0})
    assert [row["size_bytes"] for row in _rows(path)] == ["1024", "2048", "4096"]
    _writer(path)  # no --resume: start over
    assert _rows(path) == []


def test_resume_refuses_other_schema_or_config(tmp_path):
    path = tmp_path / "r.csv"
    _writer(path).write({"op": "all_reduce", "size_bytes": 1, "time_us": 1.0})
    with pytest.raises(SchemaMismatch, match="has columns"):
        _writer(path, resume=True, columns=("op", "size_bytes", "busbw_GBps"))
    with pytest.raises(SchemaMismatch, match=r"config changed \(iters: 5 -> 9\)"):
        _writer(path, resume=True, config={"iters": 9})
    assert len(_rows(path)) == 1  # refused resumes wrote nothing


def test_disabled_writer_on_other_ranks_writes_nothing(tmp_path):
    w = ResultsWriter(tmp_path / "r.csv", ["op"], ["op"], provenance(ENV, "1"), enabled=False)
    w.write({"op": "x"})
    assert not any(tmp_path.iterdir())


def test_write_many_appends_together_and_all_or_nothing(tmp_path):
    path = tmp_path / "r.csv"
    w = _writer(path)
    w.write_many([{"op": "all_gather", "size_bytes": s, "time_us": float(s)} for s in (1, 2, 4)])
    w.write_many([])
    assert [r["size_bytes"] for r in _rows(path)] == ["1", "2", "4"]
    assert w.done({"op": "all_gather", "size_bytes": 4}) and w.n_done == 3
    with pytest.raises(ValueError, match="not in the schema"):
        w.write_many([{"op": "x", "size_bytes": 8, "time_us": 1.0}, {"op": "x", "size_bytes": 9, "bogus": 1}])
    assert len(_rows(path)) == 3  # the good row of a bad batch was not written either
    assert _writer(path, resume=True).n_done == 3


def test_commit_comes_from_the_environment_where_git_cannot_tell(tmp_path, monkeypatch):
    """A compute node that got the tree without .git records DT_GIT_COMMIT, not 'unknown'."""
    import common.results as results
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)  # no .git here
    monkeypatch.delenv("DT_GIT_COMMIT", raising=False)
    assert results.git_commit() == "unknown"
    monkeypatch.setenv("DT_GIT_COMMIT", "0123456789ab")
    assert results.git_commit() == "0123456789ab"
    assert provenance(ENV, "1")["git_commit"] == "0123456789ab"
    if not torch.cuda.is_available():
        assert provenance(ENV, "1")["driver_version"] == "none"


def test_resume_repairs_a_half_written_last_row_and_refuses_a_damaged_one(tmp_path, capsys):
    path = tmp_path / "r.csv"
    w = _writer(path)
    for size in (1, 2, 3):
        w.write({"op": "all_reduce", "size_bytes": size, "time_us": 1.5})
    whole = path.read_bytes()
    path.write_bytes(whole[:-9])  # killed while writing row 3: it is dropped and measured again
    r = _writer(path, resume=True)
    assert "dropped a half-written last row" in capsys.readouterr().err
    assert r.n_done == 2 and not r.done({"op": "all_reduce", "size_bytes": 3})
    r.write({"op": "all_reduce", "size_bytes": 3, "time_us": 1.5})
    assert [row["size_bytes"] for row in _rows(path)] == ["1", "2", "3"]
    path.write_bytes(whole.replace(b"all_reduce,2,", b"all_reduce,2", 1))  # a row with a field missing
    with pytest.raises(SchemaMismatch, match="line 3 has .* fields, the header .*damaged"):
        _writer(path, resume=True)
    path.write_bytes(whole[:10])  # not even the header survived: start the file afresh
    assert _writer(path, resume=True).n_done == 0 and _rows(path) == []


_WRITE_FOREVER = """
import sys, torch
from pathlib import Path
from common.dist import DistInfo
from common.results import ResultsWriter, provenance
env = DistInfo(0, 0, 1, 1, torch.device("cpu"), "gloo")
w = ResultsWriter(Path(sys.argv[1]), ["step", "note"], ["step"], provenance(env, "1"), resume=True)
step = 0
while True:  # rows of 64 KiB: each is several write() calls, so a kill can land inside one
    if not w.done({"step": step}):
        w.write({"step": step, "note": "x" * 65536})
    step += 1
"""


def test_kill_9_while_writing_then_resume_loses_and_duplicates_no_row(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    path = tmp_path / "steps.csv"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for kill_at in (40, 90):  # two kills; the second run resumes the first one's rows
        proc = subprocess.Popen([sys.executable, "-c", _WRITE_FOREVER, str(path)], env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not path.exists() or path.stat().st_size < kill_at * 65536):
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    w = ResultsWriter(path, ["step", "note"], ["step"], provenance(ENV, "1"), resume=True)
    n = w.n_done
    assert n >= 85
    for step in range(120):
        if not w.done({"step": step}):
            w.write({"step": step, "note": "x" * 65536})
    steps = [int(r["step"]) for r in _rows(path)]
    assert steps == list(range(120))  # 0 rows lost, 0 duplicated, in order
    assert all(len(r["note"]) == 65536 for r in _rows(path))
