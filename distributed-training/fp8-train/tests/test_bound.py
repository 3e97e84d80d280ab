"""The FP8 bound's bookkeeping (bound.py); the measurement itself needs a GPU (tests/test_gpu_fp8.py).

    - a profiled GEMM is FP8-able exactly when its dimensions are {tokens, in, out} of a mapped linear:
      forward, input gradient and weight gradient alike; the LM head's and batched GEMMs are not;
    - operand shapes are read from aten::mm / addmm argument lists, with or without an out= tensor;
    - bound step = step - BF16 GEMMs + FP8 GEMMs, by hand.
"""

import pytest

from training import bound


def test_fp8able_gemms_are_recognised_by_their_dimensions():
    linears = {(32, 96), (32, 32), (32, 128), (128, 32)}  # wqkv-like, wo, w1, w2 at d = 32
    T = 64
    fwd, dgrad, wgrad = (T, 128, 32), (T, 32, 128), (128, 32, T)  # w1: x(T,32)W^T, dy(T,128)W, dy^T x
    assert bound.classify(fwd, False, T, linears) == bound.Gemm(T, 128, 32, False)
    assert bound.classify(dgrad, True, T, linears).backward
    assert bound.classify(wgrad, True, T, linears) == bound.Gemm(128, 32, T, True)
    assert bound.classify((T, 256, 32), False, T, linears) is None  # LM head (vocab 256)
    assert bound.classify((T, 32, 96), False, T + 1, linears) is None  # another token count


def test_operands_with_and_without_an_out_tensor():
    assert bound.operands("aten::mm", [[64, 32], [32, 128]]) == (64, 128, 32)
    assert bound.operands("aten::mm", [[64, 32], [32, 128], [64, 128]]) == (64, 128, 32)
    assert bound.operands("aten::addmm", [[128], [64, 32], [32, 128]]) == (64, 128, 32)


def test_bound_arithmetic_by_hand():
    b = bound.Bound(bf16_step_ms=100.0, bf16_gemm_ms=60.0, fp8_gemm_ms=32.0, other_gemm_ms=2.0, fp8_gemms=48,
                    gemm_flop=6e13)
    assert b.bound_step_ms == 72.0
    assert b.speedup == pytest.approx(100 / 72)
    row = b.row()
    assert row["gemm_share"] == 0.6
    assert row["bf16_gemm_tflops"] == pytest.approx(1000.0) and row["fp8_gemm_tflops"] == pytest.approx(1875.0)
    assert set(row) <= set(bound.COLUMNS)
