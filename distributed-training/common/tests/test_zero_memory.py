"""ZeRO model-state bytes against the paper's Figure 1 and Table 1, and by hand."""

import numpy as np
import pytest

from common.zero_memory import FSDP2_BETWEEN_STEPS, STAGES, ZERO_PAPER, StateBytes, model_state_bytes, zero_paper_table


def test_zero_figure_1_and_table_1():
    # Rajbhandari et al. 2020 (arXiv 1910.02054) Fig. 1: 7.5B parameters, 64-way DP, K = 12.
    got = zero_paper_table(7.5e9, 64)
    assert [round(got[k], 1) for k in ("baseline", "zero1", "zero2", "zero3")] == [120.0, 31.4, 16.6, 1.9]
    # Table 1, 1T parameters at N_d = 1024: 4011 / 2013 / 15.6 GB (the paper truncates 4011.7).
    table = zero_paper_table(1e12, 1024)
    assert [table[k] for k in ("zero1", "zero2", "zero3")] == pytest.approx([4011, 2013, 15.6], rel=2e-3)


def test_each_stage_shards_one_more_category():
    b = StateBytes(weight=4, grad=4, optimizer=8)
    assert model_state_bytes(100, 4, 0, b) == (400, 400, 800)
    assert model_state_bytes(100, 4, 1, b) == (400, 400, 200)
    assert model_state_bytes(100, 4, 2, b) == (400, 100, 200)
    assert model_state_bytes(100, 4, 3, b) == (100, 100, 200)
    assert model_state_bytes(100, 4, 3, b).total == 400
    # the busiest rank's real share replaces Psi / N (FSDP2 padding, whole-tensor partitions)
    assert model_state_bytes(100, 4, 3, b, sharded=30) == (120, 120, 240)
    # arrays broadcast: one element per configuration
    w, g, o = model_state_bytes(np.array([100.0, 100.0]), np.array([4, 2]), np.array([3, 1]), ZERO_PAPER)
    assert list(w) == [50, 200] and list(g) == [50, 200] and list(o) == [300, 600]


def test_fsdp2_zero2_holds_sharded_parameters_between_steps():
    # The paper's ZeRO-2 keeps replicated weights; FSDP2 without reshard-after-forward frees them after backward.
    assert STAGES["zero2"] == 2 and FSDP2_BETWEEN_STEPS["zero2"] == 3 == FSDP2_BETWEEN_STEPS["zero3"]
    paper, fsdp2 = (model_state_bytes(100, 4, s, ZERO_PAPER) for s in (2, 3))
    assert paper.weights == 200 and fsdp2.weights == 50 and paper.grads == fsdp2.grads
