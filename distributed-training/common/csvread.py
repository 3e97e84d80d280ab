"""Reading result CSVs back, checked: the one loader every report generator uses.

A report is only as good as the rows it reads, and pandas reads almost anything: a truncated
last row becomes a row of NaN, a text cell turns a number column into strings, an empty file
raises deep in the parser, a CSV of another lab is read as if it were ours. Here each file is
checked before pandas sees it, and every problem is one line that names the file and says what
is wrong (BadResults, a ValueError; `guard_report` turns it into exit code 2):

    not UTF-8 text (binary junk), a byte-order mark (a spreadsheet's re-save), empty (a run killed
    before its header), unterminated quotes, NUL bytes, duplicate or empty column names, a row whose
    field count differs from the header, a last row without its newline (the writer always ends a
    row with one: the file was cut), missing columns (a foreign CSV), cells that are not of their
    column's kind (int, float, bool; empty cells mean "not measured" and are allowed), non-finite
    numbers (nan, inf) in the number columns of the schema but those it names as observations that
    may be non-finite (a training loss that diverged), a negative number where none can be (below),
    a row that repeats another, and two rows with the same key: the schema names the columns that
    identify a row (`key`), and a key seen twice is refused whether the rows agree (a repeat) or not
    (two measurements of one thing: which one would a report read?).

Never negative: a column the schema names in `nonneg` (a norm, a loss, a count without a unit), and
every number column whose name carries a unit of time, size, rate or share (NONNEG_UNITS: `time_us`,
`busbw_GBps`, `peak_mem_bytes`, `tokens_per_s`, `underflow_frac`, ...), whoever wrote the file; a schema
names in `signed` such a column that may be negative (a signed error).

    SCHEMA = Schema("allreduce-bench sweep", {"collective": str, "size_bytes": int, "time_us": float})
    df = read_table(path, SCHEMA)                       # one file, checked
    df = read_tables(folder, "sweep_*.csv", SCHEMA)     # every match, concatenated; none is an error
    rows = read_rows(path, SCHEMA)                      # the same, as csv.DictReader's list of dicts

Only columns named in the schema are required and type-checked; those declared str are read as
text (a commit hash of digits and one "e" is not a float), the others as pandas infers them.
Configs saved beside results and other text a report reads go through read_json and read_text:
the same one line for a file that is missing, binary, cut, empty or holds NaN; check_configs(results)
reads every *.config.json under a results folder that way, before a report draws anything.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
import re
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from common.failures import shown

BAD_INPUT = 2
ALWAYS_TEXT = ("git_commit",)  # a provenance column of every results file; read as text whatever the schema
_TRUE_FALSE = {"true", "false", "1", "0"}
BOM = "\ufeff"
_NONFINITE = {"nan", "-nan", "+nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity"}  # as written
# Column names whose unit says the value cannot be negative (the labs name units in their columns): times, sizes,
# rates, throughputs and fractions of a whole.
NONNEG_UNITS = re.compile(r"(_s|_ms|_us|_ns|_bytes|_KiB|_MiB|_GiB|_KB|_MB|_GB|_GBps|_per_s|_frac|(^|_)tflops)$")


class BadResults(ValueError):
    """A results file or folder that cannot be read as it claims to be; str() is one line."""


@dataclass(frozen=True)
class Schema:
    """What a results file must hold: required columns and their kinds (str, int, float, bool)."""

    name: str
    columns: Mapping[str, type] = field(default_factory=dict)
    allow_empty: bool = False  # a header with no rows is valid (e.g. an events log with no alerts)
    nonfinite: tuple[str, ...] = ()  # columns where nan/inf is an observation (a diverged loss), shown as such
    key: tuple[str, ...] = ()  # columns that identify a row (those the file lacks are left out: a constant there)
    finite: bool = False  # no nan/inf in any column not declared str or nonfinite (a report's whole file), not
    # only in the float columns declared here
    nonneg: tuple[str, ...] = ()  # number columns that cannot be negative besides those NONNEG_UNITS names
    signed: tuple[str, ...] = ()  # columns NONNEG_UNITS names that may be negative all the same

    def with_columns(self, **kinds: type) -> "Schema":
        return dataclasses.replace(self, columns={**self.columns, **kinds})

    def never_negative(self, header: list[str]) -> list[str]:
        """The columns of this header that cannot hold a negative number."""
        return [h for h in header if (h in self.nonneg or NONNEG_UNITS.search(h)) and h not in self.signed
                and self.columns.get(h, float) is not str]


def _check_cell(kind: type, text: str) -> bool:
    """True if `text` (non-empty) is a value of `kind`."""
    if kind is str:
        return True
    if kind is bool:
        return text.strip().lower() in _TRUE_FALSE
    try:
        value = float(text)
    except ValueError:
        return False
    if kind is int:
        return math.isfinite(value) and value == int(value)
    return True


def _finite(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return True  # not a number at all: the kind check says so where it matters


def _read_bytes(path: Path) -> bytes:
    """The file's bytes; BadResults naming it where it is missing or unreadable."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise BadResults(f"{shown(path)}: no such file") from None
    except OSError as e:
        raise BadResults(f"{shown(path)}: cannot be read ({e.strerror})") from None


def _parse(path: Path, schema: Schema, raw: bytes | None = None) -> tuple[list[str], list[list[str]], str]:
    """Header, rows and text of a structurally sound CSV (its bytes `raw`, read here if not given); BadResults
    otherwise."""
    where = shown(path)
    raw = _read_bytes(path) if raw is None else raw
    if not raw.strip():
        raise BadResults(f"{where} is empty (a run stopped before writing its header?); delete it or rerun the run "
                         "that writes it")
    if b"\0" in raw:
        raise BadResults(f"{where} contains NUL bytes: it is binary or corrupt, not a {schema.name} CSV")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadResults(f"{where} is not UTF-8 text (byte {e.start}): binary or corrupt, not a {schema.name} CSV") \
            from None
    if text.startswith(BOM):
        raise BadResults(f"{where} starts with a byte-order mark (a spreadsheet's re-save?): not a file the labs "
                         "wrote; restore it (git checkout) or rerun the run that writes it")
    try:
        lines = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error as e:
        raise BadResults(f"{where} is not a readable CSV ({e}); an unterminated quote or a cut row") from None
    lines = [ln for ln in lines if ln]  # blank lines carry nothing
    header = lines[0]
    if any(not h.strip() for h in header) or len(set(header)) != len(header):
        raise BadResults(f"{where}: the header {header[:6]}{'...' if len(header) > 6 else ''} has empty or "
                         f"repeated column names; not a {schema.name} CSV")
    missing = [c for c in schema.columns if c not in header]
    if missing:
        names = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise BadResults(f"{where} lacks the column(s) {names}: not a {schema.name} CSV (a foreign or older file?)")
    rows = lines[1:]
    cut = not text.endswith(("\n", "\r"))
    half = ("a half-written last row (the run was killed while writing it?); resume the run to repair it, or delete "
            "the line")
    for i, row in enumerate(rows):
        if len(row) != len(header):
            why = half if cut and i == len(rows) - 1 else "a damaged row"
            raise BadResults(f"{where}: line {i + 2} has {len(row)} fields, the header {len(header)}: {why}")
    if cut:  # the writer ends every line, the header included, with a newline
        why = half if rows else "a cut header"
        raise BadResults(f"{where}: line {len(rows) + 1} does not end with a newline: {why}")
    if not rows and not schema.allow_empty:
        raise BadResults(f"{where} has a header but no rows (a run stopped before its first measurement?)")
    return header, rows, text


def _check_types(path: Path, schema: Schema, header: list[str], rows: list[list[str]]) -> None:
    for name, kind in schema.columns.items():
        j = header.index(name)
        for i, row in enumerate(rows):
            cell = row[j]
            if cell.strip() and not _check_cell(kind, cell):
                raise BadResults(f"{shown(path)}: line {i + 2}, column {name}: {cell[:40]!r} is not "
                                 f"{'an' if kind is int else 'a'} {kind.__name__}")
    _check_values(path, schema, header, rows)


def _check_values(path: Path, schema: Schema, header: list[str], rows: list[list[str]]) -> None:
    """No non-finite number where the schema does not allow one, no negative one where none can be, no row
    twice, no key twice."""
    floats = {header.index(c) for c, k in schema.columns.items() if k is float and c not in schema.nonfinite}
    text = {c for c, k in schema.columns.items() if k is not float} | set(ALWAYS_TEXT) | set(schema.nonfinite)
    others = {j for j, h in enumerate(header) if h not in text} - floats if schema.finite else set()
    positive = [header.index(c) for c in schema.never_negative(header)]
    for i, row in enumerate(rows):
        for j in sorted(floats | others):
            cell = row[j].strip()
            if (j in floats and cell and not _finite(cell)) or cell.lower() in _NONFINITE:
                raise BadResults(f"{shown(path)}: line {i + 2}, column {header[j]}: {cell[:40]!r} is not a finite "
                                 "number (a failed measurement written as a value?); rerun the run that writes it")
    for j in positive:  # column by column: a text test first, a number parsed only where it starts with '-'
        i = next((i for i, row in enumerate(rows) if row[j].lstrip()[:1] == "-" and _number(row[j]) < 0), None)
        if i is not None:
            raise BadResults(f"{shown(path)}: line {i + 2}, column {header[j]}: {rows[i][j].strip()[:40]} is "
                             "negative, which it cannot be (an edited file or a failed measurement?); rerun the run "
                             "that writes it")
    seen: dict[tuple[str, ...], int] = {}
    key = [c for c in schema.key if c in header]
    idx = [header.index(c) for c in key]
    for i, row in enumerate(rows):
        ident = tuple(row[j] for j in idx) if idx else tuple(row)
        if ident in seen:
            first = rows[seen[ident] - 2]
            if row == first or not idx:
                what = f"repeats line {seen[ident]} exactly"
            else:
                names = ", ".join(f"{c}={v}" for c, v in zip(key, ident))
                j = next(j for j, (a, b) in enumerate(zip(first, row)) if a != b)
                what = (f"repeats the key ({names}) of line {seen[ident]} with another {header[j]} "
                        f"({first[j][:20]} there, {row[j][:20]} here): two measurements of one thing?")
            raise BadResults(f"{shown(path)}: line {i + 2} {what}; keep one (rerun, or publish with --promote "
                             "replace)")
        seen[ident] = i + 2


def _number(cell: str) -> float:
    """The cell's number, or nan where it holds none (empty, text): for comparisons that skip what is not one."""
    try:
        return float(cell)
    except ValueError:
        return float("nan")


def has_columns(path: str | Path, columns: set[str]) -> bool:
    """True if `path` is a readable CSV whose header holds `columns`; False for anything else (a missing file,
    binary, another CSV): for telling which kind of result a user passed before reading it with its schema."""
    p = Path(path)
    if not p.is_file():
        return False
    try:
        with open(p, newline="") as f:
            header = next(csv.reader(f), [])
    except (UnicodeDecodeError, csv.Error):
        return False
    return columns <= set(header)


# Files that passed every check, by (their bytes' digest, the schema, how they were read): the same bytes read
# again with the same schema (a report and the guide read one file several times; a damage test re-reads every
# untouched file once per damaged one) are not parsed and checked again. Keyed by content, never by name or
# modification time: a file rewritten in place, even to the same size within one clock tick, is read afresh.
# Only what passed is kept (an error names its path, read anew each time); callers get copies.
_PASSED: OrderedDict[tuple, Any] = OrderedDict()
_PASSED_MAX = 256


def _schema_key(schema: Schema) -> tuple:
    return tuple(tuple(v.items()) if isinstance(v, Mapping) else v
                 for v in (getattr(schema, f.name) for f in dataclasses.fields(schema)))


def _checked(path: Path, schema: Schema, how: str, build: Callable[[list[str], list[list[str]], str], Any]) -> Any:
    """build(header, rows, text) of the CSV at `path` once it passed every check above, from _PASSED if these
    bytes passed this schema before."""
    raw = _read_bytes(path)
    key = (hashlib.blake2b(raw, digest_size=20).digest(), len(raw), _schema_key(schema), how)
    if key in _PASSED:
        _PASSED.move_to_end(key)
        return _PASSED[key]
    header, rows, text = _parse(path, schema, raw)
    _check_types(path, schema, header, rows)
    value = build(header, rows, text)
    _PASSED[key] = value
    if len(_PASSED) > _PASSED_MAX:
        _PASSED.popitem(last=False)
    return value


def read_table(path: str | Path, schema: Schema) -> pd.DataFrame:
    """One results CSV as a DataFrame, after every check above; BadResults naming the file otherwise."""
    path = Path(path)

    def frame(header: list[str], rows: list[list[str]], text: str) -> pd.DataFrame:
        if not rows:
            return pd.DataFrame(columns=header)
        text_columns = {c for c, k in schema.columns.items() if k is str} | {c for c in ALWAYS_TEXT if c in header}
        try:  # columns declared str stay text (a commit like 42153292e609 is not a number)
            return pd.read_csv(io.StringIO(text), dtype={c: str for c in text_columns})
        except (ValueError, pd.errors.ParserError) as e:  # cannot happen after the checks above; still one line
            raise BadResults(f"{shown(path)}: pandas cannot read it ({str(e).splitlines()[0][:120]})") from None

    return _checked(path, schema, "table", frame).copy()


def read_rows(path: str | Path, schema: Schema) -> list[dict[str, str]]:
    """The same checks, for readers that take rows as dicts of text (csv.DictReader's shape)."""
    path = Path(path)
    header, rows = _checked(path, schema, "rows", lambda header, rows, _: (header, rows))
    return [dict(zip(header, r)) for r in rows]


def read_text(path: str | Path, what: str) -> str:
    """A text file a report reads (a saved topology, a template's input): UTF-8, not empty, no NUL byte,
    no byte-order mark; BadResults naming the file otherwise."""
    path = Path(path)
    where = shown(path)
    raw = _read_bytes(path)
    if not raw.strip():
        raise BadResults(f"{where} is empty; restore it (git checkout) or rerun the run that writes it")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadResults(f"{where} is not UTF-8 text (byte {e.start}): binary or corrupt, not {what}") from None
    if "\0" in text or text.startswith(BOM):
        raise BadResults(f"{where} holds {'NUL bytes' if chr(0) in text else 'a byte-order mark'}: binary or "
                         f"re-saved, not {what} as the labs write it")
    return text


def read_json(path: str | Path, what: str, kinds: Mapping[str, type] | None = None) -> dict[str, Any]:
    """A JSON object a report reads (the config saved beside a result), checked as read_text, then: valid
    JSON, cut nowhere, an object, no NaN or Infinity, no key given twice with two values, and each key of `kinds`
    that it holds of that type (int, float, str, bool, list, dict); BadResults naming the file otherwise."""
    path = Path(path)
    text = read_text(path, what)

    def no_constant(name: str):
        raise ValueError(f"{name} is not a number JSON allows")

    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:  # json.loads keeps a repeated key's last value silently
        seen: dict[str, Any] = {}
        for name, value in pairs:
            if name in seen and seen[name] != value:
                raise BadResults(f"{shown(path)} gives the key {name!r} twice, {str(seen[name])[:20]!r} and "
                                 f"{str(value)[:20]!r} (two files mixed, or an edit?): not {what}")
            seen[name] = value
        return seen

    try:
        data = json.loads(text, parse_constant=no_constant, object_pairs_hook=once)
    except BadResults:
        raise
    except (json.JSONDecodeError, ValueError) as e:
        raise BadResults(f"{shown(path)} is not valid JSON ({str(e).splitlines()[0][:80]}): cut or damaged, "
                         f"not {what}") from None
    if not isinstance(data, dict):
        raise BadResults(f"{shown(path)} holds a JSON {type(data).__name__}, not {what} (an object)")
    for name, kind in (kinds or {}).items():
        value = data.get(name)
        ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if name in data and not ok:
            raise BadResults(f"{shown(path)}: {name} is {value!r}, not {'an' if kind is int else 'a'} "
                             f"{kind.__name__}: not {what}")
    return data


def check_configs(results: str | Path) -> None:
    """Every config saved beside a result under `results` (what a report reads besides its CSVs), checked
    before the report draws anything: BadResults (one line naming the file) for the first damaged one."""
    for path in sorted(Path(results).rglob("*.config.json")):
        read_json(path, "the config saved beside a result")


def check_file(path: str | Path) -> None:
    """A results file whose reader is not known (an archive's member before it is unpacked: provision/archive.py),
    checked as far as its kind says: a CSV as every CSV (structure, byte-order mark, cut, a row given twice) with each
    column whose name carries a unit (NONNEG_UNITS) a finite number, never negative; a .json as read_json, a .md as
    read_text. A report reads it with its own schema later (its key, its columns)."""
    path = Path(path)
    if path.suffix == ".json":
        read_json(path, "a config saved beside a result")
    elif path.suffix == ".md":
        read_text(path, "a report the labs write")
    elif path.suffix == ".csv":
        header = _parse(path, Schema(path.name, allow_empty=True))[0]
        read_rows(path, Schema(path.name, {h: float for h in header if NONNEG_UNITS.search(h)}, allow_empty=True))


def results_folder(folder: str | Path, hint: str = "") -> Path:
    """The folder a report reads; a missing one is an error, not an empty report."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BadResults(f"results folder {shown(folder)} does not exist" + (f"; {hint}" if hint else ""))
    return folder


def report_path(out: str | Path) -> Path:
    """Where a report is written (--out): its folder must exist (one line, exit 2, nothing written, otherwise)."""
    out = Path(out)
    if not out.parent.is_dir():
        raise BadResults(f"--out {out}: the folder {out.parent} does not exist")
    return out


def tables_by_tag(folder: Path, kind: str, schema: Schema) -> dict[str, pd.DataFrame]:
    """Every <kind>_<tag>.csv in `folder`, checked, by its result set's tag (cpu_ws4, h100_ws1), in name order."""
    return {p.stem.removeprefix(f"{kind}_"): read_table(p, schema) for p in sorted(Path(folder).glob(f"{kind}_*.csv"))}


def sweep_results(folder: Path, correctness: Schema, bench: Schema, hint: str) -> tuple[dict, dict]:
    """An attention sweep's result sets (common.attention_sweep): every correctness_<tag>.csv, then every
    bench_<tag>.csv, checked, by tag; a folder with neither is refused (what would the report show?)."""
    corrs, benches = tables_by_tag(folder, "correctness", correctness), tables_by_tag(folder, "bench", bench)
    if not benches and not corrs:
        raise BadResults(f"no correctness_*.csv or bench_*.csv in {folder}; {hint}")
    return corrs, benches


def read_tables(folder: str | Path, pattern: str, schema: Schema, required: bool = True,
                hint: str = "", source: str = "") -> pd.DataFrame:
    """Every `pattern` match in `folder`, checked and concatenated (files in name order).

    No match is an error when `required` (what would the report show?), else an empty frame. `source`
    names a column that gets each row's file stem (scaling_h100_ws8): which result set a row belongs to."""
    folder = results_folder(folder, hint)
    files = sorted(folder.glob(pattern))
    if not files:
        if required:
            raise BadResults(f"no {pattern} in {shown(folder)}" + (f"; {hint}" if hint else ""))
        return pd.DataFrame()
    frames = [read_table(f, schema) for f in files]
    if source:
        frames = [df.assign(**{source: f.stem}) for df, f in zip(frames, files)]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def guard_report(main: Callable[..., int | None]) -> Callable[..., int]:
    """Decorate a report generator's main(): BadResults becomes one line on stderr and exit code 2."""

    @wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs) or 0
        except BadResults as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(BAD_INPUT)

    return wrapper
