"""Calling any of the three designs with bad inputs gives one clear error (ValueError, one line) on every rank, before
any byte moves: never garbage (6 query heads over 4 K/V heads read out of bounds in the fused CPU kernel: values like
7e31), never a silent drop (a sequence of 10 at CP = 2 lost tokens 8 and 9), never a crash inside gloo (ranks that
disagree on a shape)."""

import pytest
import torch

from common.cp_attention import cp_attention
from common.cp_bytes import CP_KINDS
from common.cp_layout import CPLayout
from testkit import run_ranks


def _x(*shape):
    return torch.randn(*shape)


# (what, q, k, v, keywords, what the one line says); shapes per rank of 2 unless the case says otherwise
LOCAL = [
    ("gqa-6-over-4", _x(1, 6, 8, 4), _x(1, 4, 8, 4), _x(1, 4, 8, 4), {}, "n_heads (6) must be a positive multiple of "
                                                                          "n_kv_heads (4)"),
    ("10-tokens-at-cp2", _x(1, 4, 5, 4), _x(1, 4, 5, 4), _x(1, 4, 5, 4), {}, "the sequence (10) must divide into 2 x "
                                                                             "CP = 4 equal chunks"),
    ("q-k-lengths", _x(1, 4, 8, 4), _x(1, 4, 6, 4), _x(1, 4, 6, 4), {}, "q holds 8 tokens and k/v 6"),
    ("k-v-shapes", _x(1, 4, 8, 4), _x(1, 4, 8, 4), _x(1, 2, 8, 4), {}, "k and v must have the same shape"),
    ("3-d", _x(4, 8, 4), _x(4, 8, 4), _x(4, 8, 4), {}, "q must be a 4-D tensor"),
    ("head-size", _x(1, 4, 8, 4), _x(1, 4, 8, 8), _x(1, 4, 8, 8), {}, "agree in batch and head size"),
    ("dtypes", _x(1, 4, 8, 4), _x(1, 4, 8, 4).double(), _x(1, 4, 8, 4), {}, "must share one floating dtype"),
    ("layout-length", _x(1, 4, 8, 4), _x(1, 4, 8, 4), _x(1, 4, 8, 4), {"layout": CPLayout.causal(32, 2)},
     "each rank holds s/N = 16 tokens of the layout's 32, got 8"),
    ("documents", _x(1, 4, 8, 4), _x(1, 4, 8, 4), _x(1, 4, 8, 4), {"layout": CPLayout(16, 2, (6, 10))},
     "every document must divide into 2 x CP = 4 equal chunks"),
    ("kernel", _x(1, 4, 8, 4), _x(1, 4, 8, 4), _x(1, 4, 8, 4), {"kernel": "flash"}, "kernel must be one of math, fused"),
]


def _refused(env, kind, q, k, v, kw):
    try:
        cp_attention(kind, q, k, v, **kw)
    except ValueError as e:
        return str(e)
    return None


def _every_refusal(env, kind):
    return [_refused(env, kind, q, k, v, kw) for _, q, k, v, kw, _ in LOCAL]


@pytest.mark.parametrize("kind", CP_KINDS)
def test_bad_shapes_are_one_clear_error_on_every_rank(kind):
    for msgs in run_ranks(_every_refusal, 2, kind):
        for (name, *_, needle), msg in zip(LOCAL, msgs):
            assert msg is not None and needle in msg and "\n" not in msg and msg.startswith(kind), (name, msg)


def test_ulysses_refuses_heads_that_do_not_divide_by_the_degree():
    q, kv = _x(1, 8, 4, 4), _x(1, 2, 4, 4)
    for msg in run_ranks(_refused, 4, "ulysses", q, kv, kv, {}):
        assert "n_heads (8) and n_kv_heads (2) must both divide by 4" in msg
    assert run_ranks(_refused, 4, "ring", q, kv, kv, {}) == [None] * 4  # the ring takes them


def _disagree(env, kind, how):
    h = 8 if env.rank == 1 and how == "heads" else 4
    q = _x(1, h, 8, 4) if not (env.rank == 1 and how == "broken") else _x(4, 8, 4)
    kv = _x(1, 4, 8, 4)
    return _refused(env, kind, q, kv, kv, {})


@pytest.mark.parametrize("kind", CP_KINDS)
def test_ranks_that_disagree_stop_together_before_any_collective(kind):
    msgs = run_ranks(_disagree, 2, kind, "heads")
    assert all("the 2 ranks of the CP group disagree on n_heads 4 to 8" in m for m in msgs), msgs
    rank0, rank1 = run_ranks(_disagree, 2, kind, "broken")  # rank 1's own check fails: rank 0 does not wait for it
    assert "rank 1 of the CP group refused its inputs" in rank0 and "q must be a 4-D tensor" in rank1
