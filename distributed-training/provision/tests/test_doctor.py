"""`make doctor`: what this machine has, said plainly, and a preset or driver it cannot use refused in one line."""

import pytest
import torch

from common.hardware import get_preset
from testkit import fake_nvidia_smi, no_gpu_mark
from provision.doctor import main

NO_GPU = no_gpu_mark()


def test_doctor_reports_the_named_preset_and_refuses_unknown_ones(capsys):
    code = main(["--gpu", "h100"])
    out, err = capsys.readouterr()
    assert "GPU=h100 -> h100 (H100 SXM 80GB; peak bf16 989 TFLOP/s, fp8 1979 TFLOP/s)" in out
    if torch.cuda.is_available():
        assert code == 0
    else:  # a GPU preset on a machine without one: said plainly, and not success
        assert code == 2 and err.count("\n") == 1 and "torch sees no CUDA GPU here" in err
    with pytest.raises(SystemExit) as e:
        main(["--gpu", "v100"])
    assert e.value.code == 2 and "unknown GPU preset 'v100'" in capsys.readouterr().err


@NO_GPU
def test_doctor_says_the_right_thing_here_and_with_a_faked_mismatch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without a driver (no nvidia-smi at all), said plainly
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert f"torch       {torch.__version__}, a CPU build" in out and "driver      none (no nvidia-smi on PATH)" \
        in out and err == ""
    fake_nvidia_smi(tmp_path, 550)
    assert main([]) == 1
    out, err = capsys.readouterr()
    assert "driver      550.54.15, runs CUDA <= 12.4; nvidia-smi lists 8 GPUs" in out
    (line,) = err.splitlines()
    assert line.startswith(f"doctor: error: torch {torch.__version__} (a CPU build) cannot use the 8 GPUs")
    assert line.endswith('-m pip install "torch==2.13.0+cu126" --index-url https://download.pytorch.org/whl/cu126')


@NO_GPU
@pytest.mark.parametrize("behaviour, problem", [
    ("hang", "`nvidia-smi` did not answer within 1 s: the NVIDIA driver or a GPU hangs (a GPU in a bad state does "
             "this; ask for the GPU to be reset or the node rebooted)"),
    (None, "`nvidia-smi` failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA"),
])
def test_doctor_and_gpu_auto_name_a_hanging_or_failing_driver(behaviour, problem, tmp_path, monkeypatch, capsys):
    """nvidia-smi that never answers or fails (a GPU in a bad state): doctor and GPU=auto name it, within the
    limit, and never read it as a machine without GPUs (exit 0, the CPU preset)."""
    fake_nvidia_smi(tmp_path, behaviour)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("DT_SMI_TIMEOUT_S", "1")
    assert main([]) == 1
    out, err = capsys.readouterr()
    assert "driver      not answering: `nvidia-smi`" in out
    (line,) = err.splitlines()
    assert line.startswith(f"doctor: error: the NVIDIA driver does not answer: {problem}"), line
    with pytest.raises(ValueError, match=r"^GPU=auto: the NVIDIA driver does not answer: `nvidia-smi`"):
        get_preset("auto")  # never quietly the CPU preset on a node whose GPUs hang or fail
