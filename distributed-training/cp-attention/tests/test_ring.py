"""The ring, piece by piece in one process (the merge rule, the block kernels, the load-balanced split), then whole
on 2 and 4 gloo ranks against single-device attention, with its bytes counted against the formula."""

import pytest
import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

import torch_cp
import verify
from common.attention_block import block_backward, block_forward, default_scale
from common.ring_attention import balanced_positions, check_cp_shape, merge, ring_attention, ring_bytes
from testkit import run_ranks
from traffic import Traffic


def _qkvd(h=4, h_kv=2, s=8, d=4, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, n, s, d, generator=g, dtype=dtype) for n in (h, h_kv, h_kv, h)]


def test_merging_two_halves_of_the_keys_is_attention_over_all_of_them():
    q, k, v, _ = _qkvd()
    scale = default_scale(4)
    whole, whole_lse = block_forward(q, k, v, causal=False, scale=scale)
    out, lse = block_forward(q, k[:, :, :3], v[:, :, :3], causal=False, scale=scale)
    merge(out, lse, *block_forward(q, k[:, :, 3:], v[:, :, 3:], causal=False, scale=scale))
    assert torch.allclose(out, whole, rtol=0, atol=1e-14) and torch.allclose(lse, whole_lse, rtol=0, atol=1e-14)


@pytest.mark.parametrize("causal", [True, False])
def test_the_kernels_agree_with_sdpa_and_each_other(causal):
    """math (GQA without copies) and fused (repeated heads) forward, and their backward given an LSE over more keys
    than the block's: the block's share of the gradient of attention over all the keys."""
    q, k, v, dout = _qkvd(dtype=torch.float32)
    scale = default_scale(4)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    for kernel in ("math", "fused"):
        out, _ = block_forward(q, k, v, causal=causal, scale=scale, kernel=kernel)
        assert torch.allclose(out, ref, atol=1e-6), kernel
    # keys 0..7 and 8..15, non-causal: the gradient of the whole is the sum of the blocks' shares
    q, k, v, dout = _qkvd(s=16)
    q8 = q[:, :, :8]
    qr, kr, vr = (t.clone().requires_grad_(True) for t in (q8, k, v))
    full = F.scaled_dot_product_attention(qr, kr, vr, enable_gqa=True)
    full.backward(dout[:, :, :8])
    _, lse = block_forward(q8, k, v, causal=False, scale=scale)
    for kernel in ("math", "fused"):
        parts = [block_backward(dout[:, :, :8], q8, k[:, :, sl], v[:, :, sl], full.detach(), lse, causal=False,
                                scale=scale, kernel=kernel) for sl in (slice(0, 8), slice(8, 16))]
        assert torch.allclose(parts[0][0] + parts[1][0], qr.grad, atol=1e-12), kernel
        assert torch.allclose(torch.cat([parts[0][1], parts[1][1]], 2), kr.grad, atol=1e-12), kernel
        assert torch.allclose(torch.cat([parts[0][2], parts[1][2]], 2), vr.grad, atol=1e-12), kernel


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_the_balanced_split_tiles_the_sequence(cp):
    s = 8 * cp
    held = [balanced_positions(s, cp, r) for r in range(cp)]
    assert torch.equal(torch.sort(torch.cat(held)).values, torch.arange(s))
    c = s // (2 * cp)
    for r, pos in enumerate(held):  # chunk r, then chunk 2cp-1-r: every rank the same causal work
        assert pos.tolist() == (list(range(r * c, (r + 1) * c)) + list(range((2 * cp - 1 - r) * c, (2 * cp - r) * c))
                                if cp > 1 else list(range(s)))
        assert int((pos.unsqueeze(1) >= torch.arange(s)).sum()) == s * (s + 1) // (2 * cp)  # unmasked pairs


def test_the_byte_formula_by_hand():
    # b 1, s 8, 2 K/V heads of 4, N 2, fp32: a block is 2 x 1 x 4 x 2 x 4 = 64 elements, one hop each way
    assert tuple(ring_bytes(1, 8, 2, 4, 2, 4)) == (64 * 4, 64 * 4 + 64 * 4)
    # bf16 K/V, fp32 dK/dV, N 4: 3 hops of 2 x 2 x 16 x 8 x 128 elements
    block = 2 * 2 * 16 * 8 * 128
    assert tuple(ring_bytes(2, 64, 8, 128, 4, 2)) == (3 * block * 2, 3 * block * (2 + 4))
    assert tuple(verify.torch_bytes(1, 8, 4, 4, 2, 4)) == (128 * 4, 128 * 4 + 2 * 128 * 4)  # 4 heads: blocks of 128


def test_shapes_that_cannot_split_are_refused():
    with pytest.raises(ValueError, match=r"must divide into 2 x CP = 8 equal chunks"):
        check_cp_shape(60, 4, 8, 2)
    with pytest.raises(ValueError, match=r"n_heads \(6\) must be a positive multiple of n_kv_heads \(4\)"):
        check_cp_shape(64, 2, 6, 4)


def _every_check(env):
    """The report's correctness grid at N = world (ours with both kernels, PyTorch's with both rotations, fp32 and
    fp64), the calls ours issues, one rank's plain attention, and the public API's refusal on CPU."""
    n = env.world_size
    mesh = init_device_mesh("cpu", (n,), mesh_dim_names=("cp",))
    results = [(case, verify.check(cfg, mesh, env.device)) for case, cfg in verify.correctness_grid(n, "cpu")]
    failed = [(case, r.config.impl, r.config.kernel, r.errors, r.sent, r.expected) for case, r in results
              if not r.passed]
    ours = {r.sent[0::2] for _, r in results if r.config.impl == "ours"}
    return failed, ours, torch_cp.public_refusal_on_cpu(mesh)


@pytest.mark.parametrize("world", [2, 4])
def test_every_check_passes_and_sends_the_formula(world):
    out = run_ranks(_every_check, world, timeout_s=240)
    for failed, ours, refusal in out:
        assert failed == []
        assert ours == {(f"recv:{world - 1} send:{world - 1}", f"recv:{2 * (world - 1)} send:{2 * (world - 1)}")}
        assert "does not have a sharding strategy registered" in refusal


def _one_rank(env):
    q, k, v, _ = _qkvd(h=4, h_kv=2, s=8)
    with Traffic() as alone:
        out = {kernel: ring_attention(q, k, v, kernel=kernel) for kernel in ("math", "fused")}
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return max((o - plain).abs().max().item() for o in out.values()), alone.describe()


def test_one_rank_is_plain_causal_attention_and_sends_nothing():
    [(err, calls)] = run_ranks(_one_rank, 1)
    assert err < 1e-12 and calls == "none"
