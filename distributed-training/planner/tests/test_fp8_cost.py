"""FP8 as it runs: the cast bytes and kernels of each backend and recipe by hand, FP8 GEMM efficiency by shape,
the FP8 all-gather, and the crossover the physics implies (FP8 slower than bf16 for small layers)."""

from dataclasses import replace

import numpy as np
import pytest

from common.hardware import get_preset
from planner.model import fp8_cost
from planner.model.calibration import FITTED
from planner.model.cluster import make_cluster
from planner.model.compute import (Kernels, Rates, fp8_cast_times, fp8_weight_cast_time, gemm_efficiency, layer_times,
                                   tensor_rate)
from planner.model.costs import rates_for, step_costs
from planner.model.degrees import Degrees
from planner.model.fp8_cost import BACKENDS, LinearOperands, Passes, cast_cost, quantize_passes
from planner.model.shapes import Shape


@pytest.mark.parametrize("backend, recipe, compiled, want", [
    # TE's cast-transpose: read the bf16 tensor once, write both FP8 layouts (delayed: amax inside the cast).
    ("te", "delayed", False, Passes(2 + 2, 1)),
    # Current scaling: one more read for the amax before the cast can start.
    ("te", "current", False, Passes(2 + 2 + 2, 2)),
    # torchao keeps the bf16 tensor and casts again in the backward: twice (amax read, cast read, 1-byte write).
    ("torchao", "tensorwise", True, Passes(2 * (2 + 2 + 1), 4)),
    # The native layer under compile casts straight into both layouts, like TE.
    ("native", "delayed", True, Passes(2 + 2, 1)),
    # Eager native: aminmax (read 2), upcast/scale/clamp/cast (2 + 25 B in 4 kernels), transposed copy (2 B).
    ("native", "delayed", False, Passes(2 + 2 + 25 + 2, 1 + 4 + 1)),
])
def test_quantize_passes_by_hand(backend, recipe, compiled, want):
    assert quantize_passes(BACKENDS[backend], recipe, compiled, 2.0) == want


def test_cast_cost_follows_what_each_backend_fuses():
    # One block's q, k, v as three Linears reading one normed input, then o, MLP up and down: elements by hand.
    x, w, dy = 100.0, 10.0, 50.0
    lins = [LinearOperands(x, w, dy, "norm"), LinearOperands(x, w, dy, "shared"), LinearOperands(x, w, dy, "shared"),
            LinearOperands(x, w, dy, "own"), LinearOperands(x, w, dy, "norm"), LinearOperands(x, w, dy, "act")]
    te = cast_cost(lins, BACKENDS["te"], "delayed", False, 2.0)
    assert te.bytes == pytest.approx(6 * (x + w + dy) * 4)  # te.Linear casts every input, q/k/v's thrice
    # torchao under compile: the three identical casts of q/k/v's input are one (AOTAutograd's CSE).
    ao = cast_cost(lins, BACKENDS["torchao"], "tensorwise", True, 2.0)
    assert ao.bytes == pytest.approx((4 * x + 6 * w + 6 * dy) * 10)
    # TE's fused modules: the norm and the activation write the FP8 input of q/k/v and MLP-down themselves...
    fused = cast_cost(lins, BACKENDS["te-fused"], "delayed", False, 2.0)
    assert fused.bytes == pytest.approx((1 * x + 6 * w + 6 * dy) * 4)
    # ...which current scaling cannot do (the amax must be known before the cast): the inputs are cast again.
    fused_current = cast_cost(lins, BACKENDS["te-fused"], "current", False, 2.0)
    assert fused_current.bytes == pytest.approx((4 * x + 6 * w + 6 * dy) * 6)
    # fp32 master weights are read at 4 bytes.
    assert cast_cost([LinearOperands(0, w, 0)], BACKENDS["te"], "delayed", False, 4.0).bytes == pytest.approx(w * 6)


def test_fp8_gemms_need_longer_k_for_the_same_efficiency():
    # A tile's K loop runs twice the elements per step in FP8: the same prologue is worth 2 x K0 elements.
    c = FITTED
    for k in (128, 512, 4096):
        bf16 = float(gemm_efficiency(8192, 8192, k, 132, c))
        fp8 = float(gemm_efficiency(8192, 8192, k, 132, c, elem_bytes=1.0))
        assert fp8 / bf16 == pytest.approx((k + c.k_overhead) / (k + 2 * c.k_overhead))


def _layer_s(hidden: int, precision: str, backend: str = "te-fused", recipe: str = "delayed", compiled=True) -> float:
    shape = Shape(1, hidden, max(1, hidden // 128), max(1, hidden // 128), 256, 1024, 4 * hidden)
    ker = Kernels(fused=compiled, fp8=precision == "fp8", fp8_backend=backend, fp8_recipe=recipe, qkv_fused=False)
    lt = layer_times(shape, 1, 1, 8, ker, rates_for(make_cluster(get_preset("h100"), 1, precision), ker))
    return float(np.asarray(lt["fwd"] + lt["bwd"]))


@pytest.mark.parametrize("backend, recipe", [("te", "current"), ("torchao", "tensorwise")])
def test_fp8_pays_only_for_large_layers(backend, recipe):
    # The physics implies a crossover: casts scale with the activations (tokens x hidden), GEMM savings with
    # tokens x hidden^2, and every cast is a kernel of fixed cost. Tiny layers lose, large ones win.
    gain = {h: _layer_s(h, "bf16") / _layer_s(h, "fp8", backend, recipe) for h in (256, 1024, 8192)}
    assert gain[256] < 1.0 < gain[8192] and gain[256] < gain[1024] < gain[8192]
    assert gain[8192] < 2.0  # never the full 2x of the FP8 peak


def test_fused_modules_gain_more_and_grow_with_the_layer():
    # TE's fused modules cast inside the norm and the activation and run q/k/v as one GEMM: the least overhead.
    gains = [_layer_s(h, "bf16") / _layer_s(h, "fp8", "te-fused") for h in (1024, 4096, 8192)]
    assert gains == sorted(gains) and gains[-1] > _layer_s(8192, "bf16") / _layer_s(8192, "fp8", "te", "delayed")


def test_eager_casts_cost_more_than_fused_ones_and_current_more_than_delayed():
    assert _layer_s(4096, "fp8", "torchao", "tensorwise", compiled=False) > _layer_s(4096, "fp8", "torchao",
                                                                                      "tensorwise")
    assert _layer_s(4096, "fp8", "te", "current") > _layer_s(4096, "fp8", "te", "delayed")
    assert _layer_s(4096, "fp8", "te-fused") < _layer_s(4096, "fp8", "te")


def test_fsdp_gathers_fp8_weights_where_the_backend_offers_it():
    shape = Shape(8, 4096, 32, 32, 32000, 4096, 16384)
    cl = make_cluster(get_preset("h100"), 64, "fp8")
    deg = Degrees.of(d=64, b=1, m=1, zero=3)
    comm = {be: float(step_costs(shape, cl, deg, kernels=Kernels(fp8=True, fp8_backend=be)).dp_comm_s[()])
            for be in ("torchao", "te-fused")}
    assert BACKENDS["torchao"].fp8_all_gather and not BACKENDS["te-fused"].fp8_all_gather
    assert comm["torchao"] < comm["te-fused"]  # weight gathers at 1 byte instead of 2


def test_unknown_backend_is_one_line():
    with pytest.raises(ValueError, match="unknown FP8 backend 'nope'; valid: te, te-fused, torchao, native"):
        fp8_cost.backend("nope")


def test_rates_take_no_flat_fp8_overhead():
    # The FP8 GEMM runs at the FP8 MAMF-anchored rate itself; its costs are the casts, priced per element.
    cl = make_cluster(get_preset("h100"), 1, "fp8")
    r: Rates = rates_for(cl, Kernels(fp8=True))
    assert r.matmul == tensor_rate("h100", "fp8", 1402.6, FITTED) and r.consts == replace(FITTED)


def test_cached_fp8_weights_are_cast_once_per_step(monkeypatch):
    # TransformerEngine (te, te-fused) casts the weights on the first micro-batch and reuses them: one cast-transpose
    # pass per weight per step, reading 2 B (bf16) and writing both 1-byte layouts, one kernel per weight matrix
    # (te-fused: q, k, v as one, so qkv, o, up, down). torchao and the native layer cast them in every forward.
    sh = Shape(layers=2, hidden=1024, heads=8, kv_heads=8, vocab=1000, seq=512, ffn=4096)
    r = Rates(matmul=1e15, bf16_matmul=1e15, attention=1e15, hbm=1e12, sms=132, consts=FITTED)
    te = Kernels(fp8=True, fp8_backend="te-fused")
    want = sh.layer_matmul_params * (2.0 + 2 * 1.0) / 1e12 + 4 * FITTED.kernel_us * 1e-6
    assert float(fp8_weight_cast_time(sh, 1, te, r)) == pytest.approx(want)
    ao = Kernels(fp8=True, fp8_backend="torchao", fp8_recipe="tensorwise")
    assert float(fp8_weight_cast_time(sh, 1, ao, r)) == 0.0
    # The per-micro-batch casts of TE hold no weight any more: they are smaller by exactly the cached part.
    fwd, _ = fp8_cast_times(sh, 1, 1, 1, te, r)
    monkeypatch.setitem(fp8_cost.BACKENDS, "te-fused", replace(BACKENDS["te-fused"], caches_weights=False))
    fwd_uncached, _ = fp8_cast_times(sh, 1, 1, 1, te, r)
    assert float(fwd_uncached) - float(fwd) == pytest.approx(want)
    assert float(fp8_weight_cast_time(sh, 1, te, r)) == 0.0
    # In a step of m micro-batches the cached casts are paid once: compute(m) = m x per-micro-batch + optimizer +
    # L x the casts, so compute(2) - 2 compute(1) = -(optimizer + L x casts).
    monkeypatch.undo()
    cl = make_cluster(get_preset("h100"), 1, "fp8")
    one, two = (step_costs(sh, cl, Degrees.of(m=m), kernels=te) for m in (1, 2))
    w = layer_times(sh, 1, 1, 1, te, rates_for(cl, te))["fp8_weights_per_step"]
    assert float(w) > 0
    assert float(2 * one.compute_s - two.compute_s - one.optimizer_s) == pytest.approx(sh.layers * float(w))


def test_the_cost_records_are_the_priced_backends_of_the_shared_names():
    """Every backend whose GEMMs run in FP8 has a cost record under its common name, and nothing else does
    (the emulator's fp32 GEMMs are not priced); fp8-train's run-time registry keys on the same names."""
    from common.fp8_names import NAMES, PRICED
    assert tuple(BACKENDS) == PRICED and set(PRICED) < set(NAMES) and "emulated" not in BACKENDS
    assert all(name == b.name for name, b in BACKENDS.items())
