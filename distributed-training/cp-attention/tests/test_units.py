"""The pieces in one process: the block kernels, the layout (who holds which tokens, which pairs attend, and the
balance with packed documents), the byte formulas by hand, and the refusals of shapes that cannot split."""

import pytest
import torch
import torch.nn.functional as F

import verify
from common.attention_block import block_backward, block_forward, default_scale
from common.cp_bytes import allgather_bytes, cp_bytes, ring_bytes, ulysses_bytes
from common.cp_checks import check_cp_shape
from common.cp_layout import CPLayout, Pair, balanced_positions, unmasked_pairs


def _qkvd(h=4, h_kv=2, s=8, d=4, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, n, s, d, generator=g, dtype=dtype) for n in (h, h_kv, h_kv, h)]


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


def test_the_one_document_ring_does_one_call_per_step():
    lay = CPLayout.causal(32, 4)  # chunks of 4; rank 1 holds 4-7 and 24-27
    assert lay.pairs(1, 1) == [Pair(slice(0, 8), slice(0, 8), True)]  # its own pair: one causal square
    assert lay.pairs(1, 0) == [Pair(slice(0, 8), slice(0, 4), False)]  # an earlier rank: its first chunk, all queries
    assert lay.pairs(1, 3) == [Pair(slice(4, 8), slice(0, 8), False)]  # a later one: our second chunk, all its keys


def test_packed_documents_stay_balanced_per_document_and_not_per_sequence():
    docs = CPLayout.of(64, 2, (8, 40, 16))  # every document a multiple of 2N = 4
    held = [docs.positions(r) for r in range(2)]
    assert torch.equal(torch.sort(torch.cat(held)).values, torch.arange(64))
    work = [docs.work(r) for r in range(2)]
    assert work == [unmasked_pairs(p, docs) for p in held]  # the pairs are the mask: the same count
    assert work[0] == work[1] == int(docs.allowed().sum()) // 2
    # the whole sequence's head-tail split over the same documents leaves the ranks unequal
    naive = [unmasked_pairs(balanced_positions(64, 2, r), docs) for r in range(2)]
    assert naive[0] != naive[1] and sum(naive) == sum(work)
    # a pair never crosses a document: its queries and keys are of one and the same document
    doc = docs.doc_ids()
    for r in range(2):
        for j in range(2):
            for p in docs.pairs(r, j):
                seen = doc[held[r][p.q]].unique().tolist(), doc[held[j][p.k]].unique().tolist()
                assert seen[0] == seen[1] and len(seen[0]) == 1, (r, j, p)


def test_the_byte_formulas_by_hand():
    # b 1, s 8, 2 K/V heads of 4, N 2, fp32: a block is 2 x 1 x 4 x 2 x 4 = 64 elements, one hop each way
    assert tuple(ring_bytes(1, 8, 2, 4, 2, 4)) == (64 * 4, 64 * 4 + 64 * 4)
    # bf16 K/V, fp32 dK/dV, N 4: 3 hops of 2 x 2 x 16 x 8 x 128 elements
    block = 2 * 2 * 16 * 8 * 128
    assert tuple(ring_bytes(2, 64, 8, 128, 4, 2)) == (3 * block * 2, 3 * block * (2 + 4))
    # the all-gather: its block to 3 peers forward; again, plus 3 of the 4 fp32 blocks of the reduce-scatter
    assert tuple(allgather_bytes(2, 64, 8, 128, 4, 2)) == (3 * block * 2, 3 * block * 2 + 3 * block * 4)
    # Ulysses, N 4, 8 query and 4 K/V heads of 16, s 32, b 1, fp32: 8 tokens per rank; q/k/v hold 16 heads and the
    # output 8, of which 3/4 leave the rank: (16 + 8) x 8 x 16 x 3/4 elements each way
    assert tuple(ulysses_bytes(1, 32, 8, 4, 16, 4, 4)) == (24 * 8 * 16 * 3 // 4 * 4,) * 2
    assert cp_bytes("ulysses", 1, 32, 8, 4, 16, 4, 4) == ulysses_bytes(1, 32, 8, 4, 16, 4, 4)
    assert tuple(verify.torch_bytes(1, 8, 4, 4, 2, 4)) == (128 * 4, 128 * 4 + 2 * 128 * 4)  # 4 heads: blocks of 128
    for n in (1, 2, 4, 8):  # the same bytes by two routes, whatever the shape
        assert ring_bytes(3, 48 * n, 5, 12, n, 2) == allgather_bytes(3, 48 * n, 5, 12, n, 2)
    # Ulysses' bytes per rank fall with N, the ring's do not (MHA, 32 heads)
    u = [ulysses_bytes(1, 4096, 32, 32, 128, n, 2).total for n in (2, 4, 8)]
    r = [ring_bytes(1, 4096, 32, 128, n, 2).total for n in (2, 4, 8)]
    assert u[0] > u[1] > u[2] and r[0] < r[1] < r[2]


def test_shapes_that_cannot_split_are_refused():
    with pytest.raises(ValueError, match=r"must divide into 2 x CP = 8 equal chunks"):
        check_cp_shape(60, 4, 8, 2)
    with pytest.raises(ValueError, match=r"n_heads \(6\) must be a positive multiple of n_kv_heads \(4\)"):
        check_cp_shape(64, 2, 6, 4)
    with pytest.raises(ValueError, match=r"every document must divide into 2 x CP = 4 equal chunks .* 6 does not"):
        check_cp_shape(16, 2, 4, 4, documents=(6, 10))
    with pytest.raises(ValueError, match=r"summing to the sequence \(16\)"):
        check_cp_shape(16, 2, 4, 4, documents=(8, 4))
    with pytest.raises(ValueError, match=r"n_heads \(8\) and n_kv_heads \(2\) must both divide by 4"):
        check_cp_shape(64, 4, 8, 2, kind="ulysses")
    with pytest.raises(ValueError, match=r"must divide into 2 x CP = 4 equal chunks"):
        balanced_positions(10, 2, 0)  # never a silent drop of tokens 8 and 9
