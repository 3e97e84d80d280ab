"""The log-sum-exp merge at large logits: in fp32 near 1e3 an LSE carries fp32's spacing there (6e-5), and the
backward's cancellations amplify whatever the merge weights inherit. The sigmoid form (attention_block.merge, the
form PyTorch's ring uses) takes its weights from LSE differences alone: ours then gives PyTorch's result to the bit,
where the exp form was about three times further from the fp64 result in dQ (8.8e-4 against 3.0e-4)."""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import torch_cp
from common.attention_block import block_forward, default_scale, merge
from common.cp_layout import balanced_positions
from common.ring_attention import ring_attention
from testkit import run_ranks


def test_merging_two_halves_of_the_keys_is_attention_over_all_of_them():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 8, 4, generator=g, dtype=torch.float64) for h in (4, 2, 2))
    scale = default_scale(4)
    whole, whole_lse = block_forward(q, k, v, causal=False, scale=scale)
    out = torch.zeros_like(whole)
    lse = torch.full_like(whole_lse, float("-inf"))  # no block seen yet: the first one is taken as it is
    for keys in (slice(0, 3), slice(3, 8)):
        merge(out, lse, *block_forward(q, k[:, :, keys], v[:, :, keys], causal=False, scale=scale))
    assert torch.allclose(out, whole, rtol=0, atol=1e-14) and torch.allclose(lse, whole_lse, rtol=0, atol=1e-14)


def _large_logits(env):
    """Logits near 1e3 (q and k offset by 15 in every coordinate, head size 16), fp32, 2 ranks: ours and PyTorch's
    ring core on the same fused kernel, and both against fp64 single-device attention."""
    g = torch.Generator().manual_seed(0)
    q, k, v, dout = (torch.randn(1, 4, 64, 16, generator=g) + off for off in (15, 15, 0, 0))
    exact = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*exact, is_causal=True)
    ref.backward(dout.double())
    pos = balanced_positions(64, env.world_size, env.rank)
    got = {}
    for impl in ("ours", "torch"):
        ql, kl, vl = (t.index_select(2, pos).requires_grad_(True) for t in (q, k, v))
        out = (ring_attention(ql, kl, vl, kernel="fused") if impl == "ours" else
               torch_cp.torch_ring(ql, kl, vl, dist.group.WORLD, scale=default_scale(16)))
        out.backward(dout.index_select(2, pos))
        got[impl] = (out.detach(), ql.grad)
    dq_err = (got["ours"][1].double() - exact[0].grad.index_select(2, pos)).abs().max().item()
    logits = (q @ k.transpose(-1, -2) * default_scale(16)).max().item()
    return all(torch.equal(a, b) for a, b in zip(got["ours"], got["torch"])), dq_err, logits


def test_at_logits_near_1e3_ours_is_pytorchs_result_to_the_bit():
    for same, dq_err, logits in run_ranks(_large_logits, 2):
        assert 800 < logits < 1500 and same and dq_err < 5e-4  # the exp form: 8.8e-4, not the same bits
