"""Run a function on N gloo ranks on the CPU, for tests.

    def _check(env, n):                 # a module-level or nested function; fork needs no pickling
        t = torch.full((n,), float(env.rank))
        dist.all_reduce(t)
        return t.tolist()

    results = run_ranks(_check, 4, 3)   # [result of rank 0, ..., rank 3]

Ranks are started with fork, not spawn: a forked child inherits the parent's imported torch and
starts in well under a second, where spawn re-imports torch per child (6-20 s per test on two
cores; ../shared/reference/cpu-feasibility.md section 0). Each call gets a free port, so tests
can run back to back or in parallel. The children go through the same torchrun environment
contract as real runs (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT ->
common.dist.distributed), with one intra-op thread each so N ranks do not fight over 2 cores.

A rank that raises makes run_ranks raise RankFailed with that rank's traceback; a rank that
hangs is killed at `timeout_s` and reported.

The bad-input matrices of every lab use expect_bad_input(): exit code 2, one line on stderr, nothing
on stdout, no file changed under the watched folders; and git_status() before and after a module.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
import traceback
from typing import Any, Callable

import torch

from .dist import distributed


class RankFailed(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank: int, world: int, port: int, queue, args, kwargs, env_extra: dict[str, str]) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
                       **env_extra})
    torch.set_num_threads(1)
    try:
        with distributed(device="cpu", timeout_s=60) as env:
            # Report before the group is torn down: a failing rank's own error must reach the
            # queue ahead of the "connection reset" its exit causes on the other ranks.
            try:
                queue.put((rank, True, fn(env, *args, **kwargs)))
            except BaseException:  # noqa: BLE001 - report everything, SystemExit included
                queue.put((rank, False, traceback.format_exc()))
    except BaseException:  # noqa: BLE001 - init/teardown failures
        queue.put((rank, False, traceback.format_exc()))
    finally:
        # Skip atexit handlers and pytest's inherited state: the child's job is done.
        os._exit(0)


def run_ranks(fn: Callable[..., Any], world_size: int, *args, timeout_s: float = 120.0,
              env: dict[str, str] | None = None, **kwargs) -> list[Any]:
    """Run fn(DistInfo, *args, **kwargs) on `world_size` forked gloo ranks; return results by rank."""
    ctx = mp.get_context("fork")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(fn, r, world_size, port, queue, args, kwargs, env or {}),
                         daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    # Stop at the first failure: its peers would otherwise sit in a collective until gloo's timeout.
    while len(results) < world_size and not errors and time.monotonic() < deadline:
        if queue.empty():
            if all(not p.is_alive() for p in procs) and queue.empty():
                break
            time.sleep(0.01)
            continue
        rank, ok, value = queue.get()
        (results if ok else errors)[rank] = value
    for p in procs:
        p.join(timeout=0 if errors else max(0.0, deadline - time.monotonic()) + 1.0)
        if p.is_alive():
            p.kill()
            p.join()
    if errors:  # the first error to arrive is the cause; peers' errors follow from it
        rank, tb = next(iter(errors.items()))
        raise RankFailed(f"rank {rank} of {world_size} failed:\n{tb}")
    missing = sorted(set(range(world_size)) - set(results))
    if missing:
        raise RankFailed(f"ranks {missing} of {world_size} produced no result within {timeout_s:.0f} s "
                         f"(hung or died; exit codes {[p.exitcode for p in procs]})")
    return [results[r] for r in range(world_size)]


H100_PROVENANCE = {"hardware": "1x NVIDIA H100 80GB HBM3", "backend": "nccl", "cuda_version": "13.0",
                   "nccl_version": "2.28.9", "driver_version": "580.159.04", "torch_version": "2.11.0+cu130"}


def as_gpu_rows(df, **extra):
    """A copy of CPU result rows relabelled as one H100's, for testing report generators on GPU-shaped
    CSVs beside CPU ones (never written anywhere but a test's temporary folder)."""
    return df.assign(**{**H100_PROVENANCE, **extra})


# ---- bad input: one line, exit 2, nothing written (the project contract), checked the same way everywhere

def tree_state(root) -> list[tuple[str, int, int]]:
    """Every file under `root` (results/, runs/, reports...) with its size and mtime: what "writes nothing" means."""
    from pathlib import Path
    root = Path(root)
    if root.is_file():
        return [(root.name, root.stat().st_size, root.stat().st_mtime_ns)]
    if not root.exists():
        return []
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def git_status(path) -> str | None:
    """`git status --porcelain` of the checkout holding `path` (tracked changes, new files); None without git."""
    import subprocess
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


# ---- shared pieces of every lab's bad-input matrix (tests/test_bad_input.py) ----------------------

def no_gpu_mark():
    """Skip a case that checks a refusal only a machine without a GPU gives."""
    import pytest
    return pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")


def keep_tracked_files(lab):
    """A module-scoped autouse fixture: after all of a module's cases, `git status` of `lab` is as before."""
    import pytest

    @pytest.fixture(scope="module", autouse=True)
    def _unchanged():
        before = git_status(lab)
        yield
        assert git_status(lab) == before
    return _unchanged


def report_opening(report_main: Callable[[list[str]], Any], tmp_path) -> dict[str, str]:
    """A lab's report generated from tmp_path/results into tmp_path/REPORT.md: its opening findings by label,
    after checking that they come first (within the first 15 lines, under "## What we found")."""
    from .findings import read_block
    out = tmp_path / "REPORT.md"
    assert report_main(["--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines.index("<!-- /findings -->") < 15 and "## What we found" in lines[:4]
    return {f.label: f.text for f in read_block(out)}


def expect_report_refuses(report_main: Callable[[list[str]], Any], lab, damage: Callable, needle: str, tmp_path,
                          capsys) -> str:
    """A copy of `lab`/results damaged by damage(folder): the report generator says so in one line, exit 2."""
    import shutil
    results = tmp_path / "results"
    shutil.copytree(lab / "results", results)
    damage(results)
    return expect_bad_input(lambda: report_main(["--results", str(results), "--out", str(tmp_path / "REPORT.md")]),
                            needle, capsys, watch=[tmp_path])


# ---- every committed input of a report, damaged every way: one line, exit 2 (tests/test_damaged_inputs.py)

DAMAGES = ("cut", "binary", "empty", "one-byte", "wrong-type", "nan", "bom", "repeated-row")
_OPENED: list[str] | None = None  # while not None, every file this process opens (an audit hook, installed once)


def _audit(event: str, args) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.path.realpath(os.fsdecode(args[0])))


def opened_during(call: Callable[[], Any]) -> tuple[Any, set[str]]:
    """call()'s result (or the SystemExit it raised) and the real paths of every file it opened."""
    global _OPENED
    if not getattr(opened_during, "hooked", False):
        import sys
        sys.addaudithook(_audit)
        opened_during.hooked = True
    _OPENED = []
    try:
        try:
            result = call()
        except SystemExit as e:
            result = e
    finally:
        seen, _OPENED = set(_OPENED), None
    return result, seen


def _numeric_cells(raw: bytes, replacement: str, floats_only: bool, keep: tuple[str, ...] = ()) -> bytes | None:
    """A CSV with the numbers of its first data row replaced (only those that are not whole numbers, where
    `floats_only` and the row has such: a NaN where a measurement was), but in the columns `keep`; None if that
    row holds no other number."""
    import csv
    import io
    text = raw.decode("utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if len(rows) < 2:
        return None

    def number(cell: str, whole_too: bool) -> bool:
        try:
            float(cell)
        except ValueError:
            return False
        return whole_too or not cell.strip().lstrip("+-").isdigit()

    cells = [(j, c) for j, c in enumerate(rows[1]) if j < len(rows[0]) and rows[0][j] not in keep]
    whole_too = not (floats_only and any(number(c, False) for _, c in cells))
    hits = [j for j, cell in cells if number(cell, whole_too)]
    if not hits:
        return None
    for j in hits:
        rows[1][j] = replacement
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def damaged(raw: bytes, suffix: str, kind: str, observed: tuple[str, ...] = ()) -> bytes | None:
    """`raw` (a .csv, .json or .md the labs wrote) damaged as `kind` (one of DAMAGES); None where the damage
    means nothing for that kind of file (a cut or one-byte text file is still text). A NaN is never put in the
    `observed` columns, where it is a measurement the report shows as such (a diverged loss)."""
    text_only = suffix == ".md"
    if kind == "binary":
        return b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe" + raw[:64]
    if kind == "empty":
        return b""
    if kind == "bom":
        return b"\xef\xbb\xbf" + raw
    if text_only:
        return None
    if kind == "one-byte":
        return b"x"
    if kind == "cut":  # in the middle of the last row (a run killed while writing it), or of the JSON text
        body = raw.rstrip(b"\n")
        start = body.rfind(b"\n") + 1 if suffix == ".csv" else 0
        return body[:start + max(1, (len(body) - start) // 2)]
    if suffix == ".json":
        if kind == "repeated-row":
            return None
        return b"[" + raw + b"]" if kind == "wrong-type" else raw.replace(b"{", b'{"damaged": NaN, ', 1)
    if kind == "repeated-row":  # the first row twice: two runs' rows mixed, or a resume that wrote one again
        lines = raw.splitlines(keepends=True)
        return raw + lines[1] if len(lines) > 1 and raw.endswith(b"\n") else None
    return _numeric_cells(raw, "abc" if kind == "wrong-type" else "nan", kind == "nan", observed)


def damaged_inputs_problems(report_main: Callable[[list[str]], Any], lab, tmp_path, capsys,
                            observed: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """Every input the report reads in a copy of `lab`/results (found by watching a clean run open them), damaged:
    the report must exit 2 with one line on stderr that names the file, and print nothing else. The first file of
    each name (steps.csv, sweep_cpu_ws4.csv, ...) is damaged each way of DAMAGES in turn, every other file of that
    name one way, the next in DAMAGES each time (the same reader, and every file still checked: fp8-train's many
    folders would take minutes otherwise). `observed`: per file name, the columns where the report shows NaN as
    NaN (common.csvread.Schema.nonfinite). Returns what went otherwise, one entry per case ([] when all held)."""
    import shutil
    from pathlib import Path
    results = tmp_path / "results"
    shutil.copytree(Path(lab) / "results", results)
    argv = ["--results", str(results), "--out", str(tmp_path / "REPORT.md")]
    code, opened = opened_during(lambda: report_main(argv))
    capsys.readouterr()
    assert code in (0, None), f"the report fails on the committed results: {code}"
    inputs = sorted(p for p in results.rglob("*") if p.suffix in (".csv", ".json", ".md")
                    and os.path.realpath(p) in opened)
    assert inputs, "the report opened none of its results"
    problems, seen, turn = [], set(), 0
    for path in inputs:
        raw = path.read_bytes()
        kinds = DAMAGES if path.name not in seen else [DAMAGES[turn % len(DAMAGES)]]
        turn += path.name in seen
        seen.add(path.name)
        for kind in kinds:
            bad = damaged(raw, path.suffix, kind, (observed or {}).get(path.name, ()))
            if bad is None or bad == raw:
                continue
            path.write_bytes(bad)
            try:
                code, _ = opened_during(lambda: report_main(argv))
            except Exception as e:  # noqa: BLE001 - a traceback is what this looks for
                code = f"{type(e).__name__}: {str(e)[:120]}"
            finally:
                path.write_bytes(raw)
            out, err = capsys.readouterr()
            code = code.code if isinstance(code, SystemExit) else code
            lines = err.rstrip("\n").split("\n")
            if code != 2 or len(lines) != 1 or out or path.name not in lines[0]:
                problems.append(f"{path.relative_to(results)} {kind}: exit {code!r}, stderr {err[-300:]!r}")
    return problems


# ---- a fake NVIDIA driver: nvidia-smi as drivers 535/550/570/580 print it, or failing as without a driver

# (driver version, the CUDA version its nvidia-smi header names): CUDA toolkit release notes, table 3.
DRIVERS = {535: ("535.183.01", "12.2"), 550: ("550.54.15", "12.4"), 570: ("570.133.20", "12.8"),
           580: ("580.82.07", "13.0")}


def fake_nvidia_smi(folder, driver: int | str | None, gpus: int = 8, name: str = "NVIDIA H100 80GB HBM3",
                    compute_cap: str = "9.0"):
    """Write an executable `nvidia-smi` into `folder` (put it first on PATH) answering `nvidia-smi`, `-L` and
    `--query-gpu=name,compute_cap` like the named driver with `gpus` GPUs; driver=None fails like a machine
    whose driver is missing, "hang" never answers (a GPU in a bad state), "garbage" exits 0 with no driver
    in its output. Returns the script's path."""
    from pathlib import Path
    path = Path(folder) / "nvidia-smi"
    if driver is None:
        body = ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver. '
                'Make sure that the latest NVIDIA driver is installed and running."; exit 9')
    elif driver == "hang":
        body = "exec sleep 3600"  # exec: a timeout's kill reaches the sleep itself, not only its shell
    elif driver == "garbage":
        body = 'echo "Segmentation fault (core dumped) at 0x0"; echo "GPU ??: ERR!"'
    else:
        version, cuda = DRIVERS[driver]
        header = (f"+{'-' * 89}+\\n| NVIDIA-SMI {version:<22} Driver Version: {version:<14} "
                  f"CUDA Version: {cuda:<9}|\\n+{'-' * 89}+")
        body = (f'case "$1" in\n'
                f'  -L) i=0; while [ $i -lt {gpus} ]; do echo "GPU $i: {name} (UUID: GPU-$i)"; i=$((i+1)); done ;;\n'
                f'  --query-gpu=*) i=0; while [ $i -lt {gpus} ]; do echo "{name}, {compute_cap}"; i=$((i+1)); done ;;\n'
                f'  *) printf "{header}\\n" ;;\n'
                f'esac')
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


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
