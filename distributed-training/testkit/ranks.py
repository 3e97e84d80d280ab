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
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
import traceback
from typing import Any, Callable

import torch

from common.dist import distributed


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
