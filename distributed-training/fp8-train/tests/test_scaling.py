"""Delayed scaling against a hand-computed amax history (TransformerEngine semantics, scaling.py)."""

import pytest
import torch
import torch.nn as nn

from precision import scaling
from precision.formats import E4M3, E5M2
from precision.fp8_linear import Fp8Linear, scrub_histories, update_scales

AMAXES = [2.0, 8.0, 1.0, 0.5, 0.25]


def run_updates(recipe, amaxes, fp8_max=448.0):
    hist, scale = torch.zeros(recipe.history_len, 1), torch.ones(1)
    used = []
    for a in amaxes:
        used.append(scale.item())  # the cast of step t uses the scale from steps < t
        hist[0, 0] = a  # staged by the forward
        scaling.update(hist, scale, fp8_max, recipe)
    return used, scale.item(), hist[:, 0].tolist()


def test_max_over_window_by_hand():
    # window 3, margin 1: scale = 448 / max(last 3 amaxes) / 2
    # step 1: max{2} -> 112; step 2: max{2,8} -> 28; step 3: {2,8,1} -> 28; step 4: {8,1,.5} -> 28;
    # step 5: {1,.5,.25} -> 224
    used, final, hist = run_updates(scaling.DelayedScaling(margin=1, history_len=3, algo="max"), AMAXES)
    assert used == [1.0, 112.0, 28.0, 28.0, 28.0] and final == 224.0
    assert hist == [0.0, 0.5, 0.25]  # rolled: row 0 zeroed (staging), the newest amax in the last row


def test_most_recent_and_margin_zero():
    used, final, _ = run_updates(scaling.DelayedScaling(margin=0, history_len=4, algo="most_recent"), AMAXES)
    assert used == [1.0, 224.0, 56.0, 448.0, 896.0] and final == 1792.0


def test_edge_cases_keep_the_previous_scale():
    recipe = scaling.DelayedScaling(history_len=2)
    used, final, _ = run_updates(recipe, [4.0, 0.0, 0.0])  # amax 0 in the whole window: keep 112
    assert used == [1.0, 112.0, 112.0] and final == 112.0
    used, final, hist = run_updates(recipe, [4.0, float("nan"), 1.0, 1.0])  # NaN freezes the scale for the window
    assert used == [1.0, 112.0, 112.0, 112.0] and final == 448.0
    _, final, _ = run_updates(recipe, [1e-45])  # 448 / 1e-45 overflows fp32 -> fp32 max, not Inf
    assert final == torch.finfo(torch.float32).max
    h = torch.tensor([[1.0, float("inf")], [float("nan"), 2.0]])
    scaling.scrub_history(h)
    assert h.tolist() == [[1.0, 0.0], [0.0, 2.0]]


def test_fp8_linear_follows_the_recipe():
    torch.manual_seed(0)
    recipe = scaling.DelayedScaling(margin=0, history_len=2)
    lin = Fp8Linear(nn.Linear(32, 16, bias=False), "emulated", recipe)
    w_amax = lin.weight.detach().abs().max().item()
    grads = [0.5, 0.125, 2.0]
    for step, (a, g) in enumerate(zip([3.0, 6.0, 1.5], grads)):
        x = torch.zeros(16, 32)
        x[0, 0] = a
        (lin(x) * g).sum().backward()  # dy == g everywhere
        update_scales([lin])  # lands grad_output's record, then the scales for the next step
        used = lin.last[:, 1].tolist()  # the scales this step cast with
        if step == 0:
            assert used == [1.0, 1.0, 1.0]
        if step == 2:  # window 2: inputs {6, 1.5} -> 448/6; grads {0.125, 2} -> 57344/2
            assert used[0] == pytest.approx(448.0 / 6.0) and used[2] == E5M2.max / 0.5  # from {3, 6}, {0.5, .125}
    assert torch.allclose(lin.scale_fwd, torch.tensor([448.0 / 6.0, E4M3.max / w_amax]))
    assert lin.scale_bwd.item() == E5M2.max / 2.0
    lin.amax_history_bwd[0, 0] = float("nan")
    scrub_histories([lin])
    assert torch.isfinite(lin.amax_history_bwd).all()
    sd = lin.state_dict()  # scaling state travels with the weights (checkpoints, rollback)
    assert {"scaling.history", "scaling.scale", "weight"} <= set(sd)
