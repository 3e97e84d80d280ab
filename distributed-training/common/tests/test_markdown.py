"""The one markdown table writer: header, rule with alignment, cells; compact numbers."""

import math

import pandas as pd
import pytest

from common.markdown import frame, number, table


def test_table_rule_and_cells():
    assert table(["a", "b"], [[1, "x"], [2.5, None]]) == "| a | b |\n|---|---|\n| 1 | x |\n| 2.5 | None |"
    assert table(["model", "GPUs", "MFU"], [["8B", 64, "71%"]], align="lrr").splitlines()[1] == "|---|---:|---:|"
    with pytest.raises(ValueError, match="align needs 1 or 2 letters"):
        table(["a", "b"], [], align="lrl")


def test_numbers_and_frames():
    cells = [number(x) for x in (0.123456, 12345.6, math.nan, None, 7, "s")]
    assert cells == ["0.123", "12,346", "–", "–", "7", "s"]
    assert number(4.548143, ".6g") == "4.54814" and number(1234.5, ".6g") == "1234.5"
    df = pd.DataFrame({"strategy": ["ddp"], "E": [0.77123]})
    assert frame(df, fmt=number) == "| strategy | E |\n|---|---|\n| ddp | 0.771 |"
