"""How a run ends: one exit code per cause, and each failure told once, in one line.

Exit codes of every runner (and of common.launch, which returns its root-cause rank's code):

    0     done
    1     a check inside the run failed (e.g. a collective returned wrong data), or a bug
    2     bad input: refused before anything ran or was written
    3     stopped by policy (fp8-train --on-nan stop; checkpoint written)
    4     a peer rank died, or a collective waited longer than --timeout-s
    75    stopped by SIGTERM after saving its state (a checkpoint, the rows so far); rerun with
          --resume. 75 is EX_TEMPFAIL: what a Slurm requeue script tests for "try again"
    130   interrupted by Ctrl-C (SIGINT); the rows so far are kept, --resume continues
    128+N a rank killed by signal N (137 = kill -9), as common.launch reports it

(`make` itself exits 2 whenever a recipe fails; its "Error N" line carries the runner's code.)

Under torchrun a failing rank writes its one line into torchelastic's error file
(TORCHELASTIC_ERROR_FILE, the file `torch.distributed.elastic.multiprocessing.errors.record`
writes for an uncaught exception), with the exit code and a kind: `cause` (this rank's own
failure), `peer` (it lost a peer), `timeout` (a collective timed out), `interrupt`. Started by
common.launch (DT_LAUNCHER=1) the rank prints nothing itself: the launcher reads the error files
and prints the root cause once. Run as a plain process or by plain torchrun, rank 0 prints it.

    if __name__ == "__main__":
        raise SystemExit(entrypoint(main))      # Ctrl-C, lost peers and bugs handled as above
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable

OK, FAILED, BAD_INPUT, STOPPED, PEER_LOST, PREEMPTED, INTERRUPTED = 0, 1, 2, 3, 4, 75, 130

# What gloo and NCCL say when a peer went away or a collective timed out (their exception types
# vary by version; DistBackendError is a RuntimeError). Matched on the message, lower-cased.
_TIMEOUT = re.compile(r"timed out|timeout|deadline")
_PEER = re.compile(r"connection (closed|reset|refused)|broken pipe|peer|socket|ecconnreset|econnreset|"
                   r"communicator was aborted|nccl error|failed to recv|failed to send|read error|write error")


def shown(path: Path) -> str:
    """A path as a one-line message shows it: relative to the working directory when it lies below it, else as
    given."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def under_launcher() -> bool:
    """True inside a rank started by common.launch: it reports failures, the rank stays quiet."""
    return os.environ.get("DT_LAUNCHER") == "1" and "TORCHELASTIC_ERROR_FILE" in os.environ


def write_error_file(message: str, code: int, kind: str, callstack: str = "") -> None:
    """torchelastic's error-file format (what @record writes), plus our exit code and kind."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {"message": {"message": message, "extraInfo": {"py_callstack": callstack,
                                                         "timestamp": str(int(time.time()))}},
            "dt": {"code": code, "kind": kind, "rank": _rank(), "time_ns": time.time_ns()}}
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError:
        pass  # the exit code still says it


def report(message: str, code: int = FAILED, kind: str = "cause") -> None:
    """Tell a failure once: into the error file under torchrun, on stderr where nobody else will."""
    write_error_file(message, code, kind)
    if under_launcher():
        return
    if "TORCHELASTIC_ERROR_FILE" not in os.environ:
        print(f"error: {message}", file=sys.stderr, flush=True)
    elif _rank() == 0:  # plain torchrun: rank 0 speaks for the job, torchrun's report has the rest
        print(f"error: rank 0: {message}", file=sys.stderr, flush=True)


def classify(e: BaseException) -> tuple[str, int] | None:
    """(kind, code) for a distributed failure that is not this rank's own fault, else None."""
    text = str(e).lower()
    names = {c.__name__ for c in type(e).__mro__}
    distributed = names & {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"}
    if not (distributed or isinstance(e, RuntimeError)):
        return None
    if _TIMEOUT.search(text):
        return "timeout", PEER_LOST
    if distributed or _PEER.search(text):
        return "peer", PEER_LOST
    return None


def short(e: BaseException) -> str:
    """An exception as one short line (gloo's "[/path/file.cc:78] " prefix dropped)."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return re.sub(r"^\[[^\]]*\]\s*", "", msg)[:200]


def entrypoint(main: Callable[[], int | None]) -> int:
    """Run a runner's main() as a program: its exit code, with Ctrl-C, a lost peer or a timed-out
    collective as one line and their own codes; a bug keeps its traceback (and, under torchrun,
    torchelastic's error file gets it through @record)."""
    from torch.distributed.elastic.multiprocessing.errors import record

    try:
        return record(main)() or 0
    except KeyboardInterrupt:
        return _interrupted()
    except Exception as e:  # noqa: BLE001 - sorted into lost peers (one line) and bugs (traceback)
        if _during_ctrl_c(e):  # Ctrl-C landed in a library's cleanup, which then failed (tqdm's lock)
            return _interrupted()
        kind = classify(e)
        if kind is None:
            raise
        what = "a collective timed out (a peer stopped answering; see --timeout-s)" if kind[0] == "timeout" \
            else "lost a peer rank (it died or closed its connection)"
        report(f"{what}: {short(e)}", kind[1], kind[0])
        return kind[1]


def _interrupted() -> int:
    report("interrupted (Ctrl-C); what was measured so far is kept, --resume continues", INTERRUPTED, "interrupt")
    return INTERRUPTED


def _during_ctrl_c(e: BaseException) -> bool:
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__context__
    return False
