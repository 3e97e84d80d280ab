"""Entry points that read files at fixed places of the checkout (the guide, `plan --from-run`, README's findings),
damaged through the entry point itself without touching the checkout: copy_labs(dest) copies distributed-training/
(code and committed results), in_child(labs, "testkit.in_copy:guide_problems", ...) calls a function of this module
in a fresh Python whose `common`, `planner` and labs are the copy's, and returns what it returned (JSON). In the
child, the entry point runs in-process (its main(argv)), once clean and once per damaged input (testkit.reports'
damage_problems; Capture stands in for pytest's capsys).
"""

from __future__ import annotations

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


def in_child(labs: Path, call: str, *args: Any, timeout: float = 300) -> Any:
    """`call` ("module:function") of the copy `labs`, called with `args` in a fresh Python there (cwd, PYTHONPATH);
    its return value, through JSON."""
    module, function = call.split(":")
    code = (f"import json, sys\nfrom {module} import {function}\n"
            f"print(json.dumps({function}(*json.loads(sys.argv[1]))))")
    r = subprocess.run([sys.executable, "-c", code, json.dumps(args)], cwd=labs, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(labs)}, timeout=timeout)
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


def entry_problems(run: Callable[[], Any], watch=(), every_kind: bool = False) -> dict[str, Any]:
    """run() on the copy's committed results, then on each results file it opened damaged (damage_problems: one
    line naming the file relative to the copy, exit 2, nothing on stdout, nothing under `watch` changed):
    {"inputs": the files, "cases": each "file kind", "problems": what went otherwise}."""
    labs = Path.cwd()
    with Capture() as cap:
        code, opened = opened_during(run)
        out, err = cap.readouterr()
        code = code.code if isinstance(code, SystemExit) else code
        if code not in (0, None):
            return {"inputs": [], "cases": [], "problems": [f"fails on the committed results: {code!r} {err[-500:]}"]}
        inputs = [p for p in inputs_of(labs, opened) if "results" in p.relative_to(labs).parts]
        ran: list[str] = []
        problems = damage_problems(run, inputs, cap, watch=watch, every_kind=every_kind, ran=ran,
                                   named=lambda p: str(p.relative_to(labs)))
    return {"inputs": [str(p.relative_to(labs)) for p in inputs], "cases": ran, "problems": problems}


# ---- the entry points, each called in a child on a copy (planner/tests/test_entry_points.py) -------------------

def guide_problems(out: str) -> dict[str, Any]:
    """`make guide` (python -m planner.guide), its guide written to `out`."""
    from planner.guide import guide
    return entry_problems(lambda: guide.main(["--out", str(Path(out) / "PARALLELISM_GUIDE.md")]), watch=[out])


def from_run_problems(file: str, run: str | None = None) -> dict[str, Any]:
    """`make plan ARGS="--from-run <file> [--run NAME]"` (python -m planner.plan)."""
    from planner import plan
    return entry_problems(lambda: plan.main(["--from-run", file, *(["--run", run] if run else [])]))
