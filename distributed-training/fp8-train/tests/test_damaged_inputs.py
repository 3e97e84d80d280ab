"""Every committed input of the report, damaged every way (cut, binary, empty, one byte, wrong type, NaN, BOM):
one line naming the file, exit 2, nothing else (testkit.damaged_inputs_problems). A NaN loss or amax is
a measurement (tables.py names those columns): the damage puts NaN elsewhere."""

from pathlib import Path

import report
from reporting import tables
from testkit import damaged_inputs_problems

LAB = Path(report.__file__).resolve().parent


def test_every_input_damaged_every_way_is_one_line(tmp_path, capsys):
    observed = {name: schema.nonfinite for name, schema in tables.SCHEMAS.items()}
    assert damaged_inputs_problems(report.main, LAB, tmp_path, capsys, observed) == []


def _report_on(tmp_path, capsys, edit) -> tuple[int, list[str]]:
    """report.main over a copy of the committed results whose cpu_ws1/steps.csv rows (dicts) `edit` changed;
    (exit code, stderr lines)."""
    import csv
    import shutil

    import pytest
    results = tmp_path / "results"
    shutil.copytree(LAB / "results", results)
    steps = results / "cpu_ws1" / "steps.csv"
    with steps.open(newline="") as f:
        rows = list(csv.DictReader(f))
    with steps.open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(edit(rows))
    with pytest.raises(SystemExit) as e:
        report.main(["--results", str(results), "--out", str(tmp_path / "REPORT.md")])
    return e.value.code, capsys.readouterr().err.strip().splitlines()


def test_a_repeated_run_and_step_with_another_value_is_one_line(tmp_path, capsys):
    """Issue 44: such a row shifted the tokens/s silently (an exact repeat was refused already)."""
    code, err = _report_on(tmp_path, capsys, lambda rows: rows + [{**rows[4], "tokens_per_s": "99999.0"}])
    assert code == 2 and len(err) == 1 and "steps.csv" in err[0], err
    assert f"repeats the key (run={rows_run(tmp_path)}, step=4) of line 6 with another tokens_per_s" in err[0], err


def rows_run(tmp_path) -> str:
    import pandas as pd
    return pd.read_csv(LAB / "results" / "cpu_ws1" / "steps.csv", nrows=5)["run"].iloc[4]


def test_a_negative_time_or_throughput_is_one_line(tmp_path, capsys):
    for column in ("step_time_s", "tokens_per_s"):
        code, err = _report_on(tmp_path / column, capsys, lambda rows: [{**rows[0], column: "-1.5"}, *rows[1:]])
        assert code == 2 and len(err) == 1 and f"line 2, column {column}: -1.5 is negative" in err[0], err
