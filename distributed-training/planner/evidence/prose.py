"""The generated documents' two shapes of text: a paragraph wrapped like the hand-written ones, and a table.

The evidence sections (accuracy.py, validation.py, ...) and the guide (planner/guide/) write their numbers into
these, so a generated paragraph reads like the prose around it and every table is aligned the same way.
"""

from __future__ import annotations

import textwrap

from common import markdown


def prose(text: str) -> str:
    """A generated paragraph, wrapped like the hand-written ones."""
    return textwrap.fill(text, width=110, break_long_words=False, break_on_hyphens=False)


def table(header: list[str], rows: list[list]) -> str:
    """The guide's tables: the first column left-aligned, the numbers right (common/markdown.py)."""
    return markdown.table(header, rows, align="l" + "r" * (len(header) - 1))
