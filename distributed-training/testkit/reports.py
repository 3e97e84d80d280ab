"""A lab's report under test: its opening findings (report_opening), its refusal of a damaged results folder
(expect_report_refuses), and every committed input it reads damaged every way, each of which must be one line
and exit 2 (damaged_inputs_problems: every lab's tests/test_damaged_inputs.py).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from common.findings import read_block

from .bad_input import expect_bad_input


def report_opening(report_main: Callable[[list[str]], Any], tmp_path) -> dict[str, str]:
    """A lab's report generated from tmp_path/results into tmp_path/REPORT.md: its opening findings by label,
    after checking that they come first (within the first 15 lines, under "## What we found")."""
    out = tmp_path / "REPORT.md"
    assert report_main(["--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines.index("<!-- /findings -->") < 15 and "## What we found" in lines[:4]
    return {f.label: f.text for f in read_block(out)}


def expect_report_refuses(report_main: Callable[[list[str]], Any], lab, damage: Callable, needle: str, tmp_path,
                          capsys) -> str:
    """A copy of `lab`/results damaged by damage(folder): the report generator says so in one line, exit 2."""
    results = tmp_path / "results"
    shutil.copytree(lab / "results", results)
    damage(results)
    return expect_bad_input(lambda: report_main(["--results", str(results), "--out", str(tmp_path / "REPORT.md")]),
                            needle, capsys, watch=[tmp_path])


# ---- every committed input of a report, damaged every way: one line, exit 2 (tests/test_damaged_inputs.py)

DAMAGES = ("cut", "binary", "empty", "one-byte", "wrong-type", "nan", "bom", "repeated-row")
_OPENED: list[str] | None = None  # while not None, every file this process opens (an audit hook, installed once)


def _audit(event: str, args) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.path.realpath(os.fsdecode(args[0])))


def opened_during(call: Callable[[], Any]) -> tuple[Any, set[str]]:
    """call()'s result (or the SystemExit it raised) and the real paths of every file it opened."""
    global _OPENED
    if not getattr(opened_during, "hooked", False):
        sys.addaudithook(_audit)
        opened_during.hooked = True
    _OPENED = []
    try:
        try:
            result = call()
        except SystemExit as e:
            result = e
    finally:
        seen, _OPENED = set(_OPENED), None
    return result, seen


def _numeric_cells(raw: bytes, replacement: str, floats_only: bool, keep: tuple[str, ...] = ()) -> bytes | None:
    """A CSV with the numbers of its first data row replaced (only those that are not whole numbers, where
    `floats_only` and the row has such: a NaN where a measurement was), but in the columns `keep`; None if that
    row holds no other number."""
    text = raw.decode("utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if len(rows) < 2:
        return None

    def number(cell: str, whole_too: bool) -> bool:
        try:
            float(cell)
        except ValueError:
            return False
        return whole_too or not cell.strip().lstrip("+-").isdigit()

    cells = [(j, c) for j, c in enumerate(rows[1]) if j < len(rows[0]) and rows[0][j] not in keep]
    whole_too = not (floats_only and any(number(c, False) for _, c in cells))
    hits = [j for j, cell in cells if number(cell, whole_too)]
    if not hits:
        return None
    for j in hits:
        rows[1][j] = replacement
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def damaged(raw: bytes, suffix: str, kind: str, observed: tuple[str, ...] = ()) -> bytes | None:
    """`raw` (a .csv, .json or .md the labs wrote) damaged as `kind` (one of DAMAGES); None where the damage
    means nothing for that kind of file (a cut or one-byte text file is still text). A NaN is never put in the
    `observed` columns, where it is a measurement the report shows as such (a diverged loss)."""
    text_only = suffix == ".md"
    if kind == "binary":
        return b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe" + raw[:64]
    if kind == "empty":
        return b""
    if kind == "bom":
        return b"\xef\xbb\xbf" + raw
    if text_only:
        return None
    if kind == "one-byte":
        return b"x"
    if kind == "cut":  # in the middle of the last row (a run killed while writing it), or of the JSON text
        body = raw.rstrip(b"\n")
        start = body.rfind(b"\n") + 1 if suffix == ".csv" else 0
        return body[:start + max(1, (len(body) - start) // 2)]
    if suffix == ".json":
        if kind == "repeated-row":
            return None
        return b"[" + raw + b"]" if kind == "wrong-type" else raw.replace(b"{", b'{"damaged": NaN, ', 1)
    if kind == "repeated-row":  # the first row twice: two runs' rows mixed, or a resume that wrote one again
        lines = raw.splitlines(keepends=True)
        return raw + lines[1] if len(lines) > 1 and raw.endswith(b"\n") else None
    return _numeric_cells(raw, "abc" if kind == "wrong-type" else "nan", kind == "nan", observed)


def damaged_inputs_problems(report_main: Callable[[list[str]], Any], lab, tmp_path, capsys,
                            observed: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """Every input the report reads in a copy of `lab`/results (found by watching a clean run open them), damaged:
    the report must exit 2 with one line on stderr that names the file, and print nothing else. The first file of
    each name (steps.csv, sweep_cpu_ws4.csv, ...) is damaged each way of DAMAGES in turn, every other file of that
    name one way, the next in DAMAGES each time (the same reader, and every file still checked: fp8-train's many
    folders would take minutes otherwise). `observed`: per file name, the columns where the report shows NaN as
    NaN (common.csvread.Schema.nonfinite). Returns what went otherwise, one entry per case ([] when all held)."""
    results = tmp_path / "results"
    shutil.copytree(Path(lab) / "results", results)
    argv = ["--results", str(results), "--out", str(tmp_path / "REPORT.md")]
    code, opened = opened_during(lambda: report_main(argv))
    capsys.readouterr()
    assert code in (0, None), f"the report fails on the committed results: {code}"
    inputs = sorted(p for p in results.rglob("*") if p.suffix in (".csv", ".json", ".md")
                    and os.path.realpath(p) in opened)
    assert inputs, "the report opened none of its results"
    problems, seen, turn = [], set(), 0
    for path in inputs:
        raw = path.read_bytes()
        kinds = DAMAGES if path.name not in seen else [DAMAGES[turn % len(DAMAGES)]]
        turn += path.name in seen
        seen.add(path.name)
        for kind in kinds:
            bad = damaged(raw, path.suffix, kind, (observed or {}).get(path.name, ()))
            if bad is None or bad == raw:
                continue
            path.write_bytes(bad)
            try:
                code, _ = opened_during(lambda: report_main(argv))
            except Exception as e:  # noqa: BLE001 - a traceback is what this looks for
                code = f"{type(e).__name__}: {str(e)[:120]}"
            finally:
                path.write_bytes(raw)
            out, err = capsys.readouterr()
            code = code.code if isinstance(code, SystemExit) else code
            lines = err.rstrip("\n").split("\n")
            if code != 2 or len(lines) != 1 or out or path.name not in lines[0]:
                problems.append(f"{path.relative_to(results)} {kind}: exit {code!r}, stderr {err[-300:]!r}")
    return problems
