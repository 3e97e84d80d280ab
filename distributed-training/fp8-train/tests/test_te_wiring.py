"""The TransformerEngine adapters' wiring, on the CPU, against a stand-in with TE's names (fake_te.py).

    - te-fused rebuilds each block from LayerNormLinear (fused QKV), Linear and LayerNormMLP holding
      the GPT's own weights: the converted model computes the same function and the same gradients;
      the LayerNorm bias TE adds is zero and frozen, so nothing trains that the GPT does not have;
    - a precision map that keeps part of a block in high precision is refused (fused modules cannot);
    - the te.Linear swap keeps the weights;
    - the FP8 state is read from the columns TE's own constants name, per GEMM, for a LayerNormMLP's
      two GEMMs too, and the scale recorded is the one snapshotted before the step.
The same adapters against the real library, on a GPU: tests/test_te.py.
"""

import copy

import pytest
import torch

import fake_te
from common.model import GPT, GPTConfig
from precision import te_adapter
from precision.modes import DEFAULT_FP8_MODULES
from precision.prepare import select_modules


@pytest.fixture
def gpt(monkeypatch):
    fake_te.install(monkeypatch)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2)
    return GPT(cfg)


def _loss_and_grads(model, idx):
    model.zero_grad(set_to_none=True)
    logits = model(idx)
    logits.square().mean().backward()
    return logits.detach(), model.tok_emb.weight.grad.clone()


def test_te_fused_blocks_compute_the_gpts_function_with_its_weights(gpt):
    ref = copy.deepcopy(gpt)
    names = select_modules(gpt, DEFAULT_FP8_MODULES)
    _, low = te_adapter.convert_fused(gpt, names, fp8_recipe=None)
    assert low == ["layers.0.attn.wqkv", "layers.0.attn.wo", "layers.0.mlp",
                   "layers.1.attn.wqkv", "layers.1.attn.wo", "layers.1.mlp"]
    block, ref_block = gpt.layers[0], ref.layers[0]
    assert isinstance(block.attn.wqkv, fake_te.LayerNormLinear) and isinstance(block.mlp, fake_te.LayerNormMLP)
    assert torch.equal(block.attn.wqkv.weight, torch.cat([ref_block.attn.wq.weight, ref_block.attn.wk.weight,
                                                          ref_block.attn.wv.weight]))  # GQA: (32 + 16 + 16, 32)
    assert torch.equal(block.mlp.fc2_weight, ref_block.mlp.w2.weight)
    assert not block.mlp.layer_norm_bias.requires_grad and not block.mlp.layer_norm_bias.any()
    trainable = sum(p.numel() for p in gpt.parameters() if p.requires_grad)
    assert trainable == sum(p.numel() for p in ref.parameters())  # the same weights, no more
    idx = torch.randint(0, 64, (3, 16))
    (y, g), (y_ref, g_ref) = _loss_and_grads(gpt, idx), _loss_and_grads(ref, idx)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-7)


def test_te_fused_refuses_a_block_kept_partly_in_high_precision(gpt):
    names = select_modules(gpt, DEFAULT_FP8_MODULES, ("layers.1.mlp.*",))
    with pytest.raises(ValueError, match="whole blocks.*layers.1.attn.wq"):
        te_adapter.convert_fused(gpt, names, fp8_recipe=None)
    te_adapter.convert_fused(gpt, select_modules(gpt, DEFAULT_FP8_MODULES, ("layers.1.*",)), fp8_recipe=None)
    assert isinstance(gpt.layers[1].mlp.w1, torch.nn.Linear)  # a whole block left out stays as it was


def test_te_linear_swap_keeps_the_weights(gpt):
    ref = copy.deepcopy(gpt)
    te_adapter.convert_linear(gpt, ["layers.0.attn.wq", "layers.1.mlp.w2"], fp8_recipe=None)
    assert isinstance(gpt.layers[0].attn.wq, fake_te.Linear)
    assert torch.equal(gpt.layers[1].mlp.w2.weight, ref.layers[1].mlp.w2.weight)
    idx = torch.randint(0, 64, (2, 16))
    torch.testing.assert_close(gpt(idx), ref(idx))


def _give_state(module, n_fwd: int, n_bwd: int, hist: int = 3) -> None:
    """TE's DelayedScalingRecipeState, with a distinct value in every cell."""
    fwd = fake_te.ScalingState(torch.arange(n_fwd, dtype=torch.float32) + 10,
                               torch.arange(hist * n_fwd, dtype=torch.float32).reshape(hist, n_fwd))
    bwd = fake_te.ScalingState(torch.arange(n_bwd, dtype=torch.float32) + 100,
                               torch.arange(hist * n_bwd, dtype=torch.float32).reshape(hist, n_bwd) + 1000)
    module.fp8_meta = {"scaling_fwd": fwd, "scaling_bwd": bwd}


def test_state_is_read_from_the_columns_te_names(gpt):
    te_adapter.convert_fused(gpt, select_modules(gpt, DEFAULT_FP8_MODULES, ("layers.1.*",)), fp8_recipe=None)
    block = gpt.layers[0]
    _give_state(block.attn.wqkv, 3, 2)  # one GEMM: input, weight, output | grad_output, grad_input
    _give_state(block.mlp, 6, 4)  # two GEMMs
    te_adapter.snapshot_scales(gpt)
    for m in (block.attn.wqkv, block.mlp):  # TE's update after the step: the next step's scales
        m.fp8_meta["scaling_fwd"].scale.mul_(2)
        m.fp8_meta["scaling_bwd"].scale.mul_(2)
    got = {(r.module, r.role): (r.amax.item(), r.scale.item()) for r in te_adapter.delayed_state(gpt)}
    last_fwd, last_bwd = 6, 1000 + 2 * 4  # the newest history row starts at row 2's first column
    assert got == {
        ("layers.0.attn.wqkv", "input"): (2 * 3 + 0, 10), ("layers.0.attn.wqkv", "weight"): (2 * 3 + 1, 11),
        ("layers.0.attn.wqkv", "grad_output"): (1000 + 2 * 2 + 0, 100),
        ("layers.0.mlp.w1", "input"): (last_fwd * 2 + 0, 10), ("layers.0.mlp.w1", "weight"): (last_fwd * 2 + 1, 11),
        ("layers.0.mlp.w1", "grad_output"): (last_bwd + 0, 100),
        ("layers.0.mlp.w2", "input"): (last_fwd * 2 + 3, 13), ("layers.0.mlp.w2", "weight"): (last_fwd * 2 + 4, 14),
        ("layers.0.mlp.w2", "grad_output"): (last_bwd + 2, 102),
    }
    te_adapter.scrub(gpt)  # finite histories untouched
    assert block.mlp.fp8_meta["scaling_bwd"].amax_history[-1, 2].item() == last_bwd + 2
