"""The f / g and sequence-parallel operators, checked exactly with rank-valued tensors (as Megatron's
test_mappings.py does), calling forward and backward directly and through autograd."""

import warnings
from types import SimpleNamespace

import pytest
import torch
import torch.distributed.nn.functional as dist_nn

from comm_count import CommCounter, tp_bytes_per_layer
from testkit import run_ranks
from mappings import (TPGroup, _CopyToTP, _GatherSeq, _ReduceFromTP, _ReduceScatterSeq, copy_to_tp, gather_seq,
                      reduce_from_tp, reduce_scatter_seq, without_communication)


def _exact_checks(env):
    tp = TPGroup.of()
    t, r = tp.size, tp.rank
    ctx = SimpleNamespace(tp=tp, mark_dirty=lambda *tensors: None)
    x = torch.full((2, 3), float(r))
    ranks_sum, plus_one_sum = t * (t - 1) / 2, t * (t + 1) / 2

    # f: identity forward, all-reduce backward
    assert torch.equal(_CopyToTP.forward(ctx, x, tp), x)
    grad_f, _ = _CopyToTP.backward(ctx, torch.full((2, 3), r + 1.0))
    assert torch.equal(grad_f, torch.full((2, 3), plus_one_sum))
    # g: all-reduce forward, identity backward
    assert torch.equal(_ReduceFromTP.forward(ctx, x.clone(), tp), torch.full((2, 3), ranks_sum))
    g_in = torch.full((2, 3), r + 1.0)
    assert _ReduceFromTP.backward(ctx, g_in)[0] is g_in

    # the same through autograd, with the collectives counted where they happen
    leaf = x.clone().requires_grad_(True)
    with CommCounter(t) as fwd:
        y = reduce_from_tp(copy_to_tp(leaf, tp) * 1.0, tp)
    with CommCounter(t) as bwd:
        y.backward(torch.full((2, 3), r + 1.0))
    assert torch.equal(y, torch.full((2, 3), ranks_sum))
    assert torch.equal(leaf.grad, torch.full((2, 3), plus_one_sum))  # g passed dL/dy on untouched, f summed it
    assert dict(fwd.counts) == dict(bwd.counts) == {"all_reduce": 1}
    assert fwd.wire_bytes == 6 * 4 * 2 * (t - 1) / t  # 6 fp32 elements, ring all-reduce

    # the trap: torch.distributed.nn's all_reduce sums the gradient again in backward
    trap = x.clone().requires_grad_(True)
    with warnings.catch_warnings():  # deprecated in favour of _functional_collectives, whose backward does the same
        warnings.simplefilter("ignore", FutureWarning)
        dist_nn.all_reduce(trap * 1.0).backward(torch.ones(2, 3))
    assert torch.equal(trap.grad, torch.full((2, 3), float(t)))

    # sequence parallelism, (B, T, d) = (2, 4t, 3): position-valued so that the chunk order is checked
    B, T, d = 2, 4 * t, 3
    pos = torch.arange(T, dtype=torch.float32).view(1, T, 1).expand(B, T, d)  # value = sequence index
    mine = slice(r * 4, (r + 1) * 4)
    shard = pos[:, mine].contiguous()
    assert torch.equal(_GatherSeq.forward(ctx, shard, tp), pos)  # all-gather puts rank r's rows at 4r
    partial = pos * (r + 1)  # every rank holds a partial sum of the full sequence
    summed = pos[:, mine] * plus_one_sum
    assert torch.equal(_ReduceScatterSeq.forward(ctx, partial, tp), summed)
    assert torch.equal(_GatherSeq.backward(ctx, partial)[0], summed)  # backward of the gather: reduce-scatter
    assert torch.equal(_ReduceScatterSeq.backward(ctx, shard)[0], pos)  # backward of the scatter: all-gather

    leaf = shard.clone().requires_grad_(True)
    with CommCounter(t) as fwd:
        out = reduce_scatter_seq(gather_seq(leaf, tp) * (r + 1), tp)
    with CommCounter(t) as bwd:
        out.backward(torch.ones_like(out))
    assert torch.equal(out, summed)
    assert torch.equal(leaf.grad, torch.full_like(shard, plus_one_sum))
    assert dict(fwd.counts) == dict(bwd.counts) == {"all_gather": 1, "reduce_scatter": 1}
    assert fwd.wire_bytes == 2 * B * T * d * 4 * (t - 1) / t

    # compute-only mode: same shapes, no collective at all
    with without_communication(), CommCounter(t) as none:
        assert gather_seq(shard, tp).shape == (B, T, d)
        assert reduce_scatter_seq(pos.clone(), tp).shape == (B, 4, d)
        assert torch.equal(reduce_from_tp(x.clone(), tp), x)
    assert not none.counts
    return True


@pytest.mark.parametrize("world", [2, 4])
def test_operators_are_exact_on_rank_valued_tensors(world):
    assert run_ranks(_exact_checks, world) == [True] * world


def test_one_rank_is_the_identity_and_issues_nothing():
    tp = TPGroup(None, 1, 0)
    x = torch.randn(2, 4, 3)
    with CommCounter(1) as c:
        for op in (copy_to_tp, reduce_from_tp, gather_seq, reduce_scatter_seq):
            assert op(x, tp) is x
    assert not c.counts


def test_communication_volume_formulas_by_hand():
    # SC21 section 3.2: 8*b*s*h*(t-1)/t per layer; b=1, s=2048, h=4096, t=8, bf16 -> 8*2048*4096*7/8*2 bytes
    assert tp_bytes_per_layer(1, 2048, 4096, 8, 2) == 117_440_512.0
