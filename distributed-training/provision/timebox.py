"""Steps under one deadline, and one log of everything they print: the time box of `make gpu-quick`.

A short GPU slot ends when its time does, whatever is running. Each step is a command run in its own process
group: it starts only when at least its estimate is left (else it is skipped with that reason and the next one
is tried), and runs under a timeout of what is left (or its own cap): SIGTERM then (the labs keep the rows of
what finished and checkpoint), SIGKILL after a grace. `teed` copies everything this process and its children
write, stdout and stderr, into a log file as well as the console, so that the log that travels home is the
whole one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, NamedTuple


class Step(NamedTuple):
    name: str
    argv: list[str]
    needs_s: float  # less left than this: skipped
    limit_s: float = float("inf")  # its own cap, whatever is left


class Outcome(NamedTuple):
    step: str
    status: str  # done | failed (exit N) | cut off at the deadline / at its limit | skipped | dropped | stopped
    seconds: float
    note: str = ""


class Stopped(Exception):
    """SIGTERM or Ctrl-C on the time box itself: its end still runs."""


def stop(signum, frame) -> None:
    raise Stopped


def run_step(step: Step, left_s: float, grace_s: float) -> Outcome:
    """One step under a deadline (or its own cap): SIGTERM when reached (the labs keep their rows), SIGKILL
    after grace_s."""
    print(f"== gpu-quick: {step.name} ({left_s:.0f} s left)", flush=True)
    t0 = time.monotonic()
    limit = min(left_s, step.limit_s)
    proc = subprocess.Popen(step.argv, start_new_session=True)  # its own group: the signal reaches its children
    try:
        code = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait()
        why = "at its limit" if step.limit_s < left_s else "at the deadline"
        return Outcome(step.name, f"cut off {why}", time.monotonic() - t0, f"after {limit:.0f} s")
    except BaseException:
        _signal(proc, signal.SIGTERM)
        proc.wait()
        raise
    status = "done" if code == 0 else f"failed (exit {code})"
    return Outcome(step.name, status, time.monotonic() - t0)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def run_all(plan: list[Step], deadline: float, done: list[Outcome], grace_s: float,
            launch: Callable[[Step], Step] = lambda step: step) -> None:
    """Every step in order, each outcome appended to `done` as it ends (a stop keeps the ones before); a step
    that cannot finish in what is left is skipped and the next one tried (a smaller one may fit). `launch`
    completes a step's command at its start (what the steps before it left decides it)."""
    for step in map(launch, plan):
        left = deadline - time.monotonic()
        if left < step.needs_s:
            done.append(Outcome(step.name, "skipped", 0.0, f"needs >= {step.needs_s:.0f} s, {max(left, 0):.0f} s left"))
            print(f"== gpu-quick: skipped {step.name}: {done[-1].note}", flush=True)
            continue
        done.append(run_step(step, left, grace_s))


@contextmanager
def teed(log: Path) -> Iterator[None]:
    """Everything written to this process's stdout and stderr (its children's too: they inherit the descriptors)
    goes to the console's stdout and is appended to `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    console, errors = os.dup(1), os.dup(2)
    read, write = os.pipe()
    sink = log.open("ab")

    def pump() -> None:
        while chunk := os.read(read, 65536):
            os.write(console, chunk)
            sink.write(chunk)
            sink.flush()
    copier = threading.Thread(target=pump, daemon=True)
    copier.start()
    os.dup2(write, 1)
    os.dup2(write, 2)
    os.close(write)
    saved = sys.stdout, sys.stderr  # print() writes to the descriptors even where sys.stdout was replaced
    sys.stdout, sys.stderr = (open(fd, "w", buffering=1, closefd=False) for fd in (1, 2))
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.close()
        sys.stdout, sys.stderr = saved
        os.dup2(console, 1)  # the pipe's last write end closes: the copier reads to its end
        os.dup2(errors, 2)
        copier.join(timeout=10)  # a child left behind holding the pipe: give up after 10 s
        for fd in (console, errors) if copier.is_alive() else (read, console, errors):
            os.close(fd)
        sink.close()
