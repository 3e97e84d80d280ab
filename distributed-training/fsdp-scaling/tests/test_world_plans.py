"""The pre-launch check over world sizes 1..16 and 2 nodes: each case plans or is refused in one line, exit 2,
before any rank builds a model (testkit.check_pass runs the launcher's check pass)."""

from dataclasses import replace
from pathlib import Path

import pytest

import bench
from testkit import WORLDS, check_pass

LAB = Path(bench.__file__).resolve().parent


@pytest.mark.parametrize("argv, batch, accum", [
    ([], 16, 2),  # the preset: strong scaling splits 16 sequences, in 2 micro-batches, over the ranks
    (["--global-batch", "48", "--grad-accum", "1"], 48, 1),
    (["--modes", "weak"], None, None),  # weak scaling: a fixed batch per rank, any world
], ids=["preset", "batch-48", "weak"])
@pytest.mark.parametrize("world, nnodes", WORLDS, ids=[f"{w}x{n}" for w, n in WORLDS])
def test_every_world_plans_or_is_refused_in_one_line(argv, batch, accum, world, nnodes, monkeypatch, capsys):
    argv = ["--gpu", "cpu", "--worlds", str(world), *argv]
    line = check_pass(bench.main, argv, world, nnodes, monkeypatch, capsys, watch=[LAB / "results", LAB / "runs"])
    if batch is None or batch % (accum * world) == 0:
        assert line is None
    else:
        where = f"{world} ranks" + (f" ({nnodes} nodes x {world // nnodes})" if nnodes > 1 else "")
        assert f"--global-batch {batch} (sequences per step" in line and f"does not split evenly over {where}" in line


@pytest.mark.parametrize("world, nnodes, shard, needle", [
    (16, 2, 0, None),  # HSDP's automatic shard group: the 8 ranks of a node
    (6, 1, 4, "hsdp needs the world size (6) to be a multiple of its shard group (--hsdp-shard 4)"),
    (16, 2, 16, None),
])
def test_hsdp_shard_groups_across_nodes(world, nnodes, shard, needle, monkeypatch, capsys):
    argv = ["--gpu", "cpu", "--strategies", "hsdp", "--modes", "weak", "--hsdp-shard", str(shard)]
    line = check_pass(bench.main, argv, world, nnodes, monkeypatch, capsys)
    assert line is None if needle is None else needle in line


@pytest.mark.parametrize("worlds, nnodes", [((1, 2, 4, 8), 1), ((1,), 1), ((16,), 2)])
def test_a_sweep_is_named_by_its_largest_world_and_nodes(worlds, nnodes):
    """8 GPUs never replace the 1-GPU result set: the files and run folder carry world size and nodes."""
    from common.hardware import get_preset
    cfg = replace(bench.preset("cpu"), worlds=worlds)
    tag = bench.sweep_tag(cfg, get_preset("h100"), 1, nnodes)
    assert tag == f"h100_ws{max(worlds)}" + (f"_n{nnodes}" if nnodes > 1 else "")
    assert bench.run_plan(cfg, get_preset("h100"), 1, nnodes).folder.name == f"scaling_{tag}"
