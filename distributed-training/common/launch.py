"""torchrun with its errors told in one line: what `make` runs for every multi-rank target.

    python -m common.launch --standalone --nnodes 1 --nproc-per-node 4 allreduce-bench/bench.py --gpu cpu
    python -m common.launch check-port 127.0.0.1 29517       # exit 2 with one line if the port is taken

It takes torchrun's arguments (python -m torch.distributed.run) and starts the ranks with
torchrun's own launcher (torch.distributed.launcher.api.elastic_launch). Around it:

Before any rank starts. --nproc-per-node, --nnodes and --node-rank must be integers in range, and
the rendezvous port (--master-port, or --rdzv-endpoint's) in 1..65535 (make checks its variables
before this, common/make_vars.py); on node 0 of a static rendezvous the master port must be free; then the script runs once as a plain
process with DT_CHECK_ARGS=1 and DT_PLANNED_WORLD/_LOCAL (the world it will get), so it checks its
arguments, data paths, resume state and run-folder lock and stops where its process group would
start (common.dist.distributed). Bad input is that one line and exit 2; no rank is started.
A job of several nodes checks once, not once per node: DT_LAUNCH_PHASE=check runs only the
checks (slurm/lab.sbatch, before srun), DT_LAUNCH_PHASE=ranks only starts the ranks (under srun).

A job of several nodes first meets at its rendezvous (c10d at --rdzv-endpoint, or node 0's
--master-addr:--master-port with NODE_RANK): one line says where and for how many nodes it waits,
a line every 30 s how many have joined, and after DT_RDZV_TIMEOUT_S (300 s) it gives up in one
line (exit 4) instead of waiting torchrun's 600 s in silence.

While the ranks run, their output passes through. When one fails, torchrun stops the others:
SIGTERM, then SIGKILL after DT_GRACE_S seconds (default 3; torchrun waits a fixed 30), so a stuck
collective ends the job about --timeout-s after it stalled, not 30 s later. A SIGTERM or Ctrl-C to
the job itself keeps torchrun's graceful 30 s (TORCH_ELASTIC_SHUTDOWN_TIMEOUT), time for fp8-train
to write its checkpoint.

When it fails, one line names the root cause, read from the ranks' torchelastic error files
(common.failures): a rank's own error first (bad input found inside the ranks, a failed check, a
bug, whose traceback the rank printed above), then a rank killed by a signal (kill -9, the OOM
killer) or one that stopped answering while the others timed out, then a lost peer. The exit code
is that rank's (common.failures lists them; 128+N for signal N). torchrun's own multi-line report
and the ranks' C++ warnings (TORCH_CPP_LOG_LEVEL=ERROR) are not printed; DT_LAUNCH_VERBOSE=1 keeps
both.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import MethodType

from .config import env_seconds
from .failures import BAD_INPUT, INTERRUPTED, PEER_LOST, PREEMPTED


def _error(msg: str) -> int:
    print(f"launch: error: {msg}", file=sys.stderr, flush=True)
    return BAD_INPUT


def port_problem(host: str, port: int) -> str | None:
    """Why a rendezvous could not listen on host:port, or None if it can."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return f"cannot resolve {host} ({e.strerror})"
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind(addr)
        except OSError as e:
            if e.errno == 98 or "in use" in str(e).lower():
                return (f"port {port} on {host} is already in use by another program; a rendezvous there would "
                        "hang: pick another with MASTER_PORT=<port>")
            return f"cannot listen on {host}:{port} ({e.strerror})"
    return None


def _is_local(host: str) -> bool:
    if host in ("localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return socket.gethostbyname(host) in {"127.0.0.1", socket.gethostbyname(socket.gethostname())}
    except OSError:
        return False


def _positive(name: str, value: str, what: str) -> int | str:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return f"{name} must be a positive integer ({what}), got {value!r}"
    return n if n >= 1 else f"{name} must be a positive integer ({what}), got {n}"


def check(args) -> str | None:
    """Everything about the launch itself that can be wrong, as one line; None if nothing is."""
    nproc = _positive("NPROC (--nproc-per-node)", args.nproc_per_node, "ranks per node")
    if isinstance(nproc, str):
        return nproc
    low, _, high = str(args.nnodes).partition(":")
    for part in (low, high or low):
        n = _positive("NNODES (--nnodes)", part, "nodes, or MIN:MAX")
        if isinstance(n, str):
            return n
    nnodes = int(high or low)
    if not 0 <= int(args.node_rank) < nnodes:
        return f"NODE_RANK (--node-rank) must be in 0..{nnodes - 1}, got {args.node_rank}"
    # torch reads a port past 65535 only once the agent starts (a traceback), and getaddrinfo wraps it silently
    _, colon, port = str(args.rdzv_endpoint or "").rpartition(":")
    for name, value in (("MASTER_PORT (--master-port)", args.master_port),
                        ("the port of MASTER_ADDR:MASTER_PORT (--rdzv-endpoint)", port if colon and "]" not in port
                         else None)):
        if value is not None and not (str(value).isdigit() and 1 <= int(value) <= 65535):
            return f"{name} must be a TCP port, 1..65535, got {value!r}"
    if not args.module and not args.no_python and not Path(args.training_script).is_file():
        return f"no such script {args.training_script}"
    static_host = nnodes > 1 and args.rdzv_backend == "static" and int(args.node_rank) == 0
    if static_host and args.master_port and _is_local(args.master_addr):
        return port_problem(args.master_addr, int(args.master_port))
    return None


def phase() -> str:
    """DT_LAUNCH_PHASE: `all` (default: check, then start the ranks), `check` (the checks only: what a Slurm
    job runs once, on one node, before srun), `ranks` (start the ranks without checking again: what srun then
    runs on every node; also for a script that has no checks to make)."""
    value = os.environ.get("DT_LAUNCH_PHASE") or "all"
    if value not in PHASES:
        raise ValueError(f"DT_LAUNCH_PHASE must be one of {', '.join(PHASES)}, got {value!r}")
    return value


PHASES = ("all", "check", "ranks")


def check_pass(args) -> int:
    """The script once as a plain process that stops before its process group: its own checks."""
    if args.module or args.no_python:
        return 0
    nproc = int(args.nproc_per_node)
    nnodes = int(str(args.nnodes).partition(":")[2] or args.nnodes)
    env = {**os.environ, "DT_CHECK_ARGS": "1", "DT_PLANNED_WORLD": str(nproc * nnodes),
           "DT_PLANNED_LOCAL": str(nproc)}
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TORCHELASTIC_ERROR_FILE"):
        env.pop(var, None)
    return subprocess.run([sys.executable, args.training_script, *args.training_script_args], env=env).returncode


# The ranks torchrun's agent stopped itself after the first failure (their pids): victims of that failure,
# never its cause. torchrun records them as failures too (their SIGTERM exit, read in the same poll as the
# cause), and a victim may have a lower rank than the cause: which one is read first says nothing.
STOPPED_BY_AGENT: set[int] = set()


def _cap_failure_teardown(grace_s: float) -> None:
    """torchrun stops the surviving ranks after a failure with close() and a fixed 30 s wait; cap
    that wait (only there: a signal to the job passes death_sig and keeps its own timeout), and note
    which ranks were still running then (STOPPED_BY_AGENT): the first failure in time is not among them."""
    try:
        from torch.distributed.elastic.multiprocessing import api
        original = api.PContext.close
    except (ImportError, AttributeError):
        return  # another torch layout: torchrun's own timing applies

    def close(self, death_sig=None, timeout=30):
        if death_sig is None:  # after a failure (a signal to the job passes death_sig)
            handlers = getattr(self, "subprocess_handlers", None) or {}
            STOPPED_BY_AGENT.update(h.proc.pid for h in handlers.values() if h.proc.poll() is None)
        return original(self, death_sig, timeout if death_sig is not None else min(timeout, grace_s))

    api.PContext.close = close


# ---- a rendezvous of several nodes: said where, watched, bounded -------------------------------------------

def rdzv_timeout_s() -> float:
    """How long a multi-node launch waits for its nodes (DT_RDZV_TIMEOUT_S, default 300 s)."""
    return env_seconds("DT_RDZV_TIMEOUT_S", 300.0)


_WATCHED: "Rendezvous | None" = None  # the launch's rendezvous, for the handler wrappers (one launch per process)


class Rendezvous:
    """Where a multi-node launch meets, for how long, and (c10d) how many nodes have joined while it waits."""

    def __init__(self, args, nnodes: int):
        self.nnodes, self.static = nnodes, args.rdzv_backend == "static"
        self.endpoint = f"{args.master_addr}:{args.master_port}" if self.static else args.rdzv_endpoint
        conf = dict(kv.split("=", 1) for kv in str(args.rdzv_conf or "").split(",") if "=" in kv)
        key = "timeout" if self.static else "join_timeout"  # torchrun's default for both: 600 s
        if key not in conf:
            conf[key] = str(int(rdzv_timeout_s()))
        args.rdzv_conf = ",".join(f"{k}={v}" for k, v in conf.items())
        self.timeout_s = float(conf[key])
        self.what = (f"node {args.node_rank} of {nnodes}, static rendezvous at node 0" if self.static else
                     f"c10d rendezvous '{args.rdzv_id}'")
        self.done, self.handler, self.start, self.most = threading.Event(), None, time.monotonic(), None

    def joined(self) -> int | None:
        """The most nodes seen in the c10d rendezvous (the handler's synced state, torch's private layout: a node
        that gives up leaves it), else None."""
        try:
            n = len(self.handler._state_holder.state.participants)
        except AttributeError:
            return self.most
        self.most = max(n, self.most or 0)
        return self.most

    def status(self) -> str:
        n = self.joined()
        return f"{n} of {self.nnodes} nodes joined" if n is not None else f"waiting for {self.nnodes} nodes"

    def watch(self, every_s: float = 30.0) -> None:
        """Note when the rendezvous completes (its handler's next_rendezvous returns); a line every `every_s`
        until then (or until the launch ends: set `done`)."""
        global _WATCHED
        _WATCHED = self
        try:
            from torch.distributed.elastic.rendezvous import dynamic_rendezvous, static_tcp_rendezvous
            classes = [dynamic_rendezvous.DynamicRendezvousHandler, static_tcp_rendezvous.StaticTCPRendezvous]
        except (ImportError, AttributeError):
            classes = []
        for cls in classes:
            if getattr(cls.next_rendezvous, "watched", False):
                continue
            original = cls.next_rendezvous

            def next_rendezvous(handler, _original=original):
                watcher = _WATCHED
                if watcher is not None:
                    watcher.handler = handler
                info = _original(handler)
                if watcher is not None:
                    watcher.done.set()
                return info

            next_rendezvous.watched = True
            cls.next_rendezvous = next_rendezvous

        def report() -> None:
            while not self.done.wait(every_s):
                print(f"launch: still waiting at {self.endpoint}: {self.status()}, "
                      f"{time.monotonic() - self.start:.0f} s of {self.timeout_s:g} s", file=sys.stderr, flush=True)

        threading.Thread(target=report, name="rendezvous progress", daemon=True).start()

    def waiting_line(self) -> str:
        return (f"launch: waiting up to {self.timeout_s:g} s for {self.nnodes} nodes at {self.endpoint} ({self.what});"
                " start the same command on every node (DT_RDZV_TIMEOUT_S sets the wait)")

    def gave_up(self, e: BaseException) -> str:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else self.status()
        return (f"the rendezvous at {self.endpoint} did not gather {self.nnodes} nodes within {self.timeout_s:g} s "
                f"({detail}); start the same command on every node (NODE_RANK=0..{self.nnodes - 1}, or "
                "slurm/lab.sbatch), with MASTER_ADDR:MASTER_PORT reachable from each")


def _dt(data) -> dict:
    return data.get("dt", {}) if isinstance(data, dict) else {}


def _message(data) -> str:
    msg = data.get("message", "") if isinstance(data, dict) else ""
    msg = msg.get("message", "") if isinstance(msg, dict) else msg
    return str(msg).strip().splitlines()[0] if str(msg).strip() else ""


def _when(f) -> tuple[bool, float]:
    """When a rank failed, for ordering: (stopped by the agent after the first failure, time). The time is the
    rank's own (its error file), else when torchrun found it dead (whole seconds; ties go to the lower rank)."""
    stopped = getattr(f, "pid", None) in STOPPED_BY_AGENT
    return stopped, _dt(f.error_file_data).get("time_ns") or getattr(f, "timestamp", 0) * 1e9


def explain(failures: dict, world: int) -> tuple[str, int]:
    """(one line, exit code) for a failed job, from torchrun's ProcessFailure records: the first failure in
    time, never a rank the agent stopped because of it (its SIGTERM is an effect; STOPPED_BY_AGENT)."""
    info = {r: (_dt(f.error_file_data), _message(f.error_file_data) if f.error_file != "<N/A>" else "", f.exitcode)
            for r, f in failures.items()}
    order = sorted(failures, key=lambda r: (*_when(failures[r]), r))
    victims = {r for r in failures if _when(failures[r])[0]}

    def first(pred, stopped_too: bool = True):
        return next((r for r in order if pred(*info[r]) and (stopped_too or r not in victims)), None)

    r = first(lambda dt, msg, code: dt.get("kind") == "cause" or (msg and not dt))
    if r is not None:
        dt, msg, code = info[r]
        if not dt:  # an uncaught exception recorded by @record: a bug, its traceback is above
            return f"rank {r} of {world} raised {msg} (its traceback is above)", 1
        return f"rank {r} of {world}: {msg}", dt.get("code", code)
    timeouts = [x for x in order if info[x][0].get("kind") == "timeout"]
    # a rank killed by a signal on its own; or, when the others timed out waiting, one the agent had to kill
    r = first(lambda dt, msg, code: not dt and code < 0, stopped_too=bool(timeouts))
    if r is not None:
        sig = signal.Signals(-info[r][2]).name if -info[r][2] in signal.Signals._value2member_map_ else "?"
        if timeouts:
            return (f"rank {r} of {world} stopped answering: the others' collectives timed out (--timeout-s) and it "
                    f"was killed ({sig}); a frozen or stuck rank", PEER_LOST)
        return f"rank {r} of {world} died ({sig}); the other ranks lost it and were stopped", 128 - info[r][2]
    r = first(lambda dt, msg, code: dt.get("kind") == "interrupt")
    if r is not None:
        return "interrupted (Ctrl-C); what was measured so far is kept, --resume continues", INTERRUPTED
    r = first(lambda dt, msg, code: dt.get("kind") in ("peer", "timeout"))
    if r is not None:
        return f"rank {r} of {world}: {info[r][1]}", PEER_LOST
    r = order[0]
    code = info[r][2]
    return f"rank {r} of {world} exited with code {code} (its output is above)", code if code > 0 else 128 - code


def _after_signal(log_dir: str, sig: signal.Signals) -> tuple[str, int]:
    """The job was sent a signal: the ranks' own word if one saved its state, else the signal."""
    for path in sorted(glob.glob(os.path.join(log_dir, "**", "error.json"), recursive=True)):
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if _dt(data).get("code") == PREEMPTED:
            return _message(data), PREEMPTED
    if sig == signal.SIGINT:
        return "interrupted (Ctrl-C); what was measured so far is kept, --resume continues", INTERRUPTED
    return f"stopped by {sig.name}; what was measured so far is kept, --resume continues", 128 + int(sig)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check-port"]:
        if len(argv) != 3 or not argv[2].isdigit():
            return _error("usage: python -m common.launch check-port HOST PORT")
        problem = port_problem(argv[1], int(argv[2]))
        return _error(problem) if problem else 0
    from torch.distributed import run as torchrun

    parser = torchrun.get_args_parser()
    parser.prog = "launch"
    parser.error = MethodType(lambda self, msg: self.exit(BAD_INPUT, f"launch: error: {msg}\n"), parser)
    args = parser.parse_args(argv)
    try:
        when = phase()
    except ValueError as e:
        return _error(str(e))
    problem = check(args)
    if problem:
        return _error(problem)
    if when != "ranks":
        code = check_pass(args)
        if code or when == "check":
            return code
    world = int(args.nproc_per_node) * int(str(args.nnodes).partition(":")[2] or args.nnodes)
    os.environ["DT_LAUNCHER"] = "1"
    if os.environ.get("DT_LAUNCH_VERBOSE") != "1":
        logging.disable(logging.CRITICAL)  # this process only: torchrun's failure report and warnings
        # the ranks' c10d warnings (a peer's socket closing as the job stops) would bury the one line
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    _cap_failure_teardown(float(os.environ.get("DT_GRACE_S", "3")))
    log_dir = tempfile.mkdtemp(prefix="dt-launch-")
    args.log_dir = log_dir
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    nnodes = int(str(args.nnodes).partition(":")[2] or args.nnodes)
    rdzv = Rendezvous(args, nnodes) if nnodes > 1 else None
    if rdzv is not None:
        print(rdzv.waiting_line(), file=sys.stderr, flush=True)
        rdzv.watch(float(os.environ.get("DT_RDZV_REPORT_S", "30")))
    try:
        torchrun.run(args)
        return 0
    except ChildFailedError as e:
        line, code = explain(e.failures, world)
    except (RendezvousError, DistError) as e:  # the nodes never all met (torchrun's agent, before any rank)
        if rdzv is None or rdzv.done.is_set():
            raise
        line, code = rdzv.gave_up(e), PEER_LOST
    except SignalException as e:
        line, code = _after_signal(log_dir, e.sigval)
    except KeyboardInterrupt:
        line, code = _after_signal(log_dir, signal.SIGINT)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
        if rdzv is not None:
            rdzv.done.set()  # no progress line after the launch
    print(f"error: {line}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
