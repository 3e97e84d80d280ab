"""Memory model against ZeRO's Figure 1 and Table 1, DeepSpeed's estimators, Korthikanti's Table 2 / Fig. 1."""

import numpy as np
import pytest

from planner.evidence import published
from planner.model.degrees import FULL, NONE, SELECTIVE, Degrees
from planner.model.memory import activation_bytes, activation_coefficient, memory_breakdown, model_state_bytes
from planner.model.shapes import Shape

GIB = 2**30


def states_gb(psi, n, stage, grad_bytes=2.0):
    return float(model_state_bytes(psi, n, stage, grad_bytes).total) / 1e9


def test_zero_figure_1_and_table_1():
    # ZeRO (arXiv 1910.02054) Fig. 1: 7.5B parameters, 64-way DP, K = 12 -> 120 / 31.4 / 16.6 / 1.9 GB.
    assert [round(states_gb(7.5e9, 64, s), 1) for s in range(4)] == [120.0, 31.4, 16.6, 1.9]
    # Table 1, 1T parameters at N_d = 1024: 4011 / 2013 / 15.6 GB; 128B at N_d = 16: 608 / 368 / 128.
    # (the paper truncates: 4011.7 -> 4011)
    assert [states_gb(1e12, 1024, s) for s in (1, 2, 3)] == pytest.approx([4011, 2013, 15.6], rel=2e-3)
    assert [states_gb(128e9, 16, s) for s in (1, 2, 3)] == pytest.approx([608, 368, 128], rel=1e-3)
    # The split: stage 1 shards only the optimizer, stage 2 also gradients, stage 3 also weights.
    w, g, o = (float(x) for x in model_state_bytes(100.0, 4, 2))
    assert (w, g, o) == (200.0, 50.0, 300.0)


def test_deepspeed_estimators():
    # deepspeed/runtime/zero/stage_1_and_2.py (>= v0.14.3): GPU = 2Ψ + 18Ψ/N, with 18 = 2 (16-bit grads) + 4
    # (fp32 grads) + 4 (fp32 params) + 8 (Adam): our stage 2 with 6 gradient bytes (2 + 4) per parameter.
    psi, n = 2851e6, 8  # the doc's t5-3b example on 8 GPUs
    assert sum(model_state_bytes(psi, n, 2, grad_bytes=6.0)) == pytest.approx(2 * psi + 18 * psi / n)
    assert sum(model_state_bytes(psi, n, 2, grad_bytes=6.0)) / GIB == pytest.approx(11.28, abs=0.01)
    # stage3.py: largest_layer_memory (4 x largest layer) + 18Ψ/N; the doc prints 6.10 GB (GiB) for t5-3b
    # with a 32M-parameter largest layer. Here: the fp32 gradient partition (4) replaces the bf16 one.
    gpu = sum(model_state_bytes(psi, n, 3, grad_bytes=4.0)) + 4 * 32e6
    assert gpu == pytest.approx(4 * 32e6 + 18 * psi / n) and gpu / GIB == pytest.approx(6.10, abs=0.01)


def test_korthikanti_table_2_by_hand():
    # s=64, b=2, h=32, a=4, t=4, ffn 4h, dropout, no FlashAttention: sbh = 4096, 5as/h = 40.
    sh = Shape(layers=4, hidden=32, heads=4, kv_heads=4, vocab=100, seq=64, ffn=128)
    sbh, t = 64 * 2 * 32, 4
    def coef(t, r, sp, flash=False, fp8=False, dropout=True):
        return float(activation_coefficient(sh, t, r, sequence_parallel=sp, flash=flash, fp8=fp8, dropout=dropout))
    assert coef(t, NONE, False) == 10 + 24 / t + 40 / t  # TP only: sbh(10 + 24/t + 5as/(ht))
    assert coef(t, SELECTIVE, False) == 10 + 24 / t  # selective: the score term goes
    assert coef(t, FULL, False) == 2  # full: the layer input only
    assert coef(t, NONE, True) == (34 + 40) / t  # SP: all / t
    assert coef(t, SELECTIVE, True) == 34 / t
    assert coef(1, NONE, True, flash=True) == 34  # FlashAttention: no scores
    assert coef(1, NONE, True, flash=True, dropout=False) == 32  # no dropout masks
    assert coef(1, NONE, True, flash=True, fp8=True) == 27  # FP8 linear inputs: 34 - (3 + f/h)
    # 1F1B: the first stage holds L layers' worth (min(p, m) micro-batches of L/p layers); interleaving
    # multiplies that by 1 + (p-1)/(p·v); p = 1 adds the fp32 logits 4·s·b·(h + V)/t.
    per_layer = sbh * (34 + 40) / t
    def acts(p, v, m):
        deg = Degrees.of(t=t, p=p, b=2, v=v, m=m)
        return float(activation_bytes(sh, deg, sequence_parallel=True, flash=False, dropout=True))
    assert acts(2, 1, 8) == pytest.approx(4 * per_layer)
    assert acts(4, 1, 2) == pytest.approx(4 * per_layer * 2 / 4)  # fewer micro-batches than stages
    assert acts(2, 2, 8) == pytest.approx(4 * per_layer * (1 + 1 / 4))
    assert acts(1, 1, 8) == pytest.approx(4 * per_layer + 4 * 64 * 2 * (32 + 100) / t)


@pytest.mark.parametrize("name", list(published.KORTHIKANTI_FIG1))
def test_korthikanti_figure_1_activations_exactly(name):
    # Fig. 1 (GiB per GPU, as transcribed in Calculon's validation.py) for the Table 5 configurations.
    _, shape, tp, pp, batch, mb, (v, _), _, _ = next(r for r in published.KORTHIKANTI_TABLE5 if r[0] == name)
    _, none_gib, sel_gib = published.KORTHIKANTI_FIG1[name]
    logits = 4.0 * shape.seq * mb * (shape.hidden + shape.vocab) / tp if pp == 1 else 0.0
    for r, sp, want in ((0, False, none_gib), (1, True, sel_gib)):
        deg = Degrees.of(t=tp, p=pp, b=mb, v=v, m=batch // mb, recompute=r)
        got = float(activation_bytes(shape, deg, sequence_parallel=sp, flash=False, dropout=True)) - logits
        assert got / GIB == pytest.approx(want, rel=1e-4)


def test_breakdown_sums_and_is_vectorised():
    sh = Shape(8, 512, 8, 4, 1000, 256, 2048)
    t, p, z = np.array([1, 2, 2]), np.array([1, 2, 4]), np.array([0, 1, 3])
    mem = memory_breakdown(sh, Degrees.of(t=t, p=p, d=4, b=2, m=8, zero=z, recompute=[NONE, SELECTIVE, FULL]))
    parts = mem.params + mem.grads + mem.optimizer + mem.activations + mem.buffers
    np.testing.assert_allclose(parts, mem.total)
    one = memory_breakdown(sh, Degrees.of(t=2, p=4, d=4, b=2, m=8, zero=3, recompute=FULL))
    assert float(one.total) == pytest.approx(float(mem.total[2]))


def test_fp8_without_sequence_parallelism_halves_the_replicated_linear_inputs_too():
    # Without SP every TP rank keeps the QKV and MLP-up inputs whole; under FP8 they are 1-byte copies, so
    # FP8 saves 2 sbh of the replicated terms in full and (1 + f/h) sbh of the split ones (o-proj and
    # MLP-down inputs) divided by t. ffn 4h, no dropout, FlashAttention: bf16 8 + 24/t, FP8 6 + 19/t.
    sh = Shape(layers=4, hidden=32, heads=4, kv_heads=4, vocab=100, seq=64, ffn=128)
    for t in (1, 2, 8):
        bf16, fp8 = (float(activation_coefficient(sh, t, NONE, sequence_parallel=False, flash=True, fp8=f))
                     for f in (False, True))
        assert (bf16, fp8) == (8 + 24 / t, 6 + 19 / t)
        assert bf16 - fp8 == 2 + (1 + 4) / t
        sp = float(activation_coefficient(sh, t, NONE, sequence_parallel=True, flash=True, fp8=True))
        assert sp == 25 / t if t > 1 else sp == fp8  # with SP the same 25 bytes are all split
