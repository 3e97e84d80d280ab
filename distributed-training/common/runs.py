"""Run folders: where a run writes, who may write there, and how results reach results/.

Each lab's `results/` holds what its report reads and what git tracks. No run writes there
directly. A run writes into its own run folder, `<lab>/runs/<tag>/` (git ignores `runs/`), one
folder per result set, named for its hardware, world size and nodes (sweep_cpu_ws4, cpu_ws1, ...):

    fresh run     an earlier run folder whose results never reached results/ is set aside as
                  runs/<tag>@<UTC time>/ (nothing is deleted), then the folder starts empty
    --resume      continues the folder's rows (a half-written last row is repaired first)
    lock          runs/<tag>.lock, an flock held while the run writes; a second run of the same
                  tag is refused with one line naming the holder (pid, host, start, command). The
                  kernel drops the lock when its holder dies, even by kill -9. A make target whose
                  launches all write one folder (fsdp-scaling's sweep) holds it across all of them
                  (`hold`): one sweep is one run folder, and a second is refused between launches too
    promotion     when the run is complete, its files are copied into results/: each written
                  aside in the same folder, fsync'ed, then renamed over the old one (os.replace is
                  atomic), so results/ holds the old file or the new one, never half of one.
                  A tb/ folder (TensorBoard events) stays in the run folder.
                  `--promote auto` (the default) replaces results only for a run of the preset
                  (no measurement flag changed); an experiment stays in its run folder and says
                  how to publish it. `--promote merge` adds its rows to results/ by key (rows with
                  the same key are replaced), `replace` replaces even for an experiment, `no` never

An interrupted, failed or refused run therefore never changes results/. By hand:

    python -m common.runs status distributed-training/*/runs/*      # what each run folder holds
    python -m common.runs promote distributed-training/fp8-train/runs/cpu [--merge]
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from .config import changed_flags
from .failures import shown

MANIFEST = "run.json"
PROMOTE_CHOICES = ("auto", "replace", "merge", "no")
_SKIP_SUFFIXES = (".pt", ".tmp", ".lock")
# Folders that stay in the run folder: TensorBoard event files (binary, growing, the host name in
# their file names) are for watching a run, not results; reports read the CSVs.
_KEPT_IN_RUN_FOLDER = ("tb",)


class RunError(ValueError):
    """A run folder that cannot be used as asked; str() is one line (callers exit 2)."""


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")


def results_path(given: str | Path | None, lab: Path, *default: str) -> Path:
    """Where a lab publishes: the path given (--results), else <lab>/results[/default...]."""
    return Path(given) if given else lab.joinpath("results", *default)


def run_dir_for(results_root: Path, tag: str) -> Path:
    """The run folder of results written under `results_root`: beside a lab's results/ folder, runs/<tag>; under
    any other folder (`--results /some/dir` publishes into /some), inside it: runs/ beside /some would be /runs."""
    results_root = Path(results_root)
    base = results_root.parent if results_root.name == "results" else results_root
    return base / "runs" / tag


# ---- the lock ---------------------------------------------------------------------------------
#
# An exclusive flock held by the writer for the whole run; a probe (check_free, `status`) takes a *shared*
# flock for an instant: shared locks do not conflict with each other, so two concurrent checks never see
# each other as the holder, while a writer's exclusive lock refuses every probe. The file holds the current
# holder's line only: written once the lock is taken, cleared before it is released (a holder killed by -9
# leaves its line but no lock, and the next writer replaces the line). A writer that meets a lock with no
# line (a probe's instant, or a run starting) retries for a moment; a lock with a line refuses it.
#
# Shared filesystems (NFS, Lustre, GPFS): on Linux, flock on NFS is carried by the server's byte-range
# locks, so it holds across nodes when the mount does locking: NFSv4 always; NFSv3 only with lockd/statd
# running and without the `nolock` or `local_lock=flock|all` mount options (those make the lock
# node-local, and two nodes would both "hold" it). Lustre needs the `flock` mount option (`localflock` is
# node-local; without either, flock fails and we say so). A node that dies holding a lock releases it when
# its NFSv4 lease expires (about 90 s). Within a job only global rank 0 takes the lock (common.runs callers).

_ACQUIRE_WAIT_S = 2.0  # a lock held with no holder line yet: a probe, or a run starting
_ACQUIRE_GRACE_S = 0.2  # a lock held with a holder line: a run
_HELD: dict[Path, "Lock"] = {}  # lock files this process holds (a probe must not touch them: see lock_holder)
HELD_ENV = "DT_RUN_LOCKS"  # {lock file: holder line} of the locks the processes above this one hold (`hold`)


def _lock_path(run_dir: Path) -> Path:
    return run_dir.with_name(run_dir.name + ".lock")


def _flock(f, op: int, path: Path) -> bool:
    """flock(op | LOCK_NB): True if taken, False if another process holds a conflicting lock; a filesystem
    without working locks is a RunError (one line) rather than a traceback."""
    try:
        fcntl.flock(f.fileno(), op | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:  # ENOLCK (NFSv3 without lockd), EOPNOTSUPP/ENOSYS (Lustre without -o flock)
        raise RunError(f"cannot lock {shown(path)}: {e.strerror}; the filesystem does not support file locks "
                       "(NFSv3 needs lockd, Lustre the `flock` mount option; common/runs.py says more)") from None


def _holder_line(f) -> str:
    f.seek(0)
    return f.read().strip() or "another process, starting"


def _held_above(path: Path) -> str | None:
    """The holder line of `path` if a process above this one holds it for this invocation (`hold`): the line
    DT_RUN_LOCKS names is still the file's, under a lock still held. None otherwise (a holder that died leaves
    its line but no lock: then this process takes the lock itself, as any other would)."""
    try:
        line = json.loads(os.environ.get(HELD_ENV) or "{}").get(str(path.resolve()))
    except (json.JSONDecodeError, AttributeError):
        return None
    if not line or not path.exists():
        return None
    with open(path, "a+") as f:
        if _holder_line(f) != line:
            return None
        if _flock(f, fcntl.LOCK_SH, path):  # nobody holds it any more
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            return None
    return line


def lock_holder(run_dir: Path) -> str | None:
    """Who holds the run folder's lock now (pid, host, start, command), or None if nobody does, or the
    invocation this process belongs to does (a launch of a sweep that `hold` runs)."""
    path = _lock_path(run_dir)
    if path.resolve() in _HELD:  # ours: probing would drop it on NFS (POSIX locks belong to the process)
        return None if _HELD[path.resolve()].inherited else _HELD[path.resolve()].holder
    if not path.exists():
        return None
    if _held_above(path):
        return None
    with open(path, "a+") as f:
        if not _flock(f, fcntl.LOCK_SH, path):
            return _holder_line(f)
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return None


def busy_message(run_dir: Path, holder: str) -> str:
    return (f"{shown(run_dir)} is being written by another run ({holder}); wait for it to finish or stop it, "
            "then run again (two runs at once would mix their rows)")


class Lock:
    """An exclusive flock on runs/<tag>.lock, with the current holder described inside the file."""

    def __init__(self, run_dir: Path):
        self.path = _lock_path(run_dir)
        self.run_dir = run_dir
        self.holder = ""
        self.inherited = False  # held by the invocation above this process (`hold`): used, never released here
        self._f = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.resolve() in _HELD:
            raise RunError(busy_message(self.run_dir, _HELD[self.path.resolve()].holder))
        line = _held_above(self.path)
        if line:
            self.holder, self.inherited = line, True
            _HELD[self.path.resolve()] = self
            return
        f = open(self.path, "a+")
        start = time.monotonic()
        try:
            while not _flock(f, fcntl.LOCK_EX, self.path):
                # A probe holds the lock for an instant and writes no line; a run's line is there within
                # moments of its lock. Wait out the first, refuse the second (after a short grace, in case
                # the line is a dead holder's that a probe's instant happened to expose).
                waited, named = time.monotonic() - start, _holder_line(f) != "another process, starting"
                if waited > (_ACQUIRE_GRACE_S if named else _ACQUIRE_WAIT_S):
                    raise RunError(busy_message(self.run_dir, _holder_line(f)))
                time.sleep(0.02)
        except BaseException:
            f.close()
            raise
        f.seek(0)
        f.truncate()
        cmd = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv))
        cmd = cmd if len(cmd) <= 160 else f"{cmd[:100]} ... {cmd[-55:]}"  # its end: what a preflight holds it for
        self.holder = f"pid {os.getpid()} on {socket.gethostname()}, started {_stamp()}: {cmd}"
        f.write(self.holder + "\n")
        f.flush()
        os.fsync(f.fileno())  # other nodes read the holder's line over NFS
        self._f = f
        _HELD[self.path.resolve()] = self

    def release(self) -> None:
        if self.inherited:
            _HELD.pop(self.path.resolve(), None)
            self.inherited = False
        if self._f is not None:
            _HELD.pop(self.path.resolve(), None)
            self._f.seek(0)
            self._f.truncate()  # the file names the current holder only
            self._f.flush()
            fcntl.flock(self._f.fileno(), fcntl.LOCK_UN)
            self._f.close()
            self._f = None


def hold(lock: Lock | None, argv: Sequence[str]) -> int:
    """Run `argv` (the rest of one make target invocation: its launches) with `lock` held until it ends, then
    release it; its exit code (128+N if a signal N ended it). The command and everything it starts find the
    lock in DT_RUN_LOCKS and write under it; any other process is refused, whichever launch is running.

    The command runs in its own process group: a Ctrl-C or SIGTERM that reaches this process is passed to all
    of it once, and the lock stays held until the command has ended. lock=None runs it without one (a node of
    a multi-node job other than the one whose rank 0 takes the lock at its launch)."""
    env = dict(os.environ)
    if lock is not None:
        try:
            held = json.loads(env.get(HELD_ENV) or "{}")
        except json.JSONDecodeError:
            held = {}
        env[HELD_ENV] = json.dumps({**held, str(lock.path.resolve()): lock.holder})
    try:
        try:
            proc = subprocess.Popen(list(argv), env=env, preexec_fn=os.setpgrp)
        except OSError as e:
            raise RunError(f"cannot run {argv[0] if argv else '(nothing)'}: {e.strerror}") from None
        def forward(sig, _frame) -> None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:  # it has just ended
                pass

        before = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            code = proc.wait()
        finally:
            for s, handler in before.items():
                signal.signal(s, handler)
    finally:
        if lock is not None:
            lock.release()
    return 128 - code if code < 0 else code


# ---- the manifest ------------------------------------------------------------------------------

def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not path.is_file():
        raise RunError(f"{shown(run_dir)} is not a run folder (no {MANIFEST})")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RunError(f"{shown(path)} is damaged; move the folder away") from None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def data_rows(run_dir: Path) -> int:
    """Rows in the folder's CSVs (a header alone does not count)."""
    n = 0
    for p in run_dir.rglob("*.csv"):
        with open(p, "rb") as f:
            n += max(0, sum(1 for _ in f) - 1)
    return n


# ---- a run folder -----------------------------------------------------------------------------

@dataclass
class RunFolder:
    """The folder one run writes into (rank 0 only), and where its results go when it completes."""

    path: Path
    target: Path
    mode: str  # fresh | resume | append
    lock: Lock | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path, target: Path, mode: str = "fresh") -> "RunFolder":
        """Take the lock and prepare the folder: `fresh` (set an unpublished earlier run aside),
        `resume` (the folder must exist), `append` (keep what is there, create it if missing)."""
        if mode not in ("fresh", "resume", "append"):
            raise ValueError(f"mode must be fresh, resume or append, got {mode!r}")
        path, target = Path(path), Path(target)
        if mode == "resume":
            check_resumable(path)
        lock = Lock(path)
        lock.acquire()
        run = cls(path, target, mode, lock)
        try:
            run._prepare()
        except BaseException:
            lock.release()
            raise
        return run

    def _prepare(self) -> None:
        exists = (self.path / MANIFEST).is_file()
        if self.mode == "fresh" and self.path.exists():
            state = read_manifest(self.path).get("state") if exists else "unknown"
            if state in ("promoted", "merged") or data_rows(self.path) == 0:
                shutil.rmtree(self.path)
            else:
                aside = self.path.with_name(f"{self.path.name}@{_stamp()}")
                n = 1
                while aside.exists():  # two fresh starts within a second
                    aside, n = self.path.with_name(f"{self.path.name}@{_stamp()}-{n}"), n + 1
                self.path.rename(aside)
                self.notes.append(f"note: the earlier unpublished run in {shown(self.path)} is kept as "
                                  f"{shown(aside)}")
            exists = False
        self.path.mkdir(parents=True, exist_ok=True)
        if exists:
            self.manifest = read_manifest(self.path)
            self.manifest["state"] = "running"
        else:
            self.manifest = {"started_utc": _stamp(), "state": "running", "keys": {}, "preset": True, "changed": []}
        self.manifest["target"] = os.path.relpath(self.target, self.path)
        self.manifest["command"] = " ".join(sys.argv)[:300]
        self._save()

    def _save(self) -> None:
        _write_json(self.path / MANIFEST, self.manifest)

    def file(self, name: str, key: Iterable[str] | None = None) -> Path:
        """Path of a result file in the folder; `key` (the row key) is remembered for merging."""
        if key is not None:
            self.manifest["keys"][name] = list(key)
            self._save()
        return self.path / name

    def writer(self, name: str, columns: Iterable[str], key: Iterable[str], provenance: dict[str, Any], **kw):
        """A ResultsWriter on a file of this folder, resuming unless the folder is fresh."""
        from .results import ResultsWriter  # results imports torch; this module stays light
        key = list(key)
        return ResultsWriter(self.file(name, key), columns, key, provenance, resume=self.mode != "fresh", **kw)

    def finish(self, complete: bool, changed: list[str], promote: str = "auto") -> list[str]:
        """Record the outcome; promote a complete run as `promote` asks. Returns lines to print."""
        self.manifest.update(state="complete" if complete else "incomplete", preset=not changed, changed=changed)
        self._save()
        try:
            if not complete:
                return [f"results so far in {shown(self.path)} (results/ unchanged); rerun with --resume to finish"]
            how = promote
            if promote == "auto":
                how = "no" if changed else "replace"
            if how == "no":
                if promote == "auto":
                    flags = ", ".join(changed[:6])
                    return [f"experiment ({flags} differ from the preset): results kept in {shown(self.path)}, "
                            f"{shown(self.target)} unchanged; publish with `python -m common.runs promote "
                            f"{shown(self.path)} [--merge]` or rerun with --promote merge|replace"]
                return [f"results kept in {shown(self.path)} (--promote no)"]
            try:
                files = promote_run(self.path, merge=how == "merge")
            except RunError as e:  # e.g. --promote merge into a file with other columns: the run itself is safe
                from .failures import BAD_INPUT, report
                report(f"could not publish: {e}; the complete run stays in {shown(self.path)}", BAD_INPUT)
                raise SystemExit(BAD_INPUT) from None
            return [f"{'merged' if how == 'merge' else 'published'} {len(files)} file(s) into {shown(self.target)}"]
        finally:
            self.close()

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def experiment_flags(cfg: Any, preset: Any, operational: Sequence[str] = ()) -> list[str]:
    """The one rule every publishing target applies: the flags in which `cfg` differs from `preset`, the
    target's own settings (its config as make runs it, resolved the same way), leaving out `operational`
    ones, which say where, on what or how to run and never change a row (the GPU preset, output paths,
    timeouts, --resume, --promote). None: the preset's run, which replaces results/ when complete; any: an
    experiment, which stays in runs/ (RunFolder.finish with --promote auto), whether or not this target's
    rows depend on the flag: its config would record a setting its rows were not produced with."""
    return changed_flags(cfg, preset, operational)


def check_resumable(path: Path) -> None:
    """--resume needs an earlier run folder to continue."""
    if not (path / MANIFEST).is_file():
        raise RunError(f"--resume: nothing to resume in {shown(path)} (no earlier run of this kind has started "
                       "there); run without --resume")


def check_free(path: Path) -> None:
    """Before launching: refuse while another run holds the folder."""
    holder = lock_holder(path)
    if holder:
        raise RunError(busy_message(path, holder))


# ---- promotion ---------------------------------------------------------------------------------

def _result_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file() and p.name != MANIFEST
                  and not p.name.endswith(_SKIP_SUFFIXES) and not p.name.startswith(".")
                  and p.relative_to(run_dir).parts[0] not in _KEPT_IN_RUN_FOLDER)


def _read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    from .csvread import BadResults, Schema, _parse
    try:
        header, rows, _ = _parse(path, Schema(path.stem, allow_empty=True))
    except BadResults as e:
        raise RunError(str(e)) from None
    return header, rows


def _merged_csv(run_csv: Path, target_csv: Path, key: list[str]) -> list[list[str]]:
    header, rows = _read_rows(run_csv)
    if not target_csv.exists():
        return [header] + rows
    old_header, old_rows = _read_rows(target_csv)
    if old_header != header:
        # Rows written before a column existed (or after one was dropped) keep their cells; the columns one side
        # lacks are empty there, which the reports read as "not recorded" (a run that predates the column).
        missing = [k for k in key if k not in old_header]
        if missing:
            raise RunError(f"cannot merge {shown(run_csv)} into {shown(target_csv)}: the old file lacks the key "
                           f"column(s) {', '.join(missing)}; publish it with replace instead, or move the old file away")
        header, rows, old_rows = _union(header, rows, old_header, old_rows)
    idx = [header.index(k) for k in key]
    new = {tuple(r[i] for i in idx): r for r in rows}
    out = [new.pop(tuple(r[i] for i in idx), r) for r in old_rows]
    return [header] + out + [r for r in rows if tuple(r[i] for i in idx) in new]


def _union(header: list[str], rows: list[list[str]], old_header: list[str],
           old_rows: list[list[str]]) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """Both files' rows under one header: the new run's columns in its order, then the old file's others."""
    union = header + [c for c in old_header if c not in header]

    def widen(cols: list[str], rs: list[list[str]]) -> list[list[str]]:
        where = {c: i for i, c in enumerate(cols)}
        return [[r[where[c]] if c in where else "" for c in union] for r in rs]
    return union, widen(header, rows), widen(old_header, old_rows)


def _merged_config(run_json: Path, target_json: Path) -> str:
    """A merged result's config: the target's, with every merged run's config listed under "merged"."""
    new = json.loads(run_json.read_text())
    if not target_json.exists():
        return json.dumps(new, indent=2, sort_keys=True) + "\n"
    old = json.loads(target_json.read_text())
    old.setdefault("merged", []).append({k: v for k, v in new.items() if k != "merged"})
    return json.dumps(old, indent=2, sort_keys=True) + "\n"


def _copy_synced(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
        fout.flush()
        os.fsync(fout.fileno())


def promote_run(run_dir: Path, merge: bool = False) -> list[Path]:
    """Copy a run folder's results into its target: each file written aside, then renamed over the old one."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    if not merge and manifest.get("state") not in ("complete", "promoted", "merged"):
        raise RunError(f"{shown(run_dir)} holds an unfinished run ({manifest.get('state')}); finish it with --resume "
                       "or publish its rows with --merge")
    target = (run_dir / manifest["target"]).resolve()
    keys = manifest.get("keys", {})
    files = _result_files(run_dir)
    for src in files:  # a damaged file is refused, never published: check them all before touching target
        if src.suffix == ".csv":
            _read_rows(src)
    staged: list[tuple[Path, Path]] = []
    try:
        for src in files:
            rel = src.relative_to(run_dir)
            dst = target / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f".{dst.name}.promote.tmp")
            if src.suffix == ".csv" and merge and rel.as_posix() in keys:
                with open(tmp, "w", newline="") as f:
                    csv.writer(f).writerows(_merged_csv(src, dst, keys[rel.as_posix()]))
                    f.flush()
                    os.fsync(f.fileno())
            elif src.suffix == ".csv":
                _copy_synced(src, tmp)
            elif merge and src.name.endswith(".config.json"):
                tmp.write_text(_merged_config(src, dst))
            else:
                _copy_synced(src, tmp)
            staged.append((tmp, dst))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, dst in staged:
        os.replace(tmp, dst)
    for d in {dst.parent for _, dst in staged}:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    manifest["state"] = "merged" if merge else "promoted"
    manifest["published_utc"] = _stamp()
    _write_json(run_dir / MANIFEST, manifest)
    return [dst for _, dst in staged]


# ---- command line ------------------------------------------------------------------------------

def _status(run_dir: Path) -> str:
    m = read_manifest(run_dir)
    holder = lock_holder(run_dir)
    what = f"{m.get('state')}, {data_rows(run_dir)} rows, " + ("preset" if m.get("preset") else
                                                               f"experiment ({', '.join(m.get('changed', []))})")
    return f"{shown(run_dir)}: {what}; target {shown((run_dir / m['target']).resolve())}" + \
        (f"; in use: {holder}" if holder else "")


def main(argv: list[str] | None = None) -> int:
    from .config import OneLineParser
    parser = OneLineParser(prog="common.runs", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("status", help="what run folders hold")
    st.add_argument("run_dirs", nargs="+", type=Path)
    pr = sub.add_parser("promote", help="publish a run folder into its results/")
    pr.add_argument("run_dir", type=Path)
    pr.add_argument("--merge", action="store_true", help="add rows by key instead of replacing files")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "status":
            for d in args.run_dirs:
                if d.is_dir():
                    print(_status(d))
            return 0
        check_free(args.run_dir)
        files = promote_run(args.run_dir, merge=args.merge)
        print(f"{'merged' if args.merge else 'published'} {len(files)} file(s) from {shown(args.run_dir)}")
        return 0
    except RunError as e:
        print(f"common.runs: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
