"""The TransformerEngine backend against TE itself (GPU with TE installed only; skipped elsewhere).

    - the amax and scale that fp8.csv records for a te.Linear are TE's own: each amax is the true max
      |x| of the tensor TE cast, and each recorded scale is what TE's DelayedScaling rule gives from
      the amaxes recorded before it (scaling.py reimplements that rule; here it must agree with TE);
    - TE's FP8 linear and the lab's native one agree on the same inputs to FP8 accumulation error;
    - a NaN step under --on-nan skip leaves TE's amax histories finite (scrubbed), so the scales move on;
    - te-fused (LayerNormLinear QKV, Linear, LayerNormMLP) computes the GPT's function with FP8 error only,
      and the state read per GEMM is TE's: each weight amax is the true max |W| of that GEMM's weight
      (the concatenated q/k/v for the fused QKV, fc1 and fc2 inside the LayerNormMLP), the output
      projection's input amax the true one.
"""

import math

import pytest
import torch
import torch.nn as nn

from precision import scaling, te_adapter
from precision.formats import E4M3, E5M2

pytestmark = pytest.mark.gpu
te = pytest.importorskip("transformer_engine.pytorch")
if not torch.cuda.is_available():
    pytest.skip("TransformerEngine needs a CUDA GPU", allow_module_level=True)


def _te_linear(k=64, n=64):
    torch.manual_seed(0)
    return te.Linear(k, n, bias=False, params_dtype=torch.float32, device="cuda")


def test_recorded_scales_and_amaxes_are_tes_own():
    lin = _te_linear()
    history = 4
    recipe = te_adapter.recipe("fp8", "delayed", 0, history, "max")
    rows, truth = [], []
    for step, scale_x in enumerate([3.0, 6.0, 1.5, 0.5, 2.0]):
        x = (torch.randn(32, 64, device="cuda") * scale_x).requires_grad_(True)
        dy = torch.randn(32, 64, device="cuda") * 1e-3 * (step + 1)
        te_adapter.snapshot_scales(lin)
        with te.autocast(enabled=True, recipe=recipe):
            y = lin(x)
        y.backward(dy)
        rows.append({role: (a.item(), s.item()) for _, role, a, s in te_adapter.delayed_state(lin)})
        truth.append({"input": x.abs().max().item(), "weight": lin.weight.abs().max().item(),
                      "grad_output": dy.abs().max().item()})
    for step, (row, want) in enumerate(zip(rows, truth)):
        for role in ("input", "weight", "grad_output"):
            assert row[role][0] == pytest.approx(want[role], rel=1e-6), (step, role)  # TE's amax is the true one
    fmax = {"input": E4M3.max, "weight": E4M3.max, "grad_output": E5M2.max}
    for role in fmax:
        assert rows[0][role][1] == 1.0  # TE starts at scale 1
        for t in range(1, len(rows)):  # the scale used at step t, from the amaxes of steps < t (window 4)
            window = [rows[i][role][0] for i in range(max(0, t - history), t)]
            expected = scaling.scale_from_amax(torch.tensor(max(window)), fmax[role], 0, torch.tensor(1.0)).item()
            assert rows[t][role][1] == pytest.approx(expected, rel=1e-6), (t, role)


def test_te_linear_matches_the_native_layer_on_the_same_inputs():
    """Current scaling on both sides: the same per-tensor scales, the same FP8 operands."""
    from precision.fp8_linear import Fp8Linear
    lin = _te_linear(256, 128)
    ref = nn.Linear(256, 128, bias=False, device="cuda")
    with torch.no_grad():
        ref.weight.copy_(lin.weight)
    native = Fp8Linear(ref, "native", scaling_mode="current")
    x = torch.randn(512, 256, device="cuda") * 2
    with te.autocast(enabled=True, recipe=te_adapter.recipe("fp8", "current", 0, 16, "max")):
        y_te = lin(x)
    y_native = native(x)
    exact = x @ lin.weight.t()
    err = (y_te.float() - y_native.float()).abs().max().item() / exact.abs().max().item()
    assert err < 3e-3, err  # FP8 accumulation differences only
    sqnr = 20 * math.log10(exact.norm().item() / (y_te.float() - exact).norm().item())
    assert sqnr > 25, sqnr  # and both are FP8-accurate


def test_nan_step_under_skip_keeps_te_histories_finite(tmp_path):
    import train
    out = tmp_path / "out"
    assert train.main(["--gpu", "h100", "--runs", "fp8:te", "--steps", "6", "--d-model", "256", "--n-layers", "2",
                       "--n-heads", "2", "--seq-len", "128", "--batch", "4", "--inject", "nan@2", "--on-nan", "skip",
                       "--ckpt-every", "0", "--val-every", "0", "--stats-every", "1", "--no-progress", "--no-compile",
                       "--results", str(out)]) == 0
    import pandas as pd
    steps = pd.read_csv(out / "steps.csv")
    assert steps["nonfinite"].astype(str).str.lower().eq("true").sum() == 1
    fp8 = pd.read_csv(out / "fp8.csv")
    later = fp8[fp8["step"] > 2]
    assert len(later) and later["scale"].map(math.isfinite).all() and later["amax"].map(math.isfinite).all()


def _gpt_pair(d=256, layers=2):
    """The same GPT twice on the GPU: BF16 autocast, and rebuilt from TE's fused modules (delayed scaling)."""
    from common.model import GPTConfig
    from precision.modes import PrecisionSettings, RunSpec
    from precision.prepare import prepare
    cfg = GPTConfig(vocab_size=256, seq_len=128, d_model=d, n_layers=layers, n_heads=d // 64)
    dev = torch.device("cuda")
    ref = prepare(RunSpec("bf16", "torch", 0), cfg, PrecisionSettings(), dev)
    fused = prepare(RunSpec("fp8", "te-fused", 0), cfg, PrecisionSettings(), dev)
    return cfg, ref, fused


def test_te_fused_runs_the_gpt_and_its_state_is_read_per_gemm():
    cfg, ref, fused = _gpt_pair()
    assert fused.backend.name == "te-fused" and fused.low_modules[:3] == ["layers.0.attn.wqkv", "layers.0.attn.wo",
                                                                      "layers.0.mlp"]
    idx = torch.randint(0, 256, (4, 128), device="cuda")
    seen = {}
    fused.raw.layers[0].attn.wo.register_forward_pre_hook(lambda m, a: seen.__setitem__("wo", a[0].abs().max()))
    te_adapter.snapshot_scales(fused.raw)
    with fused.context():
        logits = fused.model(idx)
    logits.float().square().mean().backward()
    with ref.context():
        want = ref.model(idx)
    err = (logits.float() - want.float()).norm() / want.float().norm()
    assert err < 0.05, err  # FP8 GEMMs, the same function
    got = {(r.module, r.role): r.amax.item() for r in te_adapter.delayed_state(fused.raw)}
    b0, r0 = fused.raw.layers[0], ref.raw.layers[0]
    qkv = torch.cat([r0.attn.wq.weight, r0.attn.wk.weight, r0.attn.wv.weight])
    assert got[("layers.0.attn.wqkv", "weight")] == pytest.approx(qkv.abs().max().item(), rel=1e-6)
    assert got[("layers.0.mlp.w1", "weight")] == pytest.approx(b0.mlp.fc1_weight.abs().max().item(), rel=1e-6)
    assert got[("layers.0.mlp.w2", "weight")] == pytest.approx(b0.mlp.fc2_weight.abs().max().item(), rel=1e-6)
    assert got[("layers.0.attn.wo", "input")] == pytest.approx(seen["wo"].item(), rel=1e-3)
    assert all(v > 0 and math.isfinite(v) for v in got.values())  # every GEMM's grad_output was cast too
