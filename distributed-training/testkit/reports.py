"""A lab's report under test: its opening findings (report_opening), its refusal of a damaged results folder
(expect_report_refuses), and every committed input it reads damaged every way, each of which must be one line
and exit 2 (damaged_inputs_problems: every lab's tests/test_damaged_inputs.py).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from common import csvread
from common.csvread import Schema
from common.findings import read_block

from .bad_input import expect_bad_input, tree_state
from .damage import DAMAGES, damaged


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


# ---- every input an entry point reads, damaged every way: one line, exit 2 (tests/test_damaged_inputs.py) ------

_OPENED: list[str] | None = None  # while not None, every file this process opens (an audit hook, installed once)
SCHEMAS: dict[str, Schema] = {}  # real path -> the fullest schema common.csvread read it with (any opened_during call)


def _audit(event: str, args) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.path.realpath(os.fsdecode(args[0])))


def opened_during(call: Callable[[], Any]) -> tuple[Any, set[str]]:
    """call()'s result (or the SystemExit it raised) and the real paths of every file it opened; the schema each
    CSV was read with goes into SCHEMAS."""
    global _OPENED
    if not getattr(opened_during, "hooked", False):
        sys.addaudithook(_audit)
        opened_during.hooked = True
    parse = csvread._parse

    def recorded(path, schema, *rest):  # a file read twice (its report's schema, a provenance line's): the fuller one
        known = SCHEMAS.get(real := os.path.realpath(path))
        SCHEMAS[real] = max(filter(None, (known, schema)), key=lambda s: (len(s.key), len(s.columns)))
        return parse(path, schema, *rest)

    csvread._PASSED.clear()  # a file kept from an earlier read would not reach _parse, and its schema not SCHEMAS
    _OPENED, csvread._parse = [], recorded
    try:
        try:
            result = call()
        except SystemExit as e:
            result = e
    finally:
        seen, _OPENED, csvread._parse = set(_OPENED), None, parse
    return result, seen


def inputs_of(root: Path, opened: set[str]) -> list[Path]:
    """The results files (.csv, .json, .md) under `root` among `opened`, sorted."""
    return sorted(p for p in Path(root).rglob("*") if p.suffix in (".csv", ".json", ".md") and p.is_file()
                  and os.path.realpath(p) in opened)


def _cases(inputs: list[Path], every_kind: bool, observed: dict[str, tuple[str, ...]]):
    """(path, kind, damaged bytes) for each case: with `every_kind`, the first file of each name damaged each way of
    DAMAGES and every other file of that name one way, else every file one way; the one way is the next kind in
    DAMAGES each time that means something for the file (a JSON file has no foreign columns)."""
    seen, turn = set(), 0
    for path in inputs:
        raw = path.read_bytes()
        schema = SCHEMAS.get(os.path.realpath(path))

        def bad(kind: str) -> bytes | None:
            out = damaged(raw, path.suffix, kind, schema, observed.get(path.name, ()))
            return None if out == raw else out

        if every_kind and path.name not in seen:
            yield from ((path, kind, b) for kind in DAMAGES if (b := bad(kind)) is not None)
        else:
            for _ in DAMAGES:
                kind, turn = DAMAGES[turn % len(DAMAGES)], turn + 1
                if (b := bad(kind)) is not None:
                    yield path, kind, b
                    break
        seen.add(path.name)


def chosen_cases(inputs: list[Path], kinds) -> Iterator[tuple[Path, str, bytes]]:
    """(path, kind, damaged bytes) for each of `kinds`: the first CSV of `inputs` the kind means something for, the
    files turning over (a representative input per damage class, where damaging every input every way is the
    labs' own tests/test_damaged_inputs.py)."""
    csvs = [p for p in inputs if p.suffix == ".csv"] or list(inputs)
    for i, kind in enumerate(kinds):
        for path in csvs[i % len(csvs):] + csvs[:i % len(csvs)]:
            raw = path.read_bytes()
            bad = damaged(raw, path.suffix, kind, SCHEMAS.get(os.path.realpath(path)))
            if bad is not None and bad != raw:
                yield path, kind, bad
                break


def _watched(watch, damaged: Path) -> list:
    """tree_state of each folder or file in `watch`, less the file the case damages (and restores) itself."""
    return [[e for e in tree_state(w) if (Path(w) / e[0] if Path(w).is_dir() else Path(w)) != damaged] for w in watch]


def damage_problems(run: Callable[[], Any], inputs: list[Path], capsys,
                    observed: dict[str, tuple[str, ...]] | None = None, watch=(),
                    named: Callable[[Path], str] = lambda p: p.name, every_kind: bool = True,
                    ran: list[str] | None = None, kinds=None) -> list[str]:
    """Each of `inputs` damaged in turn (and restored; _cases says which ways): run() (an entry point's main, in this
    process) must end with exit code 2 and one line on stderr that names the file (`named(path)` in it), print
    nothing on stdout and change nothing under `watch`. `observed`: per file name, columns where a NaN is an
    observation, not damage. `capsys`: pytest's, or testkit.in_copy.Capture. Returns what went otherwise, one entry
    per case ([] when all held); `ran` gets each case ("file kind"). `kinds`: only these damages, one input each
    (chosen_cases)."""
    problems = []
    cases = chosen_cases(inputs, kinds) if kinds is not None else _cases(inputs, every_kind, observed or {})
    for path, kind, bad in list(cases):
        if ran is not None:
            ran.append(f"{path.name} {kind}")
        raw = path.read_bytes()
        before = _watched(watch, path)
        path.write_bytes(bad)
        try:
            code, _ = opened_during(run)
        except Exception as e:  # noqa: BLE001 - a traceback is what this looks for
            code = f"{type(e).__name__}: {str(e)[:120]}"
        finally:
            path.write_bytes(raw)
        out, err = capsys.readouterr()
        code = code.code if isinstance(code, SystemExit) else code
        lines = err.rstrip("\n").split("\n")
        if code != 2 or len(lines) != 1 or out or named(path) not in lines[0]:
            problems.append(f"{path} {kind}: exit {code!r}, stdout {out[-100:]!r}, stderr {err[-300:]!r}")
        elif _watched(watch, path) != before:
            problems.append(f"{path} {kind}: refused, but files changed under {', '.join(map(str, watch))}")
    return problems


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
    inputs = inputs_of(results, opened)
    assert inputs, "the report opened none of its results"
    return [p.replace(f"{results}/", "") for p in damage_problems(lambda: report_main(argv), inputs, capsys, observed)]
