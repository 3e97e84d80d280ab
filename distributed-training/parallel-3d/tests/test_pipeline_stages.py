"""Stages: the layer split (uneven, explicit, refused), the looped placement, and stages that compose to the GPT."""

import pytest
import torch

from common.model import GPT, GPTConfig
from pipeline_stages import build_stages, split_layers, stage_specs


@pytest.mark.parametrize("layers, stages, want", [
    (8, 4, (2, 2, 2, 2)),
    (6, 4, (1, 2, 2, 1)),  # the extra layers go to the middle stages first
    (7, 4, (2, 2, 2, 1)),  # then the first stage: an embedding lookup costs less than the LM head
    (70, 12, (5,) + (6,) * 10 + (5,)),
    (126, 16, (7,) + (8,) * 14 + (7,)),  # Llama 3 405B's pipeline: one layer fewer on the first and last
])
def test_balanced_split(layers, stages, want):
    assert split_layers(layers, stages) == want


def test_explicit_split_and_refusals():
    assert split_layers(6, 3, (1, 3, 2)) == (1, 3, 2)
    with pytest.raises(ValueError, match="must list 3 positive counts"):
        split_layers(6, 3, (1, 3, 3))
    with pytest.raises(ValueError, match="must list 2 positive"):
        split_layers(6, 2, (6, 0))
    with pytest.raises(ValueError, match="need at least as many layers"):
        split_layers(3, 4)


def test_looped_placement():
    # pp = 2, v = 2: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3 (6 layers: 1, 2, 2, 1)
    r0, r1 = stage_specs(6, 2, 2, 0), stage_specs(6, 2, 2, 1)
    assert [(s.index, s.layers) for s in r0] == [(0, (0,)), (2, (3, 4))]
    assert [(s.index, s.layers) for s in r1] == [(1, (1, 2)), (3, (5,))]
    assert r0[0].is_first and r1[1].is_last and not r0[1].is_first


def test_stages_compose_to_the_gpt_with_its_names():
    cfg = GPTConfig(d_model=32, n_layers=5, n_heads=4, seq_len=16, vocab_size=64)
    torch.manual_seed(0)
    gpt = GPT(cfg)
    x = torch.randint(0, 64, (2, 16))
    stages = build_stages(gpt, [s for r in range(3) for s in stage_specs(5, 3, 1, r)])
    h = x
    for st in stages:
        h = st(h)
    torch.testing.assert_close(h, gpt(x), rtol=0, atol=0)
    names = [n for st in stages for n, _ in st.named_parameters()]
    assert sorted(names) == sorted(n for n, _ in gpt.named_parameters())
