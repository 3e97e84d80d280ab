"""FP8 / MX / NVFP4 numerics against exact values (OCP FP8 and MX specs; fp8-anchors.md section 4)."""

import pytest
import torch

from precision import mx
from precision.formats import E4M3, E5M2, amax, current_scale, fp8_fractions, quantize, widen

ONE = torch.tensor(1.0)


def q(values, fmt, scale=ONE):
    return quantize(torch.tensor(values, dtype=torch.float32), scale, fmt).float().tolist()


def test_format_limits():
    assert (E4M3.max, E4M3.min_normal, E4M3.min_subnormal) == (448.0, 2.0 ** -6, 2.0 ** -9)
    assert (E5M2.max, E5M2.min_normal, E5M2.min_subnormal) == (57344.0, 2.0 ** -14, 2.0 ** -16)


def test_round_to_nearest_even():
    # E4M3 has 3 mantissa bits: spacing 1/8 in [1, 2). Ties go to the even mantissa.
    assert q([1.0625, 1.1875, 1.3125, 1.0624], E4M3) == [1.0, 1.25, 1.25, 1.0]
    # E5M2: spacing 1/4 in [1, 2)
    assert q([1.125, 1.375, 1.126], E5M2) == [1.0, 1.5, 1.25]
    assert q([-1.0625, -1.1875], E4M3) == [-1.0, -1.25]


def test_saturation_clamps_before_casting():
    # Beyond max (even Inf) saturates to +-max: no NaN (old torch) and no Inf (E5M2 casts overflow to Inf).
    assert q([449.0, 464.0, 1e6, float("inf"), -1e9], E4M3) == [448.0, 448.0, 448.0, 448.0, -448.0]
    assert q([61440.0, 1e9, float("-inf")], E5M2) == [57344.0, 57344.0, -57344.0]
    assert q([2.0], E4M3, torch.tensor(1000.0)) == [448.0]  # 2000 after scaling
    nan = q([float("nan")], E4M3)[0]
    assert nan != nan  # NaN stays NaN: detection downstream must see it


def test_subnormals():
    s = 2.0 ** -9  # smallest E4M3 subnormal
    assert q([s, 3 * s, 7 * s, 2.0 ** -10, 1.01 * 2.0 ** -10, 2.0 ** -11], E4M3) == [s, 3 * s, 7 * s, 0.0, s, 0.0]
    s5 = 2.0 ** -16
    assert q([s5, 2.0 ** -17, 1.5 * s5, 2.0 ** -14], E5M2) == [s5, 0.0, 2 * s5, 2.0 ** -14]


def test_fractions_count_underflow_and_saturation():
    x = torch.tensor([1.0, 2.0 ** -12, 0.0, 500.0, -600.0, 3.0, 2.0 ** -11, 10.0])
    frac = fp8_fractions(x, quantize(x, ONE, E4M3), ONE, E4M3).tolist()
    assert frac == [2 / 8, 2 / 8]  # 2^-12, 2^-11 flushed (0 itself is not an underflow); 500, -600 clipped


def test_widen_is_exact_on_every_code():
    codes = torch.arange(256, dtype=torch.uint8)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        f8 = codes.view(dtype)
        t, m = widen(f8)
        ref = f8.float()
        finite = torch.isfinite(ref)
        assert torch.equal(t[finite] * m, ref[finite])
    t, m = widen(codes.view(torch.float8_e5m2))
    assert torch.equal(torch.isnan(t), torch.isnan(codes.view(torch.float8_e5m2).float()))


def test_amax_and_current_scale():
    assert amax(torch.tensor([1.0, -3.0, 2.0])).item() == 3.0
    assert torch.isnan(amax(torch.tensor([1.0, float("nan")])))
    s = current_scale(torch.tensor([4.0, 0.0, float("inf"), float("nan")]), E4M3, margin=1)
    assert s.tolist()[0] == 448.0 / 4 / 2 and s.tolist()[1:] == [1.0, 1.0, 1.0]


def test_e2m1_rounding_and_block_formats():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -100.0, 0.3])
    assert mx.round_e2m1(x).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -6.0, 0.5]
    torch.manual_seed(0)
    x = torch.randn(64, 128)
    for fmt, bound in (("mxfp8", 0.04), ("mxfp4", 0.13), ("nvfp4", 0.11)):  # measured 2.7%, 11.5%, 9.5%
        for dim in (-1, 0):
            err = (mx.quantize_dequantize(x, fmt, dim) - x).norm() / x.norm()
            assert err < bound, (fmt, dim, err)
    spiked = x.clone()
    spiked[3, 5] = 1000.0  # an outlier coarsens only its own block (block scales are local)
    for fmt in ("mxfp8", "mxfp4"):
        a, b = mx.quantize_dequantize(x, fmt, -1), mx.quantize_dequantize(spiked, fmt, -1)
        assert torch.equal(a[torch.arange(64) != 3], b[torch.arange(64) != 3])
        assert torch.equal(a[3, 32:], b[3, 32:]) and not torch.equal(a[3, :32], b[3, :32])


def test_block_formats_by_hand():
    def one_block(values, fmt):
        x = torch.zeros(1, mx.BLOCK_FORMATS[fmt])
        x[0, :len(values)] = torch.tensor(values)
        return mx.quantize_dequantize(x, fmt, -1)[0, :len(values)].tolist()

    # MXFP8: amax 3 -> scale 2^ceil(log2(3/448)) = 2^-7; 1.1 * 128 = 140.8 -> E4M3 spacing 16 -> 144 -> 1.125
    assert one_block([3.0, 1.1, -0.01], "mxfp8") == [3.0, 1.125, -0.009765625]
    # MXFP4: amax 5.9 -> scale 2^ceil(log2(5.9/6)) = 2^(floor(log2 5.9) - 2) = 1 (both rules); elements round to E2M1
    assert one_block([5.9, 2.6, -1.1, 0.3], "mxfp4") == [6.0, 3.0, -1.0, 0.5]
    # NVFP4: global scale amax/(448*6); block 1 amax 6 -> E4M3 block scale 448 -> decode scale 1;
    # block 2 amax 1.5 -> block scale 112 -> decode scale 0.25, so 0.7 -> 2.8 -> 3 -> 0.75
    x = torch.zeros(1, 32)
    x[0, :4] = torch.tensor([6.0, 3.0, 1.0, 0.5])
    x[0, 16:18] = torch.tensor([1.5, 0.7])
    y = mx.quantize_dequantize(x, "nvfp4", -1)[0]
    assert y[:4].tolist() == [6.0, 3.0, 1.0, 0.5] and y[16:18].tolist() == [1.5, 0.75]


@pytest.mark.parametrize("rule, e4m3, e2m1", [
    # amax:        448  1.9    3.0    255 (E4M3, max 448 = 1.75 * 2^8)  |  7.0  5.9  0.5 (E2M1, max 6 = 1.5 * 2^2)
    # te:  2^ceil(log2(amax / max)), TransformerEngine's float_to_e8m0(amax / max) rounding the exponent up
    ("te", [1.0, 2.0 ** -7, 2.0 ** -7, 1.0], [2.0, 1.0, 2.0 ** -3]),
    # ocp: 2^(floor(log2 amax) - emax), emax 8 (E4M3) and 2 (E2M1): 1.9 -> 2^(0 - 8), 255 -> 2^(7 - 8), 7 -> 2^0
    ("ocp", [1.0, 2.0 ** -8, 2.0 ** -7, 2.0 ** -1], [1.0, 1.0, 2.0 ** -3]),
])
def test_mx_scale_rules_by_hand(rule, e4m3, e2m1):
    assert mx.e8m0_scale(torch.tensor([448.0, 1.9, 3.0, 255.0]), 448.0, rule).tolist() == e4m3
    assert mx.e8m0_scale(torch.tensor([7.0, 5.9, 0.5]), 6.0, rule).tolist() == e2m1


def test_mx_rules_differ_where_the_amax_mantissa_exceeds_the_element_max():
    def one_block(values, fmt, rule):
        x = torch.zeros(1, 32)
        x[0, :len(values)] = torch.tensor(values)
        return mx.quantize_dequantize(x, fmt, -1, rule)[0, :len(values)].tolist()

    # MXFP8, amax 1.9 (mantissa 1.9 > 1.75): te scale 2^-7: 243.2 -> 240 (E4M3 spacing 16) -> 1.875, -38.4 -> -40;
    # ocp scale 2^-8: 486.4 saturates to 448 -> 1.75, -76.8 -> -80 (spacing 8) -> -0.3125
    assert one_block([1.9, 1.0, -0.3], "mxfp8", "te") == [1.875, 1.0, -0.3125]
    assert one_block([1.9, 1.0, -0.3], "mxfp8", "ocp") == [1.75, 1.0, -0.3125]
    # MXFP4, amax 7: te scale 2 keeps the outlier (3.5 -> 4 -> 8) and loses 0.3 (0.15 -> 0); ocp scale 1
    # saturates it (7 -> 6) and keeps 0.3 -> 0.5: one binade of range against the top value's error
    assert one_block([7.0, 2.6, -1.1, 0.3], "mxfp4", "te") == [8.0, 3.0, -1.0, 0.0]
    assert one_block([7.0, 2.6, -1.1, 0.3], "mxfp4", "ocp") == [6.0, 3.0, -1.0, 0.5]
    with pytest.raises(ValueError, match="te, ocp"):
        mx.e8m0_scale(torch.tensor([1.0]), 448.0, "ceil")
    lin = torch.nn.Linear(32, 4, bias=False)
    x = torch.full((2, 32), 0.01)
    x[:, 0] = 1.9
    y = {rule: mx.BlockScaledLinear(lin, "mxfp8", rule=rule)(x) for rule in mx.MX_SCALE_RULES}
    assert not torch.equal(y["te"], y["ocp"])  # the layer follows its rule
