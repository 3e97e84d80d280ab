"""Uneven pipeline stages: the split the planner chooses, the step of unequal stages, their memory."""

import numpy as np
import pytest

from planner.model.degrees import Degrees
from planner.model.memory import activation_bytes, stage_params
from planner.model.shapes import Shape
from planner.model.stages import balanced_split, even_split, interleave_fits, pipeline_step, stage_times


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


def test_a_head_worth_several_layers_moves_the_window():
    # A small model with a large vocabulary: 16 layers, the LM head and its loss worth 5 layers (nanotron's 1.34B at
    # vocab 131,072), 2 stages. Balanced: a·l = z·l + 5 with a + z = 16, a = 10.5, so 10 + 6 (slowest 11: 10 and
    # 6 + 5) or 11 + 5 (11 and 10) tie, and the fewer on the first stage wins: 10 + 6. A window of floor(L/p) - 2 ..
    # + 1 around 8 could only reach 9 + 7 (slowest 7 + 5 = 12).
    assert split_of(16, 2, 5.0) == (10, 0, 6)
    # Four stages of 32 layers with the head worth 4: m = (32 + 4)/4 = 9, the last stage 9 - 4 = 5 layers.
    assert split_of(32, 4, 4.0) == (9, 9, 5)


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


def test_interleaved_pipelines_need_not_divide_the_layers():
    # NVIDIA's Llama 3.1 405B recipe: 126 layers on 8 stages with 8 chunks each. 126 / 8 is not a whole number,
    # so the chunks cannot be equal; Megatron puts fewer layers on the first and last stage: 15 + 16 x 6 + 15,
    # every middle stage 8 chunks of 2, the ends one chunk of 1.
    assert interleave_fits(126, 8, 8) and interleave_fits(126, 8, 2) and not interleave_fits(10, 4, 4)
    s = balanced_split(126, np.array([8]), 1.0, 0.05, 0.65, np.array([8]))
    assert (int(s.first[0]), int(s.middle[0]), int(s.last[0])) == (15, 16, 15)
    # A head worth four layers: without interleaving the last stage sheds layers to the others, down to the balanced
    # slowest stage, ceil((126 + 4.05) / 8) = 17 layers' time; with 4 chunks the middle stages stay equal multiples of
    # 4 and the ends take the difference.
    first, mid, last = split_of(126, 8, 4.0, 0.05)
    assert max(first + 0.05, mid, last + 4.0) == 17 and last < first
    s = balanced_split(126, np.array([8]), 1.0, 0.05, 4.0, np.array([4]))
    f, m, z = int(s.first[0]), int(s.middle[0]), int(s.last[0])
    assert m % 4 == 0 and f + 6 * m + z == 126 and (f + 1) % 4 <= 1 and (z + 1) % 4 <= 1


def test_the_uneven_interleaved_layout_plans():
    # The planner prices and chooses it: pinned TP 8 x PP 8 with 8 chunks on 405B, where 8 does not divide 126/8.
    from common.hardware import get_preset
    from planner.model.cluster import make_cluster
    from planner.search.search import Pins, Workload, search
    shape = Shape(126, 16384, 128, 8, 128256, 8192, 53248 * 3 // 2)
    res = search(Workload(shape, 2048), make_cluster(get_preset("h100"), 2048),
                 Pins(tp=8, pp=8, cp=1, interleave=8, recompute="full"), top=1)
    assert res.best is not None and res.best.interleave == 8
    assert res.best.layers_per_stage == "15+16x6+15"
