"""A results file damaged every way a user's copy gets damaged (DAMAGES), for the damage tests of every entry point
(testkit.reports): `damaged(raw, suffix, kind, schema)` is the damaged bytes, or None where the damage means nothing
for that file.

    cut              the last row half-written (a run killed while writing it), or the JSON text cut
    binary           a PNG's first bytes where text was (a file copied over the wrong one)
    empty            zero bytes (a run killed before its header)
    one-byte         a single byte left of it
    wrong-type       text in the first row's number cells, a JSON list for an object
    nan, inf         a non-finite number in the first row's measurements (not in the columns `observed`, where the
                     report shows it as an observation: a diverged loss)
    bom-crlf         a spreadsheet's re-save: a byte-order mark and CRLF line ends
    repeated-row     the first row twice (a resume that wrote it again)
    conflicting-key  the first row again with another value (two runs' rows mixed): the key the schema names is
                     the same, a measurement differs; a JSON object with a key given twice, two values
    negative         a negative number where none can be (a time, a size, a rate; csvread.Schema.never_negative)
    foreign          another program's CSV in its place (none of the columns the reader needs)

The schema-aware damages read the schema the reader used (recorded by testkit.reports.opened_during): the key it
names, its never-negative columns, its observed columns.
"""

from __future__ import annotations

import csv
import io
import math

from common.csvread import ALWAYS_TEXT, NONNEG_UNITS, Schema

DAMAGES = ("cut", "binary", "empty", "one-byte", "wrong-type", "nan", "inf", "bom-crlf", "repeated-row",
           "conflicting-key", "negative", "foreign")
FOREIGN = b"name,value\nforeign,1\n"  # a CSV of another program: a spreadsheet's two columns


def _rows(raw: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))


def _written(rows: list[list[str]]) -> bytes:
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def _number(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _numeric_cells(raw: bytes, replacement: str, floats_only: bool, keep: tuple[str, ...] = ()) -> bytes | None:
    """A CSV with the numbers of its first data row replaced (only those that are not whole numbers, where
    `floats_only` and the row has such: a NaN where a measurement was), but in the columns `keep`; None if that
    row holds no other number."""
    rows = _rows(raw)
    if len(rows) < 2:
        return None

    def number(cell: str, whole_too: bool) -> bool:
        return _number(cell) is not None and (whole_too or not cell.strip().lstrip("+-").isdigit())

    cells = [(j, c) for j, c in enumerate(rows[1]) if j < len(rows[0]) and rows[0][j] not in keep]
    whole_too = not (floats_only and any(number(c, False) for _, c in cells))
    hits = [j for j, cell in cells if number(cell, whole_too)]
    if not hits:
        return None
    for j in hits:
        rows[1][j] = replacement
    return _written(rows)


def _other_value(cell: str) -> str:
    """A value of the same kind and sign as `cell`, and not equal to it."""
    value = _number(cell)
    if value is None:
        return cell + "x"
    if cell.strip().lstrip("+-").isdigit():
        return str(int(value) * 2 + 1)
    return repr(value * 2 + 1.5)


def _conflicting_key(raw: bytes, schema: Schema | None) -> bytes | None:
    """The first row again with one measurement changed: the key the schema names (or, where it names none, the rest
    of the row) is the same."""
    rows = _rows(raw)
    if len(rows) < 2 or not raw.endswith(b"\n"):
        return None
    header, first = rows[0], rows[1]
    key = set(schema.key) if schema else set()
    text = {c for c, k in (schema.columns.items() if schema else ()) if k is str} | set(ALWAYS_TEXT)
    free = [j for j, h in enumerate(header) if h not in key and h not in text]
    measured = [j for j in free if schema and schema.columns.get(header[j]) is float and _number(first[j]) is not None]
    numbers = [j for j in free if _number(first[j]) is not None]
    pick = (measured or numbers or free or [None])[-1]
    if pick is None:
        return None
    again = list(first)
    again[pick] = _other_value(first[pick])
    return raw + _written([again])


def _negative(raw: bytes, schema: Schema | None) -> bytes | None:
    """The first row's first positive number in a column that cannot be negative, made negative."""
    rows = _rows(raw)
    if len(rows) < 2:
        return None
    header = rows[0]
    columns = schema.never_negative(header) if schema else [h for h in header if NONNEG_UNITS.search(h)]
    hit = next((header.index(c) for c in columns if (_number(rows[1][header.index(c)]) or 0) > 0), None)
    if hit is None:
        return None
    rows[1][hit] = "-" + rows[1][hit].strip()
    return _written(rows)


def _json(raw: bytes, kind: str) -> bytes | None:
    if kind == "wrong-type":
        return b"[" + raw + b"]"
    if kind in ("nan", "inf"):
        return raw.replace(b"{", b'{"damaged": ' + (b"NaN" if kind == "nan" else b"Infinity") + b", ", 1)
    if kind == "conflicting-key":  # {"a": 1, ..., "a": 2}: json.loads keeps the last, silently
        head, sep, _ = raw.partition(b":")
        name = head[head.find(b"{") + 1:].strip()
        return raw.replace(b"{", b"{" + name + b': "another value", ', 1) if sep and name.startswith(b'"') else None
    return None  # repeated-row, negative, foreign: a CSV's damage


def damaged(raw: bytes, suffix: str, kind: str, schema: Schema | None = None,
            observed: tuple[str, ...] = ()) -> bytes | None:
    """`raw` (a .csv, .json or .md the labs wrote) damaged as `kind` (one of DAMAGES), given the `schema` its reader
    used (None: not read through common.csvread, or not a CSV); None where the damage means nothing for that kind of
    file (a cut or one-byte text file is still text). A NaN is never put in the `observed` columns or those the
    schema names non-finite, where it is a measurement the report shows as such (a diverged loss)."""
    observed = tuple(observed) + (schema.nonfinite if schema else ())
    if kind == "binary":
        return b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe" + raw[:64]
    if kind == "empty":
        return b""
    if kind == "bom-crlf":
        return b"\xef\xbb\xbf" + raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    if suffix == ".md":
        return None
    if kind == "one-byte":
        return raw[:1]
    if kind == "cut":  # in the middle of the last row (a run killed while writing it), or of the JSON text
        body = raw.rstrip(b"\n")
        start = body.rfind(b"\n") + 1 if suffix == ".csv" else 0
        return body[:start + max(1, (len(body) - start) // 2)]
    if suffix == ".json":
        return _json(raw, kind)
    if kind == "repeated-row":  # the first row twice: two runs' rows mixed, or a resume that wrote one again
        lines = raw.splitlines(keepends=True)
        return raw + lines[1] if len(lines) > 1 and raw.endswith(b"\n") else None
    if kind == "conflicting-key":
        return _conflicting_key(raw, schema)
    if kind == "negative":
        return _negative(raw, schema)
    if kind == "foreign":
        return FOREIGN
    if kind == "wrong-type":
        return _numeric_cells(raw, "abc", False, observed)
    return _numeric_cells(raw, kind, True, observed)
