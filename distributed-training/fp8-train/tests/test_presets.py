"""Presets are functions that return a complete Config; the command line overrides one preset's fields, with
the runs rules kept: no --runs trains the preset's runs, --fp8-backend X alone its high-precision runs + fp8:X."""

import dataclasses

import pytest

from common.hardware import PRESETS as HARDWARE
from training import runner, settings


def test_every_hardware_preset_has_a_complete_config():
    assert set(settings.PRESETS) <= set(HARDWARE)
    for name in HARDWARE:
        cfg = settings.preset(name)
        assert cfg.runs and cfg.steps > 0 and cfg.lr > 0  # validated on construction: no "from preset" left
        assert cfg.gpu == name or name not in settings.PRESETS
    assert settings.preset("h100-gt") == settings.h100()  # no row of its own: the h100 set
    assert settings.h200() == dataclasses.replace(settings.h100(), gpu="h200")
    assert settings.b200().runs == settings.h100().runs + ("mxfp8:te", "nvfp4:te")


def test_flags_override_the_preset_that_gpu_names(capsys):
    cfg, hardware, named = settings.parse(["--gpu", "cpu", "--steps", "50"])
    assert hardware.name == "cpu" and not named
    assert cfg == dataclasses.replace(settings.cpu(), steps=50)
    with pytest.raises(SystemExit):
        settings.parse(["--gpu", "h100", "--help"])
    assert "hidden size (default: 4096)" in capsys.readouterr().out


def test_fp8_backend_alone_keeps_the_high_precision_runs():
    cfg, _, named = settings.parse(["--gpu", "h100", "--fp8-backend", "native"])
    assert named and cfg.runs == ("bf16", "fp8:native")
    cfg, _, named = settings.parse(["--gpu", "a100", "--fp8-backend", "emulated", "--runs", "fp32"])
    assert named and cfg.runs == ("fp32",)
    assert settings.parse(["--gpu", "cpu", "--runs", "bf16"]).named_runs


@pytest.mark.parametrize("argv, flags", [
    (["--gpu", "cpu", "--threads", "1", "--results", "x", "--ckpt-every", "5", "--no-progress"], []),  # operational
    (["--gpu", "cpu", "--steps", "200"], []),  # the preset's own value: the preset's run
    (["--gpu", "cpu", "--steps", "50"], ["--steps"]),
    (["--gpu", "cpu", "--fp8-backend", "native"], ["--runs", "--fp8-backend"]),
    (["--gpu", "cpu", "--no-monitor"], ["--monitor"]),
])
def test_experiment_or_preset(argv, flags):
    cfg, hardware, _ = settings.parse(argv)
    assert runner.changed(cfg, hardware) == flags
