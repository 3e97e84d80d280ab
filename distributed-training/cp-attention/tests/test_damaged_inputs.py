"""Every committed input of the report, damaged every way (cut, binary, empty, one byte, wrong type, NaN, BOM):
one line naming the file, exit 2, nothing else (testkit.damaged_inputs_problems)."""

from pathlib import Path

import report
from testkit import damaged_inputs_problems

LAB = Path(report.__file__).resolve().parent


def test_every_input_damaged_every_way_is_one_line(tmp_path, capsys):
    assert damaged_inputs_problems(report.main, LAB, tmp_path, capsys) == []
