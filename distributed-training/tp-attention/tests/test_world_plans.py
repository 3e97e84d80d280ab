"""The pre-launch check over world sizes 1..16 and 2 nodes: each case plans or is refused in one line, exit 2,
before any rank builds a block (testkit.check_pass runs the launcher's check pass)."""

from pathlib import Path

import pytest

import bench
from testkit import WORLDS, check_pass

LAB = Path(bench.__file__).resolve().parent
CPU_HEADS = (4, 8, 12)  # the CPU preset: d_model 128, 256, 384 with head_dim 32


@pytest.mark.parametrize("world, nnodes", WORLDS, ids=[f"{w}x{n}" for w, n in WORLDS])
def test_every_world_plans_or_is_refused_in_one_line(world, nnodes, monkeypatch, capsys):
    """Degrees t = 1, 2, 4, 8, 16 that divide the ranks; each must split every shape's heads."""
    line = check_pass(bench.main, ["--gpu", "cpu"], world, nnodes, monkeypatch, capsys,
                      watch=[LAB / "results", LAB / "runs"])
    degrees = [t for t in (1, 2, 4, 8, 16) if world % t == 0]
    bad = next((t for t in degrees if any(h % t for h in CPU_HEADS)), None)
    if bad is None:
        assert line is None
    else:
        assert f"n_heads ({min(CPU_HEADS)}) must be divisible by tp ({bad})" in line


@pytest.mark.parametrize("world, nnodes, tp, needle", [
    (4, 1, 3, "--tp 3 must divide the number of ranks (4; NPROC x NNODES)"),
    (16, 2, 16, "must be divisible by tp (16): every rank holds whole heads"),  # t = 16 spans both nodes
    (4, 2, 4, None),  # t = 4 across 2 nodes of 2: allowed (slow: the all-reduces cross the network)
])
def test_explicit_degrees(world, nnodes, tp, needle, monkeypatch, capsys):
    line = check_pass(bench.main, ["--gpu", "cpu", "--tp", str(tp)], world, nnodes, monkeypatch, capsys)
    assert line is None if needle is None else needle in line
