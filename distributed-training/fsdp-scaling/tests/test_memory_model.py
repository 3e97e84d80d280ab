"""The analytic model against hand-computed values and the ZeRO paper's own figures."""

import pytest

import memory_model as mm
from common.model import GPT, GPTConfig, count_params

FP32_ADAMW = mm.precision_for("adamw")  # 4 + 4 + 8 bytes per parameter


@pytest.mark.parametrize("cfg", [GPTConfig(d_model=32, n_layers=2, n_heads=2, seq_len=16, vocab_size=64),
                                 GPTConfig(d_model=48, n_layers=3, n_heads=6, n_kv_heads=2, d_ff=80, bias=True)],
                         ids=["plain", "gqa-bias"])
def test_unit_shapes_are_the_modules_parameters(cfg):
    root, block = mm.unit_shapes(cfg)
    assert sum(map(mm.numel, root + block * cfg.n_layers)) == count_params(cfg)
    model = GPT(cfg)
    assert sorted(mm.numel(s) for s in block) == sorted(p.numel() for p in model.layers[0].parameters())


def test_zero_figure_1_worked_example():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64-way data parallel, K = 12
    got = mm.zero_paper_table(7.5e9, 64)
    assert got["baseline"] == pytest.approx(120.0)
    assert got["zero1"] == pytest.approx(31.4, abs=0.05)
    assert got["zero2"] == pytest.approx(16.6, abs=0.05)
    assert got["zero3"] == pytest.approx(1.875)


def test_model_states_per_stage_by_hand():
    cfg = GPTConfig(d_model=32, n_layers=2, n_heads=2, seq_len=16, vocab_size=64)
    psi = count_params(cfg)  # 29,344: 2 x 12,352 per block + 4,640 for the root
    assert psi == 29344
    per = lambda s, n, **kw: mm.model_states(s, cfg, n, FP32_ADAMW, **kw)  # noqa: E731
    assert per("ddp", 4) == {"param": 4 * psi, "grad": 4 * psi, "opt": 8 * psi}
    assert per("zero1", 4) == {"param": 4 * psi, "grad": 4 * psi, "opt": 2 * psi}
    assert per("zero3", 4) == {"param": psi, "grad": psi, "opt": 2 * psi}
    assert per("zero2", 4) == per("zero3", 4)  # equal between steps; zero2 differs at the peak
    # ... and from the paper's ZeRO-2, whose parameters stay replicated: 4 Psi + (4 + 8) Psi / 4
    assert mm.paper_model_states("zero2", cfg, 4, FP32_ADAMW) == 4 * psi + 12 * psi / 4
    assert mm.paper_model_states("zero3", cfg, 4, FP32_ADAMW) == sum(per("zero3", 4).values())
    assert per("hsdp", 8, shard=2) == per("zero3", 2)
    # the peak term: root + one block gathered for zero3, everything for zero2 (fp32 compute here)
    assert mm.unsharded_peak("zero3", cfg, FP32_ADAMW) == 4 * (4640 + 12352)
    assert mm.unsharded_peak("zero2", cfg, FP32_ADAMW) == 4 * psi
    assert mm.unsharded_peak("ddp", cfg, FP32_ADAMW) == 0
    # all-gather buffers are padded like the shards: nothing at 4 ranks; at 64 every tensor with fewer
    # than 64 rows grows to 64: root +48x32 (positions) +32 (norm); block +2x32 (norms) +4x32x32 (attn)
    # +32x128 (w2); w1 (128 rows) and the 64-row tables need none
    assert mm.unsharded_peak("zero3", cfg, FP32_ADAMW, shard=4) == mm.unsharded_peak("zero3", cfg, FP32_ADAMW)
    padded = (4640 + 48 * 32 + 32) + (12352 + 2 * 32 + 4 * 32 * 32 + 32 * 128)
    assert mm.unsharded_peak("zero3", cfg, FP32_ADAMW, shard=64) == 4 * padded


def test_padding_and_whole_tensor_partition_by_hand():
    # Shard(0): 5 rows over 4 ranks -> 2 rows each (padded); 1 row over 4 ranks -> 1 row each
    assert mm.shard_numel([(5, 3), (1, 7)], 4) == 2 * 3 + 1 * 7
    # sorted greedy: 10 -> r0, 7 -> r1, 5 -> r1 (7 < 10), 3 -> r0 (10 < 12): ranks hold 13 and 12
    assert mm.zero1_worst_rank_numel([(10,), (7,), (3,), (5,)], 2) == 13
    assert mm.zero1_worst_rank_numel([(10,), (7,)], 64) == 10  # never below the largest tensor


def test_comm_plan_counts_and_volumes_by_hand():
    cfg = GPTConfig(d_model=32, n_layers=2, n_heads=2, seq_len=16, vocab_size=64)
    psi, p = count_params(cfg), FP32_ADAMW
    plan = {c["collective"]: c for c in mm.comm_plan("zero3", cfg, 4, p, accum=2)}
    # 2 micro-steps x (root once + 2 blocks twice) all-gathers; 1 reduce-scatter per unit, once
    assert plan["all_gather"]["count"] == 2 * (1 + 2 * 2) and plan["reduce_scatter"]["count"] == 3
    assert plan["reduce_scatter"]["payload_bytes"] == 4 * psi
    assert set(plan) == {"all_gather", "reduce_scatter"}
    # ZeRO section 7, in Psi elements x the ring factor (n-1)/n: DP 2, ZeRO-2 2, ZeRO-3 3 minus the
    # root's second gather (common/fsdp.py never reshards the root). 16 divides every dim: no padding.
    volume = lambda s: mm.bus_bytes(mm.comm_plan(s, cfg, 16, p)) / (4 * psi)  # noqa: E731
    assert volume("ddp") == pytest.approx(2 * 15 / 16)
    assert volume("zero2") == pytest.approx(2 * 15 / 16)
    assert volume("zero3") == pytest.approx((3 - 4640 / psi) * 15 / 16)
    hsdp = {c["collective"]: c for c in mm.comm_plan("hsdp", cfg, 8, p, mesh=(4, 2))}
    assert hsdp["all_reduce"]["group_size"] == 4 and hsdp["all_reduce"]["payload_bytes"] == 4 * psi / 2
    assert mm.comm_plan("zero3", cfg, 1, p) == [] and mm.comm_plan("ddp", cfg, 1, p) == []
