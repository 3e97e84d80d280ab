"""The framework's floor counted: host_ops.py counts the aten ops parallel-3d's step dispatches, and the planner's table
(planner/model/floor.py PYTORCH_OPS) holds exactly those counts."""

import collections

import pytest
import torch

import host_ops
from common.model import Block, GPTConfig
from planner.model.floor import PYTORCH_OPS


def test_a_blocks_forward_by_hand():
    # Forward of one plain block: 2 layer norms; 6 linears of 4 ops each (t of the weight, view of the input to 2-D,
    # mm, _unsafe_view back to 3-D); q, k, v reshaped to heads (view + transpose, 3 times); SDPA and autograd's detach
    # of its output; the heads merged back (transpose + view); 2 residual adds; GELU: 2 + 24 + 6 + 2 + 2 + 2 + 1 = 39.
    block = Block(GPTConfig(n_layers=1, **host_ops.TINY))
    x = torch.randn(1, host_ops.TINY["seq_len"], host_ops.TINY["d_model"], requires_grad=True)
    block(x)
    with host_ops.Counter() as c:
        y = block(x)
    assert c.total == host_ops.Ops(39, 0, 0)
    want = collections.Counter({"aten.t.default": 6, "aten.view.default": 10, "aten.mm.default": 6,
                                "aten._unsafe_view.default": 6, "aten.transpose.int": 4,
                                "aten.native_layer_norm.default": 2, "aten.add.Tensor": 2, "aten.gelu.default": 1,
                                "aten._scaled_dot_product_flash_attention_for_cpu.default": 1,
                                "aten.detach.default": 1})
    assert c.by_op == want
    with host_ops.Counter() as c:
        y.backward(torch.ones_like(y))
    assert (c.total.ops, c.total.backward) == (75, 74)  # the engine's 74 backward ops and the caller's ones_like


@pytest.mark.parametrize("precision, key", [("fp32", (False, 0, "none")), ("fp32", (True, 0, "none")),
                                            ("bf16", (False, 3, "full"))])
def test_the_planners_table_is_the_count(precision, key):
    tp, zero, rec = key
    split = host_ops.class_split(2 if tp else 1, zero, rec, bf16=precision == "bf16")
    assert tuple(tuple(x) for x in split) == PYTORCH_OPS[precision][key]
