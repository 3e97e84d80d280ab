"""The correctness check: expected outputs against a plain-tensor reference, exactness in any order, and on
real gloo ranks a corrupted or missing result is caught."""

import random

import pytest
import torch
import torch.distributed as dist

import collectives as C
from common.collective_cost import COLLECTIVES
from testkit import run_ranks

CPU = torch.device("cpu")


def _reference(coll: str, n: int, count: int, dtype) -> list[torch.Tensor]:
    """What each rank must receive, computed from every rank's filled input by plain tensor ops (float64)."""
    inputs = []
    for r in range(n):
        b = C.allocate(coll, count, n, dtype, CPU)
        C.fill(coll, b, r, n)
        inputs.append(b.inp.double())
    part = lambda x, r: x[r * count:(r + 1) * count]  # noqa: E731
    return [{"all_reduce": lambda: sum(inputs),
             "all_gather": lambda: torch.cat(inputs),
             "reduce_scatter": lambda: sum(part(x, r) for x in inputs),
             "all_to_all": lambda: torch.cat([part(x, r) for x in inputs]),
             "broadcast": lambda: inputs[C.ROOT],
             "send_recv": lambda: inputs[(r - 1) % n]}[coll]() for r in range(n)]


@pytest.mark.parametrize("dtype", list(C.DTYPES.values()))
@pytest.mark.parametrize("n", [2, 3, 5])
def test_expected_matches_a_plain_reference(n, dtype):
    count = 37  # not a multiple of the pattern's period
    for coll in COLLECTIVES:
        for r, want in enumerate(_reference(coll, n, count, dtype)):
            got = C.expected(coll, count, r, n, dtype, CPU)
            assert got.dtype == dtype and torch.equal(got.double(), want), (coll, n, r)


@pytest.mark.parametrize("dtype,n", [(torch.bfloat16, 300), (torch.float16, 1500), (torch.float32, 64)])
def test_sums_are_exact_in_any_order(dtype, n):
    # Partial sums never leave the dtype's exact-integer range, even at large rank counts.
    count = 64
    parts = [C.pattern(r, 0, count, n, dtype, CPU) for r in range(n)]
    want = C.expected("all_reduce", count, 0, n, dtype, CPU)
    assert want.double().max() > 0 and want.double().max() <= C.EXACT_INT_LIMIT[dtype]
    for seed in range(3):
        order = list(range(n))
        random.Random(seed).shuffle(order)
        acc = torch.zeros(count, dtype=dtype)
        for r in order:
            acc += parts[r]  # accumulate in the low precision itself, rank by rank
        assert torch.equal(acc, want)
    assert (torch.stack(parts) != 0).any(dim=1).all()  # every rank contributes somewhere


def _check_all(env):
    """Every collective on real ranks: wrong == 0; then one corrupted element on rank 1 and a skipped broadcast."""
    n, out = env.world_size, {}
    for coll in COLLECTIVES:
        for name, dtype in C.DTYPES.items():
            b = C.allocate(coll, 24, n, dtype, env.device)
            C.fill(coll, b, env.rank, n)
            C.make_call(coll, b, env.rank, n)()
            want = C.expected(coll, 24, env.rank, n, dtype, env.device)
            clean = C.count_wrong(b.out, want)
            if env.rank == 1:
                b.out[5] += 1
            out[coll, name] = (clean, C.count_wrong(b.out, want))
    b = C.allocate("broadcast", 24, n, torch.float32, env.device)
    C.fill("broadcast", b, env.rank, n)  # ... and no call: the non-root still holds its own data
    out["no-op broadcast"] = C.count_wrong(b.out, C.expected("broadcast", 24, env.rank, n, torch.float32, env.device))
    dist.barrier()
    return out


def test_correctness_check_on_gloo_ranks_catches_corruption():
    r0, r1 = run_ranks(_check_all, 2)
    for key in [(c, d) for c in COLLECTIVES for d in C.DTYPES]:
        assert r0[key] == (0, 0) and r1[key] == (0, 1), key
    assert r0["no-op broadcast"] == 0 and r1["no-op broadcast"] == 24
