"""The guide's readers of the labs' CSVs (own_runs.py): each committed input, damaged each way, is one line naming
the file and exit 2 from the guide, never a traceback or a number made of garbage (issue 32)."""

import pytest

from common.csvread import guard_report
from testkit import damaged_inputs_problems
from planner.evidence import own_runs


def reader_main(lab: str):
    """own_runs.runs(lab) as a report generator's main(argv): --results names the folder it reads."""

    @guard_report
    def main(argv: list[str]) -> int:
        own_runs.runs(lab, own_runs.Path(argv[argv.index("--results") + 1]))
        return 0

    return main


@pytest.mark.parametrize("lab", sorted(own_runs.READERS))
def test_every_input_the_guide_reads_damaged_every_way_is_one_line(lab, tmp_path, capsys):
    assert damaged_inputs_problems(reader_main(lab), own_runs.LABS / lab, tmp_path, capsys) == []
