"""The torchrun contract and the timing method, on real forked gloo ranks."""

import time

import pytest
import torch
import torch.distributed as dist

from common.dist import distributed
from testkit import RankFailed, run_ranks
from common.timing import StepTimer, time_iterations


def _identity(env):
    t = torch.tensor([float(env.rank)])
    dist.all_reduce(t)
    return env.rank, env.world_size, env.backend, str(env.device), t.item()


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_see_the_torchrun_contract(world):
    got = run_ranks(_identity, world)
    assert got == [(r, world, "gloo", "cpu", sum(range(world))) for r in range(world)]


def _slow_rank_timing(env):
    # Rank 1 sleeps 20 ms per iteration, the others 1 ms: the reduced samples must show the slow rank.
    delay = 0.02 if env.rank == 1 else 0.001
    t = time_iterations(lambda: time.sleep(delay), warmup=1, iters=4, device=env.device)
    return t.samples_s, t.method, t.reduction


def test_timing_takes_the_max_over_ranks():
    results = run_ranks(_slow_rank_timing, 3)
    for samples, method, reduction in results:
        assert len(samples) == 4 and min(samples) >= 0.02
        assert method == "perf_counter" and reduction == "max over 3 ranks"
    assert results[0][0] == results[2][0]  # every rank holds the same reduced samples


def _nccl_tests_statistic(env):
    # No barrier: each rank runs its own loop, rank 1 at 20 ms per call and the others at 1 ms.
    delay = 0.02 if env.rank == 1 else 0.001
    t = time_iterations(lambda: time.sleep(delay), warmup=0, iters=4, device=env.device, barrier=False)
    return t.loop_s, min(t.samples_s)


def test_timing_also_records_nccl_tests_loop_average():
    # nccl-tests: one timer around the loop / iterations, averaged over ranks: (1 + 20 + 1) / 3 ms, where
    # the per-iteration max over ranks is the slow rank's 20 ms.
    for loop_s, fastest_max in run_ranks(_nccl_tests_statistic, 3):
        assert 0.022 / 3 <= loop_s < 0.02 <= fastest_max


def _reduce_every_way(env):
    from common.dist import reduce_across_ranks

    return [reduce_across_ranks([env.rank + 1, 10.0], how) for how in ("max", "min", "sum", "mean")]


def test_reduce_across_ranks():
    assert run_ranks(_reduce_every_way, 3) == [[[3, 10], [1, 10], [6, 30], [2, 10]]] * 3
    from common.dist import reduce_across_ranks
    assert reduce_across_ranks([1, 2], "mean") == [1.0, 2.0]  # no process group: the values themselves
    with pytest.raises(ValueError, match="reduce must be one of max, min, sum, mean"):
        reduce_across_ranks([1], "avg")


def _boom(env):
    if env.rank == 1:
        raise ValueError("rank one exploded")
    dist.barrier()


def test_a_failing_rank_is_reported_with_its_traceback():
    with pytest.raises(RankFailed, match="rank 1 of 2 failed:(.|\n)*rank one exploded"):
        run_ranks(_boom, 2, timeout_s=30)


def test_single_process_group_and_step_timer():
    with distributed(device="cpu") as env:
        assert (env.rank, env.world_size, env.nnodes, env.is_main) == (0, 1, 1, True)
        t = torch.ones(2)
        dist.all_reduce(t)  # collectives work unconditionally in a one-rank group
        timing = time_iterations(lambda: None, warmup=0, iters=3, device=env.device)
        assert timing.reduction == "single rank" and len(timing.samples_s) == 3
    assert not dist.is_initialized()
    with StepTimer(torch.device("cpu")) as st:
        time.sleep(0.01)
    assert st.elapsed_s >= 0.01
    with pytest.raises(ValueError, match="iters must be > 0"):
        time_iterations(lambda: None, warmup=0, iters=0, device=torch.device("cpu"))


def test_argument_check_mode_stops_before_the_process_group(monkeypatch):
    # The Makefile runs every torchrun target once with DT_CHECK_ARGS=1 first: the runner validates
    # its arguments, then distributed() ends the process with code 0 before any group exists.
    monkeypatch.setenv("DT_CHECK_ARGS", "1")
    with pytest.raises(SystemExit) as e:
        with distributed(device="cpu"):
            raise AssertionError("the body must not run in check mode")
    assert e.value.code == 0 and not dist.is_initialized()


def _rank0_value(env):
    from common.dist import from_rank0

    return from_rank0({"rank": env.rank})


def test_from_rank0_gives_every_rank_rank_0s_value():
    assert run_ranks(_rank0_value, 3) == [{"rank": 0}] * 3
