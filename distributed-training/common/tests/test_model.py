"""The common GPT: parameter count, FLOPs formula, causality, grouped-query attention."""

import pytest
import torch

from common.model import GPT, GPTConfig, count_params, flops_per_token, lm_loss, mfu


@pytest.mark.parametrize("cfg", [GPTConfig(), GPTConfig(n_kv_heads=2, d_ff=200, bias=True, vocab_size=97)],
                         ids=["mha", "gqa-bias"])
def test_param_count_matches_the_module(cfg):
    model = GPT(cfg)
    assert count_params(cfg) == sum(p.numel() for p in model.parameters())
    emb = model.tok_emb.weight.numel() + model.pos_emb.weight.numel()
    assert count_params(cfg, include_embeddings=False) == count_params(cfg) - emb


def test_flops_per_token_by_hand():
    # d=128, L=2, H=4, hd=32, V=256, T=128, no bias, ffn 512:
    # per block: 2 norms 256 + attn 4*128*128 = 65536 + mlp 2*128*512 = 131072 -> 196864
    # N' = 2*196864 + 128 (final norm) + 128*256 (head) = 426624
    cfg = GPTConfig()
    assert count_params(cfg, include_embeddings=False) == 426_624
    assert flops_per_token(cfg) == 6 * 426_624 + 12 * 2 * 4 * 32 * 128
    assert mfu(1000.0, cfg, None) is None  # unknown peak -> no number, never a guess
    assert mfu(1e6, cfg, 1.0) == pytest.approx(1e6 * flops_per_token(cfg) / 1e12)


def test_causal_and_trainable():
    torch.manual_seed(0)
    model = GPT(GPTConfig(seq_len=16))
    x = torch.randint(0, 256, (2, 16))
    y = model(x)
    x2 = x.clone()
    x2[:, 10:] = (x2[:, 10:] + 1) % 256  # change only the future
    torch.testing.assert_close(model(x2)[:, :10], y[:, :10])
    loss = lm_loss(y, x)
    assert abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.2  # near-uniform at init
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_gqa_equals_mha_with_repeated_kv_heads():
    torch.manual_seed(0)
    gqa = GPT(GPTConfig(n_heads=4, n_kv_heads=2))
    mha = GPT(GPTConfig(n_heads=4))
    sd = gqa.state_dict()
    for name, t in list(sd.items()):
        if name.endswith(("attn.wk.weight", "attn.wv.weight")):  # (Hkv*hd, d) -> (Hq*hd, d)
            sd[name] = t.view(2, 32, -1).repeat_interleave(2, dim=0).reshape(128, -1)
    mha.load_state_dict(sd)
    x = torch.randint(0, 256, (2, 32))
    torch.testing.assert_close(gqa(x), mha(x), rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match="divisible by n_heads"):
        GPTConfig(d_model=100, n_heads=3)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        GPTConfig(n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="exceeds the model's seq_len"):
        GPT(GPTConfig(seq_len=8))(torch.zeros(1, 9, dtype=torch.long))
