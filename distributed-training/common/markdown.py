"""Markdown tables for the reports and the guide: one writer, so every table is built the same way.

    table(["run", "busbw (GB/s)"], [["cpu 4 ranks", 0.75]])           # header, rows of cells
    table(header, rows, align="lr")                                  # per column: l(eft) or r(ight)
    frame(df, fmt=number)                                            # a DataFrame, columns as header

Cells are turned into text by `fmt` (str by default; `number` prints floats compactly and NaN/None as
a dash). No torch, no pandas import: the planner's guide uses it too.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

DASH = "–"


def number(v: Any, spec: str = ".3g") -> str:
    """A cell: floats by `spec` (thousands with separators and no decimals), NaN and None as a dash."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return DASH
    if not isinstance(v, float):
        return str(v)
    return f"{v:,.0f}" if abs(v) >= 1000 and spec == ".3g" else f"{v:{spec}}"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "l",
          fmt: Callable[[Any], str] = str) -> str:
    """A markdown table; `align` is one letter for every column or one per column ('l' or 'r')."""
    header = list(header)
    if len(align) == 1:
        align = align * len(header)
    if len(align) != len(header) or set(align) - {"l", "r"}:
        raise ValueError(f"align needs 1 or {len(header)} letters of l/r, got {align!r}")
    rule = "|" + "".join("---|" if a == "l" else "---:|" for a in align)
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def frame(df, align: str = "l", fmt: Callable[[Any], str] = str) -> str:
    """A pandas DataFrame as a markdown table (its columns as the header, no index)."""
    return table([str(c) for c in df.columns], df.itertuples(index=False), align, fmt)
