"""Before the ranks build anything: the pre-launch check over world sizes, the device each rank selects first,
and the results' names by world size.

The check over world sizes 1..16 and 2 nodes: each case plans or is refused in one line, exit 2, with
nothing written (testkit.check_pass runs the launcher's check pass): the batch must split over
the ranks, e.g. the h100 preset's 8 sequences on 2 nodes x 8 GPUs (16 ranks) do not.

Device before CUDA: the backend probes (backends.status: a capability query and a probe tensor for
torch._scaled_mm) used to run on a bare `cuda`, GPU 0, before set_device: on an 8-GPU node, 8 CUDA
contexts on GPU 0. Here CUDA is faked on the CPU: every call that would touch a GPU is recorded with the
device it would touch, and the h100 preset's check runs on a machine without one."""

from pathlib import Path

import pytest
import torch

import train
from common.hardware import get_preset
from testkit import WORLDS, check_pass
from training import runner

LAB = Path(train.__file__).resolve().parent


def _fake_cuda(monkeypatch) -> list[tuple[str, int]]:
    calls: list[tuple[str, int]] = []
    current = [0]  # CUDA's current device: 0 until set_device

    def index(device=None) -> int:
        device = torch.device(device) if isinstance(device, (str, int)) and device != "cuda" else device
        return device.index if isinstance(device, torch.device) and device.index is not None else current[0]

    def set_device(device):
        current[0] = torch.device(device).index if not isinstance(device, int) else device
        calls.append(("set_device", current[0]))

    def record(name, result):
        def fn(device=None):
            calls.append((name, index(device)))
            return result
        return fn

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    monkeypatch.setattr(torch.cuda, "get_device_capability", record("get_device_capability", (9, 0)))
    monkeypatch.setattr(torch.cuda, "get_device_name", record("get_device_name", "NVIDIA H100 80GB HBM3"))
    monkeypatch.setattr(torch.cuda, "get_device_properties", record("get_device_properties", None))
    # a tensor on a CUDA device initialises CUDA through torch.cuda._lazy_init (it then fails on a CPU build,
    # which the probe reports as "does not run here")
    monkeypatch.setattr(torch.cuda, "_lazy_init", record("tensor on cuda", None))
    return calls


@pytest.mark.parametrize("local_rank", [0, 3, 7])
def test_each_rank_selects_its_gpu_before_any_cuda_call(local_rank, monkeypatch):
    calls = _fake_cuda(monkeypatch)
    for k, v in {"RANK": local_rank, "LOCAL_RANK": local_rank, "WORLD_SIZE": 8, "LOCAL_WORLD_SIZE": 8,
                 "DT_CHECK_ARGS": 1}.items():  # a torchrun rank; DT_CHECK_ARGS stops it at its process group
        monkeypatch.setenv(k, str(v))
    with pytest.raises(SystemExit) as e:
        train.main(["--gpu", "h100", "--data-size", "256K"])
    assert e.value.code == 0
    assert calls and calls[0] == ("set_device", local_rank), calls
    probes = [c for c in calls if c[0] != "set_device"]
    assert probes and {dev for _, dev in probes} == {local_rank}, calls  # every probe on this rank's GPU


@pytest.mark.parametrize("preset", ["cpu", "h100"])
@pytest.mark.parametrize("world, nnodes", WORLDS, ids=[f"{w}x{n}" for w, n in WORLDS])
def test_every_world_plans_or_is_refused_in_one_line(preset, world, nnodes, monkeypatch, capsys):
    if preset != "cpu":
        _fake_cuda(monkeypatch)
    line = check_pass(train.main, ["--gpu", preset, "--data-size", "256K"], world, nnodes, monkeypatch, capsys,
                      watch=[LAB / "results", LAB / "runs"])
    if 8 % world == 0:  # both presets: 8 sequences per step, one micro-batch
        assert line is None
    else:
        where = f"{world} ranks" + (f" ({nnodes} nodes x {world // nnodes})" if nnodes > 1 else "")
        assert f"--batch 8 (sequences per step, in one micro-batch) does not split evenly over {where}" in line


@pytest.mark.parametrize("world, nnodes, name", [(1, 1, "h100_ws1"), (8, 1, "h100_ws8"), (16, 2, "h100_ws16_n2")])
def test_results_are_named_by_world_size_and_nodes(world, nnodes, name, monkeypatch):
    """An 8-GPU run never replaces the committed 1-GPU results/h100_ws1/."""
    monkeypatch.setenv("DT_PLANNED_WORLD", str(world))
    monkeypatch.setenv("DT_PLANNED_LOCAL", str(world // nnodes))
    assert runner.results_dir(runner.preset("h100"), get_preset("h100")) == LAB / "results" / name
