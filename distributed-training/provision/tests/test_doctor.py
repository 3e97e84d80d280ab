"""`make doctor`: what this machine has, said plainly, and a preset or driver it cannot use refused in one line."""

import pytest
import torch

from common.testing import fake_nvidia_smi, no_gpu_mark
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
    fake_nvidia_smi(tmp_path, None)  # a machine without a driver: as this CPU machine, said plainly
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert f"torch       {torch.__version__}, a CPU build" in out and "driver      none (nvidia-smi finds no driver)" \
        in out and err == ""
    fake_nvidia_smi(tmp_path, 550)
    assert main([]) == 1
    out, err = capsys.readouterr()
    assert "driver      550.54.15, runs CUDA <= 12.4; nvidia-smi lists 8 GPUs" in out
    (line,) = err.splitlines()
    assert line.startswith(f"doctor: error: torch {torch.__version__} (a CPU build) cannot use the 8 GPUs")
    assert line.endswith('-m pip install "torch==2.13.0+cu126" --index-url https://download.pytorch.org/whl/cu126')
