"""The pre-launch check over world sizes 1..16 and 2 nodes: each case plans or is refused in one line, exit 2,
before any rank starts and with nothing written (testkit.check_pass runs the launcher's check pass)."""

from pathlib import Path

import pytest

import bench
from testkit import WORLDS, check_pass

LAB = Path(bench.__file__).resolve().parent


def _min_bytes(collective: str, world: int) -> int:
    """The smallest message a collective can sweep on `world` ranks: a 16-byte part per rank if it splits one."""
    return 16 * world if collective in ("all_gather", "reduce_scatter", "all_to_all") else 4


@pytest.mark.parametrize("argv, collective", [
    (["--max-bytes", "1M"], None),  # the preset's collectives, smaller: every world plans
    (["--collectives", "all_gather", "--min-bytes", "64", "--max-bytes", "64"], "all_gather"),  # sizes vs world
    (["--collectives", "reduce_scatter,all_reduce", "--min-bytes", "32", "--max-bytes", "32"], "reduce_scatter"),
], ids=["preset", "all_gather-64B", "reduce_scatter-32B"])
@pytest.mark.parametrize("world, nnodes", WORLDS, ids=[f"{w}x{n}" for w, n in WORLDS])
def test_every_world_plans_or_is_refused_in_one_line(argv, collective, world, nnodes, monkeypatch, capsys):
    line = check_pass(bench.main, ["--gpu", "cpu", *argv], world, nnodes, monkeypatch, capsys,
                      watch=[LAB / "results", LAB / "runs"])
    size = int(argv[argv.index("--max-bytes") + 1].rstrip("M")) if collective else 0
    if collective is None or size >= _min_bytes(collective, world):
        assert line is None
    else:
        assert f"{collective} on {world} ranks splits a message into {world} parts" in line


def test_send_recv_alone_needs_a_peer(monkeypatch, capsys):
    line = check_pass(bench.main, ["--gpu", "cpu", "--collectives", "send_recv"], 1, 1, monkeypatch, capsys)
    assert "send_recv needs at least 2 ranks" in line
    assert check_pass(bench.main, ["--gpu", "cpu", "--max-bytes", "4K"], 1, 1, monkeypatch, capsys) is None
