"""Tidy CSV results with provenance, appended one row at a time, resumable.

One row per measurement; units in column names (time_us, busbw_GBps, peak_mem_GiB); then the
provenance columns, the same in every lab, so any number in any report can be traced to the
code, hardware and software that produced it:

    bench_version  git_commit  timestamp_utc  hardware  world_size  nnodes  backend
    torch_version  cuda_version  nccl_version  driver_version  python_version

`backend` is the process group's (gloo, nccl); a lab column must not reuse a provenance column's
name for something else. `git_commit` comes from git, or, in a copy of the repository without
`.git` (a compute node that got a tarball), from the DT_GIT_COMMIT environment variable, which
`make gpu-suite` and `make results-archive` pass along.

Host names never appear (results are committed). Rows are flushed and fsync'ed as they are
measured, so a sweep killed halfway keeps every finished row, and `resume=True` skips the rows
whose key columns are already in the file; a last row cut short by a kill is dropped first (and
measured again), a damaged row elsewhere is refused. The resolved config is saved beside the CSV
as <name>.config.json; resuming with a different config is an error, not a silent mix. Runners
open their writers inside a run folder (common.runs), never in results/ directly.

    writer = ResultsWriter(path, columns=["collective", "size_bytes", "time_us"],
                           key=["collective", "size_bytes"], provenance=provenance(env, "1"),
                           config=config_dict(cfg), resume=cfg.resume)
    if not writer.done({"collective": "all_reduce", "size_bytes": 1024}):
        writer.write({"collective": "all_reduce", "size_bytes": 1024, "time_us": 12.5})
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import torch

from .dist import DistInfo
from .hardware import NVMLUnavailable, describe_hardware, nvml

PROVENANCE_COLUMNS = ["bench_version", "git_commit", "timestamp_utc", "hardware", "world_size", "nnodes", "backend",
                      "torch_version", "cuda_version", "nccl_version", "driver_version", "python_version"]
REPO_ROOT = Path(__file__).resolve().parents[2]


def git_commit() -> str:
    """Short commit of the code that ran; '+dirty' when tracked code differs from it.

    Without a usable git checkout, DT_GIT_COMMIT (set by whoever copied the tree) names it.
    """
    from_env = os.environ.get("DT_GIT_COMMIT", "").strip()
    if from_env:  # whoever copied the tree knows its commit; a copied .git may be stale
        return from_env
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        # Only code counts as dirt: results and reports change on every run by design.
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "*.py", "Makefile", "*.mk"],
                               cwd=REPO_ROOT, capture_output=True, timeout=10).returncode == 1
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", False
    if not sha:
        return from_env or "unknown"
    return sha + ("+dirty" if dirty else "")


def driver_version() -> str:
    """The NVIDIA driver's version through NVML; 'none' on a machine without one."""
    if not torch.cuda.is_available():
        return "none"
    try:
        with nvml() as pynvml:
            v = pynvml.nvmlSystemGetDriverVersion()
    except NVMLUnavailable:
        return "unknown"
    return v.decode() if isinstance(v, bytes) else str(v)


def nccl_version() -> str:
    if not torch.cuda.is_available():
        return "none"
    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return "unknown"
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def provenance(env: DistInfo, bench_version: str) -> dict[str, Any]:
    """The provenance columns for this process (call on every rank; only rank 0 writes)."""
    return {
        "bench_version": bench_version,
        "git_commit": git_commit(),
        "timestamp_utc": "",  # filled per row
        "hardware": describe_hardware(),
        "world_size": env.world_size,
        "nnodes": env.nnodes,
        "backend": env.backend,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda or "none",
        "nccl_version": nccl_version(),
        "driver_version": driver_version(),
        "python_version": platform.python_version(),
    }


def format_value(v: Any) -> str:
    """Exact and tidy: floats by shortest round-trip repr (so resumed losses compare bit for bit)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    return str(v)


class SchemaMismatch(ValueError):
    pass


class ResultsWriter:
    """Append-only CSV writer for one run. Rank 0 creates it; other ranks pass enabled=False."""

    def __init__(self, path: str | Path, columns: Iterable[str], key: Iterable[str], provenance: dict[str, Any],
                 config: dict[str, Any] | None = None, resume: bool = False, enabled: bool = True,
                 config_ignore: Iterable[str] = ("resume",)):
        self.path = Path(path)
        self.columns = list(columns) + [c for c in PROVENANCE_COLUMNS if c not in columns]
        self.key = list(key)
        self.provenance = provenance
        self.enabled = enabled
        self._done: set[tuple[str, ...]] = set()
        missing = [k for k in self.key if k not in self.columns]
        if missing:
            raise ValueError(f"key columns {missing} are not among the columns")
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        config_path = self.path.with_suffix(".config.json")
        if resume and self.path.exists() and repair_partial_last_line(self.path):
            with open(self.path, newline="") as f:
                rows = list(csv.reader(f))
            if rows[0] != self.columns:
                raise SchemaMismatch(f"{self.path} has columns {rows[0][:4]}..., this run writes "
                                     f"{self.columns[:4]}...; move the file away or run without --resume")
            idx = [self.columns.index(k) for k in self.key]
            for n, row in enumerate(rows[1:], start=2):
                if len(row) != len(self.columns):
                    raise SchemaMismatch(f"cannot resume {self.path}: line {n} has {len(row)} fields, the header "
                                         f"{len(self.columns)}; the file is damaged: move it away or run without "
                                         "--resume")
                self._done.add(tuple(row[i] for i in idx))
            if config is not None and config_path.exists():
                _check_same_config(json.loads(config_path.read_text()), config, set(config_ignore), self.path)
        else:
            with open(self.path, "w", newline="") as f:
                csv.writer(f).writerow(self.columns)
        if config is not None:
            config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

    def _key_of(self, row: dict[str, Any]) -> tuple[str, ...]:
        merged = {**self.provenance, **row}
        return tuple(format_value(merged[k]) for k in self.key)

    def done(self, row: dict[str, Any]) -> bool:
        """True if a row with these key values is already in the file (resume)."""
        return self._key_of(row) in self._done

    @property
    def n_done(self) -> int:
        return len(self._done)

    def write(self, row: dict[str, Any]) -> None:
        self.write_many([row])

    def write_many(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows measured together with one flush + fsync (a step that logs dozens of rows
        would otherwise spend more time in fsync than in computing them). All or nothing: a row
        with an unknown column raises before any row is written."""
        rows = list(rows)
        if not self.enabled or not rows:
            return
        for row in rows:
            unknown = set(row) - set(self.columns)
            if unknown:
                raise ValueError(f"row has columns not in the schema: {sorted(unknown)}")
        now = utc_now()
        with open(self.path, "a", newline="") as f:
            w = csv.writer(f)
            for row in rows:
                merged = {**self.provenance, "timestamp_utc": now, **row}
                w.writerow([format_value(merged.get(c)) for c in self.columns])
            f.flush()
            os.fsync(f.fileno())
        self._done.update(self._key_of(row) for row in rows)


    def discard(self, column: str, value: Any) -> int:
        """Remove every row whose `column` equals `value` (a run restarted from its first step).

        The file is rewritten beside itself and renamed over it: a crash leaves the old file or the
        new one. Returns the number of rows removed.
        """
        if not self.enabled or not self.path.exists():
            return 0
        with open(self.path, newline="") as f:
            rows = list(csv.reader(f))
        i, want = self.columns.index(column), format_value(value)
        keep = [r for r in rows[1:] if r[i] != want]
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="") as f:
            csv.writer(f).writerows([rows[0]] + keep)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        idx = [self.columns.index(k) for k in self.key]
        self._done = {tuple(r[j] for j in idx) for r in keep}
        return len(rows) - 1 - len(keep)


class NoWriter:
    """What ranks other than 0 hold instead of a writer: nothing is written; rank 0 decides what is done."""

    path = None
    n_done = 0

    def done(self, row: dict[str, Any]) -> bool:
        return False

    def write(self, row: dict[str, Any]) -> None:
        pass

    def write_many(self, rows: Iterable[dict[str, Any]]) -> None:
        pass

    def discard(self, column: str, value: Any) -> int:
        return 0


def check_resume(path: Path, columns: Iterable[str], config: dict[str, Any] | None,
                 ignore: Iterable[str] = ("resume",)) -> None:
    """Before launching a --resume: the file's columns and saved config must match this run's
    (SchemaMismatch, one line, otherwise). A missing file is fine: nothing was written yet."""
    path = Path(path)
    columns = list(columns) + [c for c in PROVENANCE_COLUMNS if c not in columns]
    if path.exists() and path.stat().st_size:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if header and header != columns:
            raise SchemaMismatch(f"cannot resume {path}: it has other columns than this run writes (an older "
                                 "version?); move it away or run without --resume")
    config_path = path.with_suffix(".config.json")
    if config is not None and config_path.exists():
        _check_same_config(json.loads(config_path.read_text()), config, set(ignore), path)


def repair_partial_last_line(path: Path) -> bool:
    """Cut a half-written last row (a run killed mid-write) so that resuming appends after whole rows.

    The writer ends every row with a newline, so bytes after the last newline are a row it did not
    finish; they are dropped (and the row measured again) with a note on stderr. Returns False if
    not even the header survived (the caller then starts the file afresh)."""
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return True
    keep = data.rfind(b"\n") + 1
    with open(path, "r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    if keep:
        print(f"note: {path.name}: dropped a half-written last row ({len(data) - keep} bytes) left by a killed run; "
              "it is measured again", file=sys.stderr, flush=True)
    return keep > 0


def _check_same_config(old: dict, new: dict, ignore: set[str], path: Path) -> None:
    changed = sorted(k for k in set(old) | set(new) if k not in ignore and old.get(k) != new.get(k))
    if changed:
        diffs = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed)
        raise SchemaMismatch(f"cannot resume {path}: the config changed ({diffs}); rerun without --resume")


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
