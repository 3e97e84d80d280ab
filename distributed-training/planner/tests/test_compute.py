"""The op-by-op compute model: GEMM shape efficiency, rooflines, kernel counts, attention, recompute, eager vs fused."""

from dataclasses import replace

import numpy as np
import pytest

from planner.model.calibration import FITTED, ComputeConstants
from planner.model.calibration import attention_shape_factor
from planner.model.compute import (MAMF_SHAPE, Kernels, Rates, attention_times, elementwise_times, gemm_efficiency,
                                   gemm_time, head_times, layer_times, loss_implementation, loss_passes, optimizer_time,
                                   sm_count, tensor_rate)
from planner.model.shapes import Shape

SH = Shape(layers=4, hidden=1024, heads=8, kv_heads=8, vocab=1000, seq=2048, ffn=4096)


def rates(**kw) -> Rates:
    base = dict(matmul=100e12, bf16_matmul=100e12, attention=50e12, hbm=1e12, sms=108, consts=FITTED)
    return Rates(**{**base, **kw})


def test_gemm_efficiency_falls_for_small_and_skinny_gemms_like_calculons_a100_table():
    # Calculon systems/a100_80g.json: 0.6 / 0.9 / 0.95 of peak at 1 / 16 / 128 GFLOP, i.e. relative to its
    # large-GEMM 0.95: 0.63 / 0.95 / 1.0. Cubic GEMMs of those sizes, relative to the MAMF shape's efficiency:
    big = float(gemm_efficiency(*MAMF_SHAPE["a100", "bf16"], 108, FITTED))
    for gflop, want in ((1, 0.63), (16, 0.95), (128, 1.0)):
        n = round((gflop * 1e9 / 2) ** (1 / 3) / 128) * 128  # tile-aligned cube of about that many FLOPs
        assert float(gemm_efficiency(n, n, n, 108, FITTED)) / big == pytest.approx(want, abs=0.12), gflop
    # Monotone in every dimension over tile-aligned sizes; short K (the attention scores' head size) costs.
    effs = [float(gemm_efficiency(4096, 4096, k, 132, FITTED)) for k in (64, 128, 512, 4096)]
    assert effs == sorted(effs) and effs[0] < 0.6 * effs[-1]
    small, large = (float(gemm_efficiency(n, n, k, 132, FITTED)) for n, k in ((128, 64), (8192, 8192)))
    assert 0 < small < large <= 1


def test_tensor_rate_reproduces_the_measured_mamf_at_its_shape():
    # At the shape where mamf-finder measured it, the model's GEMM runs at MAMF x the sustained fraction.
    for gpu, mamf in (("a100", 271.2), ("h100", 794.5)):
        c = FITTED
        r = tensor_rate(gpu, "bf16", mamf, c)
        m, n, k = MAMF_SHAPE[gpu, "bf16"]
        achieved = 2.0 * m * n * k / (2.0 * m * n * k / (r * float(gemm_efficiency(m, n, k, sm_count(gpu), c))))
        assert achieved / 1e12 == pytest.approx(mamf * c.sustained(gpu))


def test_gemm_time_is_a_roofline_plus_one_kernel():
    r = rates()
    # Compute-bound: a large square GEMM takes F / (R·eta) + one kernel.
    m = n = k = 8192
    want = 2.0 * m * n * k / (100e12 * float(gemm_efficiency(m, n, k, 108, FITTED))) + FITTED.kernel_us * 1e-6
    assert float(gemm_time(m, n, k, 100e12, r)) == pytest.approx(want)
    # Memory-bound: K = 8 moves (M·K + K·N + M·N)·2 bytes and does almost no math.
    m, n, k = 65536, 8192, 8
    moved = (m * k + k * n + m * n) * 2.0
    assert float(gemm_time(m, n, k, 100e12, r)) == pytest.approx(moved / 1e12 + FITTED.kernel_us * 1e-6)


def test_kernel_counts_exactly():
    # With infinite rates every kernel costs exactly kernel_us: the layer's kernel count by hand.
    r = rates(matmul=1e30, bf16_matmul=1e30, attention=1e30, hbm=1e30)
    k = FITTED.kernel_us * 1e-6
    lt = layer_times(SH, 1, 1, 1, Kernels(), r)
    # Forward: 4 GEMMs + 1 attention + 2 norms + 2 residual adds + 1 activation = 10 kernels.
    assert float(lt["fwd"]) == pytest.approx(10 * k)
    # Backward: 8 GEMMs + 2 attention (FlashAttention's backward and its dO·O preprocessing) + 2 norms +
    # 1 activation (residual gradients pass through) = 13.
    assert float(lt["bwd"]) == pytest.approx(13 * k)
    # Eager (torchtitan without compile): RMSNorm is 6 kernels forward, 8 backward; SwiGLU 2 and 3; rotary 3.
    eager = layer_times(SH, 1, 1, 1, Kernels(fused=False, rope=True), r)
    assert float(eager["fwd"]) == pytest.approx((4 + 1 + 2 * 6 + 2 + 2 + 3) * k)
    assert float(eager["bwd"]) == pytest.approx((8 + 2 + 2 * 8 + 3 + 3) * k)
    # Context parallelism: one attention kernel per ring step.
    assert float(attention_times(SH, 1, 4, 1, Kernels(), r)["fwd"]) == pytest.approx(4 * k)


def test_memory_bound_bytes_by_hand():
    # Fused, no SP, t = 1, b = 1: norms 2 x 4 B, residuals 2 x 6 B per hidden element; activation 4 B per ffn element.
    r = rates(hbm=1e12, consts=replace(FITTED, kernel_us=0.0))
    fwd, bwd = elementwise_times(SH, 1, 1, 1, Kernels(), r)
    tokens = SH.seq
    assert float(fwd) == pytest.approx((tokens * SH.hidden * (2 * 4 + 2 * 6) + tokens * SH.ffn * 4) / 1e12)
    assert float(bwd) == pytest.approx((tokens * SH.hidden * 2 * 8 + tokens * SH.ffn * 6) / 1e12)
    # Sequence parallelism splits the norm and residual work over t; without it every TP rank repeats it.
    sp = elementwise_times(SH, 4, 1, 1, Kernels(sequence_parallel=True), r)[0]
    no_sp = elementwise_times(SH, 4, 1, 1, Kernels(sequence_parallel=False), r)[0]
    assert float(no_sp) - float(sp) == pytest.approx(tokens * SH.hidden * 20 * (1 - 1 / 4) / 1e12)


def test_attention_flash_vs_materialised_scores():
    r = rates(consts=replace(FITTED, kernel_us=0.0))
    flash = attention_times(SH, 1, 1, 2, Kernels(flash=True), r)
    # Causal FlashAttention: 4·b·a·s²·d / 2 forward FLOPs at the attention rate, 2.5x that backward.
    fwd_flops = 4.0 * 2 * SH.heads * SH.seq**2 * SH.head_dim / 2
    assert float(flash["fwd"]) == pytest.approx(fwd_flops / 50e12) and float(flash["bwd"]) == pytest.approx(
        2.5 * fwd_flops / 50e12)
    plain = attention_times(SH, 1, 1, 2, Kernels(flash=False, dropout=True), r)
    scores = 2 * SH.heads * SH.seq**2
    # Softmax reads and writes the scores (4 B), dropout reads them and writes output and mask (5 B).
    assert float(plain["scores_fwd"]) == pytest.approx(9.0 * scores / 1e12)
    assert float(plain["fwd"]) > float(plain["scores_fwd"]) > 0
    # Halving TP's heads halves the attention work.
    assert float(attention_times(SH, 2, 1, 2, Kernels(), r)["fwd"]) == pytest.approx(float(flash["fwd"]) / 2)


def test_tp_slices_the_gemms_and_recompute_modes():
    r = rates(consts=replace(FITTED, kernel_us=0.0))
    one, two = layer_times(SH, 1, 1, 4, Kernels(), r), layer_times(SH, 2, 1, 4, Kernels(), r)
    assert 0.45 < float(two["gemm_fwd"]) / float(one["gemm_fwd"]) < 0.6  # half the work, slightly less efficient
    assert float(one["recompute_full"]) == float(one["fwd"])
    assert float(one["recompute_selective"]) == float(one["attn_fwd"])
    assert float(one["recompute_op"]) == pytest.approx(float(one["elementwise_fwd"]) + 0.5 * float(one["gemm_fwd"]))
    # Eager kernels move more bytes than fused ones: torchtitan's composite RMSNorm, the GPT under autocast.
    assert float(layer_times(SH, 1, 1, 4, Kernels(fused=False, rope=True), r)["fwd"]) > float(one["fwd"])
    assert float(layer_times(SH, 1, 1, 4, Kernels(fused=False, autocast=True), r)["fwd"]) > float(one["fwd"])


def test_head_and_optimizer_by_hand():
    r = rates(consts=replace(FITTED, kernel_us=0.0))
    # Adam: 26 + 2g bytes per parameter (fp32 master, m, v, gradient read; master, m, v, bf16 written; clip).
    assert float(optimizer_time(1e9, 4.0, r)) == pytest.approx(1e9 * 34 / 1e12)
    # As the labs run it, fp32 gradients (g = 4): torch's fused AdamW with the clip folded in (fp8-train) reads
    # master, m, v, g and writes master, m, v (28 B), the norm reads g (4 B); the default foreach AdamW without a
    # clip (fsdp-scaling, parallel-3d) makes eight passes: 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16 = 80 B.
    assert float(optimizer_time(1e9, 4.0, r, bf16_copy=False, impl="fused")) == pytest.approx(1e9 * 32 / 1e12)
    assert float(optimizer_time(1e9, 4.0, r, bf16_copy=False, impl="foreach")) == pytest.approx(1e9 * 80 / 1e12)


def test_the_cross_entropy_as_each_stack_runs_it_by_hand():
    # V/t = 500 logits per token on each of 2 TP ranks, 2048 tokens; the LM head's GEMMs are the same in every stack,
    # so the stacks differ by their loss passes alone: bytes per logit at the HBM rate, kernels at the kernel cost.
    r = rates(consts=replace(FITTED, kernel_us=2.0))
    logits = SH.seq * SH.vocab / 2
    megatron = float(head_times(SH, 2, 1, 1, Kernels(), r)["head"])  # fused kernels from eager Python: Megatron's
    eager = float(head_times(SH, 2, 1, 1, Kernels(fused=False), r)["head"])  # PyTorch's F.cross_entropy, upcast
    compiled = float(head_times(SH, 2, 1, 1, Kernels(host="graphs"), r)["head"])  # inside a captured graph
    # Megatron's / nanotron's vocab-parallel loss: 6 + 4 + 8 + 8 + 4 + 8 B forward, 8 + 6 B backward; 11 kernels.
    assert loss_passes(Kernels()) == (52.0, 11) and loss_implementation(Kernels()) == "vocab-parallel"
    # PyTorch's: upcast 6, log-softmax 12, NLL gradient 4, log-softmax backward 12, downcast 6 = 40 B in 8 kernels.
    assert loss_passes(Kernels(fused=False)) == (40.0, 8) and loss_passes(Kernels(host="graphs")) == (6.0, 2)
    # torchtitan compiles the blocks, not the loss: PyTorch's.
    assert loss_implementation(Kernels(host="compiled")) == "eager"
    assert megatron - eager == pytest.approx(logits * (52 - 40) / 1e12 + (11 - 8) * 2e-6)
    assert eager - compiled == pytest.approx(logits * (40 - 6) / 1e12 + (8 - 2) * 2e-6)


def test_constants_are_inside_their_fit_bounds():
    from planner.model.calibration import FIT_BOUNDS
    for name, (lo, hi) in FIT_BOUNDS.items():
        assert lo <= getattr(FITTED, name) <= hi, name
    assert isinstance(FITTED, ComputeConstants) and np.isfinite(FITTED.kernel_us)


def test_tile_and_wave_quantization_by_hand_with_the_presets_sm_counts():
    # SM counts from common/hardware.py (NVIDIA data sheets): A100 108, H100/H200 132, B200 148.
    assert [sm_count(g) for g in ("a100", "h100", "h200", "b200", "toy")] == [108, 132, 132, 148, 132]
    c = FITTED  # wave allowance 0.25 wave, K0 = 64 steps of the K loop
    # 4096 x 384 x 1024 (an MLP's down projection at TP 8 of a small model): 32 x 3 = 96 full tiles, one partial wave
    # on 132 SMs (0.727 of a wave): eta = 1 (no padding) x 0.727 / (0.727 + 0.25) x 1024 / (1024 + 64).
    waves = 96 / 132
    assert float(gemm_efficiency(4096, 384, 1024, 132, c)) == pytest.approx(waves / (waves + 0.25) * 1024 / 1088)
    # The same GEMM on an A100's 108 SMs fills more of a wave.
    assert float(gemm_efficiency(4096, 384, 1024, 108, c)) > float(gemm_efficiency(4096, 384, 1024, 132, c))
    # Tile quantization: 100 x 200 fills 2 tiles of 128 x 128 to 20,000 / 32,768 = 0.61; K = 64 pays half to K0.
    waves = 2 / 132
    assert float(gemm_efficiency(100, 200, 64, 132, c)) == pytest.approx(
        20000 / 32768 * waves / (waves + 0.25) * 64 / 128)
    # FP8's K loop covers twice the elements per step: the same K pays twice K0's elements.
    assert float(gemm_efficiency(4096, 4096, 1024, 132, c, elem_bytes=1.0)) == pytest.approx(
        float(gemm_efficiency(4096, 4096, 1024, 132, c)) * (1088 / 1024) * 1024 / (1024 + 128))


def test_flash_attention_rate_by_sequence_and_head_size_by_hand():
    # Hopper FA2, forward + backward, causal (flash2_h100_fwd_bwd_benchmark.png): 294 TFLOP/s at 4k tokens and head
    # 128 (the reference), 257 at head 64, 265 at 2k; between measured lengths linear in log2(seq); head 96 halfway.
    fa2 = ("hopper", "fa2")
    assert float(attention_shape_factor(fa2, 4096, 128)) == pytest.approx(1.0)
    assert float(attention_shape_factor(fa2, 4096, 64)) == pytest.approx(257 / 294)
    assert float(attention_shape_factor(fa2, 2048, 128)) == pytest.approx(265 / 294)
    assert float(attention_shape_factor(fa2, 2 ** 11.5, 128)) == pytest.approx((265 + 294) / 2 / 294)
    assert float(attention_shape_factor(fa2, 4096, 96)) == pytest.approx((257 + 294) / 2 / 294)
    # Beyond the measured range: the nearest point (512 tokens: 163; head 32 takes head 64's curve); no curve: 1.
    assert float(attention_shape_factor(fa2, 100, 128)) == pytest.approx(163 / 294)
    assert float(attention_shape_factor(fa2, 4096, 32)) == pytest.approx(257 / 294)
    assert float(attention_shape_factor(None, 1024, 64)) == 1.0
    # FlashAttention-3 (hopper "best"): 420 at head 64 and 579 at head 128, forward, 4k; head 256 is faster still.
    assert float(attention_shape_factor(("hopper", "best"), 4096, 64)) == pytest.approx(420 / 579)
    assert float(attention_shape_factor(("hopper", "best"), 4096, 256)) == pytest.approx(612 / 579)
    # The attention core takes that rate: a head-64 model at 4k runs its FLOPs 294/257 times longer than at the
    # reference (kernel costs aside), and a CP rank's chunk (s/c queries) runs at the chunk's length.
    r0 = rates(consts=replace(FITTED, kernel_us=0.0))
    flat, curved = r0, replace(r0, attention_curve=fa2)
    sh64 = Shape(layers=4, hidden=1024, heads=16, kv_heads=16, vocab=1000, seq=4096, ffn=4096)  # head 64
    ker = Kernels(attention="fa2")
    assert float(attention_times(sh64, 1, 1, 2, ker, curved)["fwd"]) == pytest.approx(
        float(attention_times(sh64, 1, 1, 2, ker, flat)["fwd"]) * 294 / 257)
    assert float(attention_times(sh64, 1, 2, 2, ker, curved)["bwd"]) == pytest.approx(
        float(attention_times(sh64, 1, 2, 2, ker, flat)["bwd"]) * 294 / 232)  # 2k chunks at head 64: 232


def test_megatrons_fused_softmax_cliff():
    # Megatron's fused scale-mask-softmax needs b x heads-per-rank a multiple of 4 (sk > 128), 16 < sk <= 4096 and
    # sq, sk multiples of 4 (fused_softmax.py is_kernel_available); otherwise its fp32 fallback moves 36 + 40 B per
    # score in 5 + 5 kernels where the kernel moves 4 + 6 B in 1 + 1.
    from planner.model.compute import SOFTMAX_FALLBACK, attention_times, fused_softmax_available
    ker = Kernels(flash=False)
    assert bool(fused_softmax_available(ker, 1, 8, 2048, 2048)) and not fused_softmax_available(ker, 1, 6, 2048, 2048)
    assert bool(fused_softmax_available(ker, 2, 6, 2048, 2048)) and not fused_softmax_available(ker, 1, 8, 8192, 8192)
    assert not fused_softmax_available(Kernels(flash=False, fused=False), 1, 8, 2048, 2048)
    sh = Shape(layers=1, hidden=3072, heads=24, kv_heads=24, vocab=1000, seq=2048, ffn=12288)
    r = Rates(matmul=1e15, bf16_matmul=1e15, attention=1e15, hbm=1e12, sms=132, consts=FITTED)
    fused, cliff = attention_times(sh, 4, 1, 2, ker, r), attention_times(sh, 4, 1, 1, ker, r)  # 6 heads per rank
    scores = 1 * 6 * 2048 * 2048
    assert float(cliff["scores_fwd"]) == pytest.approx(SOFTMAX_FALLBACK[0][0] * scores / 1e12 + 5 * r.kernel_s)
    assert float(fused["scores_fwd"]) == pytest.approx(4.0 * 2 * scores / 1e12 + r.kernel_s)
