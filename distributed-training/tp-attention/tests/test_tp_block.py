"""Tensor-parallel block vs the single-device block at t = 1, 2, 4 (CPU, gloo): parity, collective counts,
bytes; the slicing rules checked in one process; DTensor with and without PrepareModuleInput."""

import pytest
import torch

from comm_count import CommCounter
from common.model import Attention, GPTConfig
from testkit import run_ranks
from mappings import TPGroup, without_communication
from tp_block import TPAttention, fused_qkv_rows
from tp_config import VerifyConfig
from verify import check

TINY = dict(n_heads=8, n_kv_heads=4, d_model=64, seq_len=8, batch=2)  # GQA, head_dim 8


def _configs(tp: int) -> list[VerifyConfig]:
    odd = dict(n_heads=4 * tp, n_kv_heads=4 * tp, d_model=28 * tp, d_ff=12 * tp, seq_len=5 * tp, batch=3, bias=True)
    grid = []
    for sp in (False, True):
        grid += [VerifyConfig(tp=tp, sp=sp, **TINY),  # block, GQA
                 VerifyConfig(tp=tp, sp=sp, fused_qkv=True, **TINY),
                 VerifyConfig(tp=tp, sp=sp, **odd),  # head_dim 7, d_ff not 4d, odd batch and sequence, biases
                 VerifyConfig(tp=tp, sp=sp, module="attn", fused_qkv=sp, **TINY),
                 VerifyConfig(tp=tp, sp=sp, module="mlp", **TINY)]
    return grid


def _check_all(env, configs):
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (env.world_size,), mesh_dim_names=("tp",))
    return [check(cfg, mesh, env.device) for cfg in configs]


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_parity_counts_and_bytes(tp):
    configs = _configs(tp)
    for cfg, res in zip(configs, run_ranks(_check_all, tp, configs)[0]):
        label = f"{cfg.module} sp={cfg.sp} fused={cfg.fused_qkv} bias={cfg.bias}"
        assert res.passed, (label, res)
        assert res.max_err <= 1e-5 and not res.uncovered_params, label
        regions = 2 if cfg.module == "block" else 1  # 1 all-reduce forward + 1 backward per region
        want = {} if tp == 1 else ({"all_gather": regions, "reduce_scatter": regions} if cfg.sp else
                                   {"all_reduce": regions})
        assert res.collectives.forward == want and res.collectives.backward == want, label
        # SP: LayerNorms and row-parallel biases saw only a sequence shard; their grads are summed once per step
        has_partial_grads = cfg.sp and tp > 1 and (cfg.module == "block" or cfg.bias)
        assert res.collectives.grad_sync == ({"all_reduce": 1} if has_partial_grads else {}), label
        # 4*b*s*h*(t-1)/t elements per region (SC21: 8bsh(t-1)/t per layer), fp32
        assert res.comm_bytes_measured == \
            pytest.approx(regions * 4 * cfg.batch * cfg.seq_len * cfg.d_model * 4 * (tp - 1) / tp), label
        if tp == 1:  # t = 1 slices are the master itself: bit-identical
            assert res.max_err == 0.0 or cfg.fused_qkv, label


def test_dtensor_matches_and_needs_prepare_module_input():
    base = dict(tp=2, **TINY)
    configs = [VerifyConfig(impl="dtensor", **base), VerifyConfig(impl="dtensor", sp=True, **base),
               VerifyConfig(impl="dtensor-naive", **base), VerifyConfig(impl="dtensor", module="attn", **base)]
    results = run_ranks(_check_all, 2, configs)[0]
    for res in results:
        assert res.errors_ok and res.max_err <= 1e-5, res
    megatron, sp, naive, attn = (r.collectives for r in results)
    assert megatron.forward == megatron.backward == {"all_reduce": 2}
    assert sp.forward == sp.backward == {"all_gather": 2, "reduce_scatter": 2}
    assert attn.forward == attn.backward == {"all_reduce": 1}
    # without PrepareModuleInput each of wq, wk, wv reduces its own input gradient: 3 + 1 (MLP)
    assert naive.forward == {"all_reduce": 2} and naive.backward == {"all_reduce": 4}
    bytes_sent = [r.comm_bytes_measured for r in results]
    assert bytes_sent[2] == 1.5 * bytes_sent[0]  # 6 all-reduces of b*s*h instead of 4


def test_bf16_within_the_single_device_bf16_error():
    base = dict(tp=2, dtype="bfloat16", n_heads=4, n_kv_heads=2, d_model=32, seq_len=8, batch=2)
    configs = [VerifyConfig(**base), VerifyConfig(sp=True, fused_qkv=True, **base),
               VerifyConfig(impl="dtensor", **base)]
    for res in run_ranks(_check_all, 2, configs)[0]:
        floor = res.reference_vs_fp32
        # the yardstick itself must look like bf16 rounding (u = 2^-8), not like a broken reference
        assert 2 ** -9 < floor < 2 ** -3 and res.tolerance == 2 * floor
        assert res.passed and res.max_err <= res.tolerance, res


def test_slicing_rules_in_one_process():
    """Simulated ranks (no process group): slices tile the master exactly, and partial outputs sum to it."""
    torch.manual_seed(0)
    H, Hkv, hd, t = 4, 2, 8, 2
    ref = Attention(GPTConfig(d_model=H * hd, n_heads=H, n_kv_heads=Hkv))
    x = torch.randn(2, 6, H * hd)
    ranks = [TPAttention(ref, TPGroup(None, t, r), fused_qkv=True) for r in range(t)]
    # Megatron's test_initialization: the TP shards, put back together, are the master weights, bit for bit
    fused_master = torch.cat([ref.wq.weight, ref.wk.weight, ref.wv.weight])
    assert fused_qkv_rows(H, Hkv, hd, 0, t) == [(0, 16), (32, 40), (48, 56)]
    assert fused_qkv_rows(H, Hkv, hd, 1, t) == [(16, 32), (40, 48), (56, 64)]
    for r, m in enumerate(ranks):
        assert torch.equal(m.wqkv.weight, torch.cat([fused_master[a:b] for a, b in fused_qkv_rows(H, Hkv, hd, r, t)]))
    assert torch.equal(torch.cat([m.wo.weight for m in ranks], dim=1), ref.wo.weight)
    with torch.no_grad(), without_communication(), CommCounter(t) as c:
        partial = [m(x) for m in ranks]  # g skipped: each rank's output is its partial sum
        torch.testing.assert_close(sum(partial), ref(x), rtol=1e-5, atol=1e-6)  # what g's all-reduce computes
        # the trap: t contiguous chunks of the fused [Q | K | V] weight give rank 0 all of Q and none of V
        for r, m in enumerate(ranks):
            m.wqkv.weight.copy_(fused_master.chunk(t)[r])
        assert (sum(m(x) for m in ranks) - ref(x)).abs().max() > 1e-2
    assert not c.counts


def test_bad_shapes_are_rejected_when_building():
    """The builders check divisibility too, not only the command line."""
    with pytest.raises(ValueError, match=r"n_kv_heads \(2\) must be divisible by tp \(4\)"):
        TPAttention(Attention(GPTConfig(d_model=64, n_heads=4, n_kv_heads=2)), TPGroup(None, 4, 0))
