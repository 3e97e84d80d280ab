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
