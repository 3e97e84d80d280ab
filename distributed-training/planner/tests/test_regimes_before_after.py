"""regimes_before_after.py's pieces on hand values, and both before/after tools' bad --before (the old planner itself
is not run here: common/tests/test_at_commit.py runs a module of an older commit)."""

from pathlib import Path

import pytest
from testkit import expect_bad_input
from planner.evidence import before_after
from planner.evidence import regimes_before_after as rba
from planner.evidence import validation

LAB = Path(rba.__file__).resolve().parents[1]  # the planner folder


@pytest.mark.parametrize("gpus, index", [(1, 0), (8, 0), (63, 0), (64, 1), (1024, 1), (1025, 2), (16384, 2)])
def test_regime_boundaries(gpus, index):
    assert rba.regime(gpus) == validation.REGIMES[index][0]


def test_spread_by_hand():
    s = rba.spread([0.10, -0.30, 0.05, 0.02])
    assert s.n == 4
    assert s.median_abs == pytest.approx(0.075)  # |errors| 0.02 0.05 0.10 0.30: (0.05 + 0.10) / 2
    assert s.worst == pytest.approx(-0.30)  # the largest magnitude keeps its sign
    assert str(s) == "median |error| 7.5%, worst -30.0% (n 4)"
    assert rba.spread([]) is None


def test_rank_lines_reversed_group():
    # three runs of one group in the small-model regime, predicted in the reverse of the published order
    rows = [{"run": f"r{i}", "group": "g", "gpus": 8, "published": pub, "before": pred, "after": pub * 1.2}
            for i, (pub, pred) in enumerate([(100.0, 10.0), (90.0, 20.0), (80.0, 30.0)])]
    rows.append({"run": "big", "group": "g", "gpus": 64, "published": 1.0, "before": 99.0, "after": 99.0})
    before, = rba.rank_lines(rows, "before")
    assert before.startswith("g (3 runs): Spearman -1.00, pick 'r2' -20.0% vs the measured best (not within 5%)")
    after, = rba.rank_lines(rows, "after")
    assert after.startswith("g (3 runs): Spearman 1.00, pick 'r0' +0.0%")


@pytest.mark.parametrize("argv, needle", [
    (["--before", "no-such-commit"], "--before 'no-such-commit' is not a commit of this repository"),
    (["--before", " "], "--before must name a commit"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_before(argv, needle, capsys):
    expect_bad_input(lambda: rba.main(argv), needle, capsys, watch=[LAB / "results"])


@pytest.mark.parametrize("argv, needle", [
    (["--before", "no-such-commit"], "--before 'no-such-commit' is not a commit of this repository"),
    (["--before", " "], "--before must name a commit"),
])
def test_before_after_refuses_a_bad_before(argv, needle, capsys):
    expect_bad_input(lambda: before_after.main(argv), needle, capsys, watch=[LAB / "results"])
