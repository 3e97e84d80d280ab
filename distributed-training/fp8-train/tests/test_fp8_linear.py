"""The lab's FP8 linear: forward and gradients within FP8 error of fp32; native == emulated."""

import math

import pytest
import torch
import torch.nn as nn

from precision.formats import E4M3, E5M2, quantize
from precision.fp8_linear import Fp8Linear, update_scales
from precision.scaling import DelayedScaling


def sqnr_db(ref: torch.Tensor, y: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio, 20 log10(||ref|| / ||ref - y||) (torchao's compute_error)."""
    return 20 * math.log10(ref.norm().item() / (ref - y).norm().item())


def make(engine: str, scaling_mode: str = "delayed", device: str = "cpu"):
    torch.manual_seed(0)
    ref = nn.Linear(64, 48, bias=True, device=device)
    fp8 = Fp8Linear(nn.Linear(64, 48, bias=True, device=device), engine, DelayedScaling(history_len=4),
                    scaling_mode)
    with torch.no_grad():
        fp8.weight.copy_(ref.weight)
        fp8.bias.copy_(ref.bias)
    return ref, fp8


def step(mod, x, dy):
    x = x.clone().requires_grad_(True)
    mod.zero_grad()
    y = mod(x)
    y.backward(dy)
    return y.detach(), x.grad, mod.weight.grad.clone(), mod.bias.grad.clone()


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 32, 64, generator=g) * 3  # (B, T, K): the module flattens leading dims
    dy = torch.randn(2, 32, 48, generator=g) * 1e-3  # gradients are small: E5M2 + its scale must cope
    return x, dy


@pytest.mark.parametrize("engine", ["native", "emulated"])
def test_forward_and_grads_within_fp8_error(engine, batch):
    x, dy = batch
    ref, fp8 = make(engine)
    step(fp8, x, dy)  # step 1 runs at scale 1 (delayed scaling's initial state) ...
    update_scales([fp8])  # ... and fills the history, so step 2 runs at fitted scales
    y_ref, dx_ref, dw_ref, db_ref = step(ref, x, dy)
    y, dx, dw, db = step(fp8, x, dy)
    update_scales([fp8])  # lands the backward's grad_output record (its scale used) beside the forward's
    # E4M3 rounds to <= 2^-4 relative (~2-3% rms), E5M2 to <= 2^-3: measured ~30 dB fwd, ~25 dB bwd.
    assert sqnr_db(y_ref, y) > 25, sqnr_db(y_ref, y)
    assert sqnr_db(dx_ref, dx) > 20 and sqnr_db(dw_ref, dw) > 20, (sqnr_db(dx_ref, dx), sqnr_db(dw_ref, dw))
    torch.testing.assert_close(db, db_ref)  # the bias stays high precision
    s_x, s_w = fp8.last[0, 1], fp8.last[1, 1]
    assert s_x.item() == pytest.approx(E4M3.max / x.abs().max().item(), rel=1e-6)
    # The exact FP8 arithmetic, in float64: dequantized operands multiplied and accumulated exactly.
    xq = quantize(x.reshape(-1, 64), s_x, E4M3).double() / s_x.double()
    wq = quantize(fp8.weight, s_w, E4M3).double() / s_w.double()
    exact = (xq @ wq.t()).reshape(2, 32, 48) + fp8.bias.double()
    # fp32 accumulation (order differs between oneDNN/cuBLAS and torch.mm): ~1e-6 of |y| ~ 1
    torch.testing.assert_close(y.double(), exact, rtol=1e-5, atol=1e-5)
    s_g = fp8.last[2, 1]
    gq = quantize(dy.reshape(-1, 48), s_g, E5M2).double() / s_g.double()
    for got, want in ((dw.double(), gq.t() @ xq), (dx.reshape(-1, 64).double(), gq @ wq)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


def test_native_matches_emulated(batch):
    x, dy = batch
    outs = []
    for engine in ("native", "emulated"):
        _, fp8 = make(engine, "current")
        outs.append(step(fp8, x, dy))
    for a, b in zip(*outs):  # same FP8 operands, fp32 accumulation in a different order
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * b.abs().max().item())


def test_current_scaling_and_nan(batch):
    x, dy = batch
    _, fp8 = make("emulated", "current")
    step(fp8, x, dy)
    update_scales([fp8])  # current scaling too: the backward's record lands here
    assert fp8.last[0, 1].item() == pytest.approx(E4M3.max / x.abs().max().item(), rel=1e-6)
    assert fp8.last[2, 1].item() == pytest.approx(E5M2.max / dy.abs().max().item(), rel=1e-6)
    x = x.clone()
    x[0, 0, 0] = float("nan")
    y = fp8(x)
    assert torch.isnan(y).any()  # a NaN input must reach the loss (NaN detection depends on it)


def test_native_gemm_operands_have_the_layouts_cublaslt_wants(batch, monkeypatch):
    """cuBLASLt's FP8 GEMM on Hopper takes `a` row-major and `b` column-major only: check every call."""
    from precision import fp8_linear
    seen = []
    real = fp8_linear.scaled_mm

    def spy(a8, b8, *args, **kw):
        seen.append((a8.shape, a8.stride(), b8.shape, b8.stride()))
        return real(a8, b8, *args, **kw)

    monkeypatch.setattr(fp8_linear, "scaled_mm", spy)
    x, dy = batch
    _, fp8 = make("native")
    step(fp8, x, dy)
    assert len(seen) == 3  # y = x W^T, dx = dy W, dW = dy^T x
    for a_shape, a_stride, b_shape, b_stride in seen:
        assert a_stride == (a_shape[1], 1), (a_shape, a_stride)  # row-major
        assert b_stride == (1, b_shape[0]), (b_shape, b_stride)  # column-major
    assert [(a[0], b[1]) for a, _, b, _ in seen] == [(64, 48), (64, 64), (48, 64)]  # (M,N), (M,K), (N,K)


def test_scale_update_is_one_batched_operation_for_any_number_of_layers():
    """All FP8 linears of a model share one state: the update dispatches as many ops for 6 layers as for 1."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from precision.fp8_linear import share_scaling_state

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    counts = []
    for n in (1, 6):
        model = nn.Sequential(*[Fp8Linear(nn.Linear(16, 16, bias=False), "emulated") for _ in range(n)])
        share_scaling_state(model)
        layers = [m for m in model if isinstance(m, Fp8Linear)]
        h = torch.randn(4, 16)
        for m in layers:
            h = m(h)
        h.sum().backward()  # every layer's backward stages a record to land
        with Count() as c:
            update_scales(layers)
        assert (layers[-1].last[2] > 0).all()  # landed: amax and scale of the last layer's grad_output
        counts.append(c.n)
        assert [m.slot for m in layers] == list(range(n))
        assert set(model.state_dict()) == {f"{i}.weight" for i in range(n)} | {"fp8_scaling.history",
                                                                                  "fp8_scaling.scale"}
    assert counts[0] == counts[1], counts


def test_shared_state_gives_the_same_training_as_separate_states(batch):
    from precision.fp8_linear import share_scaling_state
    x, dy = batch
    outs = []
    for shared in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(Fp8Linear(nn.Linear(64, 64), "emulated"), Fp8Linear(nn.Linear(64, 48), "emulated"))
        if shared:
            share_scaling_state(model)
        layers = list(model)[:2]
        for _ in range(3):
            model.zero_grad()
            for m in layers:
                x_in = x if m is layers[0] else out
                out = m(x_in)
            out.backward(dy)
            update_scales(layers)
        outs.append([t.clone() for m in layers for t in (m.scale_fwd, m.scale_bwd, m.amax_history_fwd, m.weight.grad)])
    for a, b in zip(*outs):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_native_on_gpu_matches_cpu_emulation(batch):
    """The GPU FP8 GEMM against the exact FP8 arithmetic on the CPU, within the tensor cores' accumulation error.

    H100 FP8 tensor cores accumulate in fewer bits than fp32 (about 14 in the forward's fast-accumulation
    mode), so the error scales with the result, not a fixed 1e-6: relative to each tensor's largest
    value, 3e-3 as PyTorch's own test_scaled_mm_vs_emulated allows, and an SQNR of at least 50 dB.
    """
    x, dy = batch
    _, gpu = make("native", "current", device="cuda")
    _, cpu = make("emulated", "current")
    with torch.no_grad():
        gpu.weight.copy_(cpu.weight)
        gpu.bias.copy_(cpu.bias)
    for name, a, b in zip(("y", "dx", "dW", "db"), step(gpu, x.cuda(), dy.cuda()), step(cpu, x, dy)):
        a = a.cpu()
        torch.testing.assert_close(a, b, rtol=0, atol=3e-3 * b.abs().max().item(), msg=name)
        assert sqnr_db(b, a) > 50, (name, sqnr_db(b, a))
