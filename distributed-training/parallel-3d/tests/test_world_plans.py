"""The pre-launch check over world sizes 1..16 and 2 nodes: each case plans or is refused in one line, exit 2,
before any rank builds a model: degrees vs the world, heads vs TP, layers vs PP (fewer micro-batches than
stages run, under GPipe)
(testkit.check_pass runs the launcher's check pass; the CPU preset: 6 layers, 4 heads, global batch 8
of micro-batches of 1)."""

import functools

import pytest

import train
from testkit import WORLDS, check_pass

LAYERS, HEADS, BATCH = 6, 4, 8


_data = functools.lru_cache(maxsize=1)(train.load_data)


def expected(tp: int, pp: int, interleave: int, world: int) -> str | None:
    """The rule, written out: what the check must say for this layout and world (None: it plans)."""
    if world % (tp * pp):
        return f"world size {world} is not a multiple of tp x pp = {tp * pp}"
    dp = world // (tp * pp)
    if HEADS % tp:
        return f"--tp {tp} does not divide heads {HEADS}"
    if BATCH % dp:
        return f"--global-batch {BATCH} is not a multiple of dp x microbatch = {dp} x 1"
    if pp * interleave > LAYERS:
        return f"{pp * interleave} pipeline stages (pp x interleave) need at least as many layers"
    return None  # fewer micro-batches than stages run (GPipe, engine.py): nothing more to refuse


@pytest.mark.parametrize("tp, pp, interleave", [(2, 2, 2), (4, 1, 1), (8, 1, 1), (1, 8, 1), (1, 4, 1)],
                         ids=["tp2-pp2-v2", "tp4", "tp8-heads", "pp8-layers", "pp4-microbatches"])
@pytest.mark.parametrize("world, nnodes", WORLDS, ids=[f"{w}x{n}" for w, n in WORLDS])
def test_every_world_plans_or_is_refused_in_one_line(tp, pp, interleave, world, nnodes, monkeypatch, capsys):
    monkeypatch.setattr(train, "load_data", _data)  # the corpus, read once for the whole table
    argv = ["--gpu", "cpu", "--tp", str(tp), "--pp", str(pp), "--dp", "0", "--interleave", str(interleave)]
    line = check_pass(train.main, argv, world, nnodes, monkeypatch, capsys)
    want = expected(tp, pp, interleave, world)
    assert line is None if want is None else want in line, line
