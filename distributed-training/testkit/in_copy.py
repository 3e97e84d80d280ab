"""Entry points that read files at fixed places of the checkout (the guide, `plan --from-run`), damaged through the
entry point itself without touching the checkout: copy_labs(dest) copies distributed-training/ (code and committed
results), and in_child(labs, "testkit.in_copy:mains_problems", calls) runs each entry point of `calls` (its main,
named "module:function", and argv) in a fresh Python whose `common`, `planner` and labs are the copy's, in-process
there: once clean, then once per damaged input (testkit.reports' damage_problems; Capture stands in for pytest's
capsys). What comes back is JSON.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from .reports import damage_problems, inputs_of, opened_during

LABS = Path(__file__).resolve().parents[1]
_SKIP = shutil.ignore_patterns("__pycache__", ".pytest_cache", "runs", "checkpoints", "*.png", "*.pt")


def copy_labs(dest: Path) -> Path:
    """distributed-training/ copied to `dest`: code, templates and committed results (no plots, caches or runs)."""
    shutil.copytree(LABS, dest, ignore=_SKIP, symlinks=True)
    return dest


def in_child(labs: Path, call: str, *args: Any, timeout: float = 300, path: tuple[str, ...] = ()) -> Any:
    """`call` ("module:function") of the copy `labs`, called with `args` in a fresh Python there (cwd, PYTHONPATH:
    the copy, then its folders `path`, e.g. a lab whose scripts an entry point runs); its return value, through
    JSON."""
    module, function = call.split(":")
    code = (f"import json, sys\nfrom {module} import {function}\n"
            f"print(json.dumps({function}(*json.loads(sys.argv[1]))))")
    r = subprocess.run([sys.executable, "-c", code, json.dumps(args)], cwd=labs, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(labs), *(str(labs / p) for p in path)])},
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


class Capture:
    """pytest's capsys outside pytest: while active, stdout and stderr go to buffers; readouterr() empties them."""

    def __enter__(self) -> "Capture":
        self._saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        return self

    def __exit__(self, *exc) -> None:
        sys.stdout, sys.stderr = self._saved

    def readouterr(self) -> tuple[str, str]:
        out, err = sys.stdout.getvalue(), sys.stderr.getvalue()
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        return out, err


def entry_problems(run: Callable[[], Any], watch=(), discover: Callable[[], Any] | None = None) -> dict[str, Any]:
    """run() on the copy's committed results (or discover(), where a cheaper call opens the same files: the guide's
    inputs.check), then run() on each results file that opened damaged, one way each (damage_problems: one line naming
    the file relative to the copy, exit 2, nothing on stdout, nothing under `watch` changed): {"inputs": the files,
    "cases": each "file kind", "problems": what went otherwise}."""
    labs = Path.cwd()
    with Capture() as cap:
        code, opened = opened_during(discover or run)
        out, err = cap.readouterr()
        code = code.code if isinstance(code, SystemExit) else code
        if code not in (0, None):
            return {"inputs": [], "cases": [], "problems": [f"fails on the committed results: {code!r} {err[-500:]}"]}
        inputs = [p for p in inputs_of(labs, opened) if "results" in p.relative_to(labs).parts]
        ran: list[str] = []
        problems = damage_problems(run, inputs, cap, watch=watch, every_kind=False, ran=ran,
                                   named=lambda p: str(p.relative_to(labs)))
    return {"inputs": [str(p.relative_to(labs)) for p in inputs], "cases": ran, "problems": problems}


def _named(target: str) -> Callable:
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def mains_problems(calls: list[list]) -> list[dict[str, Any]]:
    """entry_problems of each [main, argv, watch] or [main, argv, watch, discover] in turn (one child, one start-up
    for several entry points): main is the entry point a make target runs, named "module:function" (`make guide`:
    "planner.guide.guide:main"), discover a function of no arguments that opens the files main reads."""
    out = []
    for target, argv, watch, *discover in calls:
        main = _named(target)
        out.append(entry_problems(lambda: main(argv), watch, _named(discover[0]) if discover else None))
    return out



def report_problems(main: Callable[[list[str]], Any], results: str, out: str, kinds: list[str]) -> dict[str, Any]:
    """A lab's report (`make <lab>-report`: its report.py's main, called in a child whose path starts with the lab's
    folder, as when run as a script: each lab has a `report` module) on `results`, then on one of the inputs it opened
    damaged per kind of `kinds` (chosen_cases): one line naming the file, exit 2, nothing on stdout, nothing under
    `out`'s folder changed. {"clean": the clean run's error or "", "cases", "problems"}."""
    argv = ["--results", results, "--out", out]
    with Capture() as cap:
        code, opened = opened_during(lambda: main(argv))
        _, err = cap.readouterr()
        code = code.code if isinstance(code, SystemExit) else code
        if code not in (0, None):
            return {"clean": f"exit {code!r}: {err[-1500:]}", "cases": [], "problems": []}
        ran: list[str] = []
        problems = damage_problems(lambda: main(argv), inputs_of(Path(results), opened), cap,
                                   watch=[Path(out).parent], ran=ran, kinds=kinds)
    return {"clean": "", "cases": ran, "problems": problems}
