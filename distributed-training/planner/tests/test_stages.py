"""Uneven pipeline stages: the split the planner chooses, the step of unequal stages, their memory."""

import numpy as np
import pytest

from degrees import Degrees
from memory import activation_bytes, stage_params
from shapes import Shape
from stages import balanced_split, even_split, pipeline_step, stage_times


def split_of(layers, p, head_layers, embed_layers=0.0):
    s = balanced_split(layers, np.array([p]), 1.0, embed_layers, head_layers)
    return int(s.first[0]), int(s.middle[0]), int(s.last[0])


def test_llama3_405b_split_one_layer_fewer_on_first_and_last():
    # 126 layers on 16 stages with an LM head worth ~0.65 of a layer (Llama 3 405B: vocab 128,256, h 16,384):
    # the split Meta ran (arXiv 2407.21783 §3.3.2) is the one whose slowest stage is fastest, with the
    # fewest layers on the first stage among equally fast ones.
    assert split_of(126, 16, 0.65) == (7, 8, 7)


def test_bloom_70_layers_on_12_stages():
    # BLOOM: 70 layers on 12 stages. A head worth one layer: 5 on each end, 6 in the middle (what BLOOM ran,
    # counting the embeddings as layers). A heavier head moves the spare layer to the first stage instead.
    assert split_of(70, 12, 1.0, 0.1) == (5, 6, 5)
    assert split_of(70, 12, 1.46, 0.1) == (6, 6, 4)


def test_even_when_it_divides_and_the_head_is_cheap():
    assert split_of(96, 8, 0.2) == (12, 12, 12)
    assert split_of(48, 2, 0.2) == (24, 0, 24)
    one = balanced_split(40, np.array([1]), 1.0, 0.1, 0.3)
    assert (float(one.first[0]), float(one.last[0])) == (40.0, 40.0)
    even = even_split(96, np.array([1, 8]))
    assert list(even.first) == [96, 12] and list(even.middle) == [0, 12]


@pytest.mark.parametrize("layers, p", [(126, 16), (70, 12), (80, 6), (61, 4), (30, 7), (5, 5), (3, 2)])
def test_every_split_holds_every_layer_once(layers, p):
    first, mid, last = split_of(layers, p, 0.7, 0.05)
    rest = layers - first - last
    assert first >= 1 and last >= 1
    if p == 2:
        assert rest == 0
    else:  # the p - 2 middle stages hold the rest, the busiest ceil(rest / (p - 2))
        assert mid == -(-rest // (p - 2)) and rest >= p - 2


def test_pipeline_step_is_sc21s_for_equal_stages_and_slowest_bound_otherwise():
    # Equal stages of t: m·t + (p-1)·t/v = (m + (p-1)/v)·t (SC21 §2.2).
    t, p, m, v = 0.1, 8, 32, 2
    assert float(pipeline_step(m, v, t, p * t)) == pytest.approx((m + (p - 1) / v) * t)
    # Unequal: the slowest stage sets the pace for m micro-batches, the others add their fill and drain.
    split = balanced_split(126, np.array([16]), 1.0, 0.0, 0.65)
    slowest, total = stage_times(split, 126, np.array([16]), 1.0, 0.0, 0.65)
    assert float(slowest[0]) == 8.0 and float(total) == pytest.approx(126.65)
    assert float(pipeline_step(32, 1, slowest, total)[0]) == pytest.approx(32 * 8 + 126.65 - 8)


def test_memory_follows_the_split():
    sh = Shape(layers=126, hidden=256, heads=4, kv_heads=4, vocab=1000, seq=128, ffn=1024)
    split = balanced_split(126, np.array([16]), 1.0, 0.0, 0.65)
    uneven = float(stage_params(sh, 1, 16, split)[0])
    # The busiest stage is a middle one with 8 layers (more than 126/16 = 7.875 of the even formula).
    assert uneven == pytest.approx(8 * sh.layer_params)
    # Activations: the first stage holds 16 micro-batches of its 7 layers, the second 15 of its 8: 120 > 112.
    deg = Degrees.of(p=16, m=64)
    acts = float(activation_bytes(sh, deg, split=split)[0])
    per_layer = float(activation_bytes(sh, Degrees.of(p=1, m=64))) - 4.0 * sh.seq * (sh.hidden + sh.vocab)
    assert acts == pytest.approx(15 * 8 * per_layer / 126)
