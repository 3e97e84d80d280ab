"""The preset table and the NVML guard."""

import pytest
import torch

from common.hardware import PRESETS, NVMLUnavailable, detect_preset, fmt, get_preset, nvml, parse_run_tag


def test_presets_carry_the_reference_figures():
    # parallelism-formulas.md section 6: dense peaks and per-direction NVLink.
    h100 = get_preset("h100")
    assert (h100.bf16_tflops, h100.fp8_tflops, h100.nvlink_gbps, h100.memory_gb) == (989.4, 1978.9, 450.0, 80.0)
    assert get_preset("a100-80gb") is get_preset("a100") and not get_preset("a100").supports_fp8
    assert get_preset("B200").supports_fp4 and not h100.supports_fp4
    assert get_preset("gb200").nvlink_domain == 72
    # what the systems expose per GPU: DGX B200 1,440 GB / 8; GB200 NVL72 13.4 TB / 72 (not the 192 GB of HBM stacks)
    assert (get_preset("b200").memory_gb, get_preset("gb200").memory_gb) == (180.0, 186.0)
    assert get_preset("cpu").peak_tflops("bf16") is None
    assert set(PRESETS) >= {"cpu", "a100-40gb", "a100", "h100", "h200", "b200"}


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown GPU preset 'v100'; valid: auto, cpu, .*h100"):
        get_preset("v100")


def test_auto_detection_and_unknowns():
    if not torch.cuda.is_available():
        assert detect_preset().name == "cpu" and get_preset("auto").name == "cpu"
    assert fmt(None) == "unknown" and fmt(989.4, ".0f", " TFLOP/s") == "989 TFLOP/s"


def test_detect_never_borrows_a_sxm_row(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name, expect in [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-40GB",
                         "a100-40gb"), ("NVIDIA B200", "b200"), ("NVIDIA H100 PCIe", None), ("NVIDIA H100 NVL", None),
                         ("NVIDIA GH200 480GB", None), ("Tesla V100-SXM2-32GB", None)]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0, n=name: n)
        preset = detect_preset()
        if expect:
            assert preset.name == expect, name
        else:
            assert preset.name.startswith("unknown:") and preset.bf16_tflops is None, name


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_nvml_without_a_gpu_is_a_clear_error():
    with pytest.raises(NVMLUnavailable, match="no NVML on this machine"):
        with nvml():
            pass


def test_achievable_matmul_rates_are_measured_or_unknown():
    # ml-engineering MAMF table (mamf-finder.py): measured, so always below the dense peak.
    h100, b200 = get_preset("h100"), get_preset("b200")
    assert (h100.achievable_matmul_tflops("bf16"), h100.achievable_matmul_tflops("fp8")) == (794.5, 1402.6)
    assert h100.achievable_matmul_tflops("fp16") == 794.5 and b200.achievable_matmul_tflops("bf16") == 1745.0
    assert get_preset("a100").achievable_matmul_tflops("fp8") is None  # no FP8 tensor cores: no guess
    assert get_preset("cpu").achievable_matmul_tflops("bf16") is None
    for p in PRESETS.values():
        for prec in ("bf16", "fp8"):
            mamf, peak = p.achievable_matmul_tflops(prec), p.peak_tflops(prec)
            assert mamf is None or (peak is not None and 0.5 * peak < mamf < peak), (p.name, prec)


def test_preset_tag_names_result_files():
    assert get_preset("h100").tag == "h100" and get_preset("a100-40gb").tag == "a100-40gb"
    assert PRESETS["cpu"].tag == "cpu"
    assert PRESETS["cpu"].run_tag(4) == "cpu_ws4" and get_preset("h100").run_tag(16, 2) == "h100_ws16_n2"


def test_device_kind_is_the_one_cuda_check(monkeypatch):
    from common.hardware import device_kind

    assert device_kind(get_preset("cpu")) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="--gpu h100 needs a CUDA GPU and torch sees none; use --gpu cpu"):
        device_kind(get_preset("h100"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device_kind(get_preset("a100-80gb")) == "cuda"


@pytest.mark.parametrize("text, tag", [
    ("scaling_h100_ws8", ("h100", 8, 1)), ("sweep_cpu_ws4_n2", ("cpu", 4, 2)), ("h100_ws16_n2-te", ("h100", 16, 2)),
    ("cpu_ws1-demo", ("cpu", 1, 1)), ("bench_a100-40gb_ws1", ("a100-40gb", 1, 1)), ("scaling_cpu", None),
    ("h100", None), ("h100_ws1x", None),
])
def test_a_run_tag_reads_back(text, tag):
    """<preset>_ws<N>[_n<nodes>] (run_tag) parsed from a file stem or folder name: what reports group by."""
    assert parse_run_tag(text) == tag
    if tag:
        assert get_preset(tag[0]).run_tag(tag[1], tag[2]) in text
