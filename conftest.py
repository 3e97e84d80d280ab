"""Test-suite glue: one pytest run over every lab, although labs reuse module names.

Each lab is a folder of scripts (bench.py, report.py, ...) that import each other by plain
name, as they do when run from their own folder. Two labs may both have a report.py, so while
pytest collects or runs one lab's tests, that lab's folder (and its tests/ folder, for helpers
such as a stand-in library, as pytest's default import mode would) is first on sys.path and only
its own modules are in sys.modules; the other labs' modules are parked and restored on return.
`import common` always resolves to distributed-training/common itself, never a lab's symlink;
`common`, `planner` and `testkit` (the tests' support) are packages shared by every lab, imported by
name, never parked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

LABS = (Path(__file__).parent / "distributed-training").resolve()
sys.path.insert(0, str(LABS))

_parked: dict[Path, dict[str, object]] = {}
_active: Path | None = None


def _lab_of(path) -> Path | None:
    try:
        rel = Path(path).resolve().relative_to(LABS)
    except (ValueError, OSError):
        return None
    if len(rel.parts) < 2 or rel.parts[0] in ("common", "planner", "testkit"):
        return None
    return LABS / rel.parts[0]


def _folders(lab: Path) -> list[str]:
    return [str(lab), str(lab / "tests")]


def _activate(lab: Path) -> None:
    global _active
    if lab == _active:
        return
    if _active is not None:
        leaving = {n: m for n, m in list(sys.modules.items())
                   if getattr(m, "__file__", None) and _lab_of(m.__file__) == _active}
        for name in leaving:
            del sys.modules[name]
        _parked[_active] = leaving
        for folder in _folders(_active):
            sys.path.remove(folder)
    sys.path[:0] = _folders(lab)
    sys.modules.update(_parked.pop(lab, {}))
    _active = lab


def pytest_ignore_collect(collection_path: Path, config):
    # Every lab's `common` is a symlink to ../common: collect common's tests once, not once per lab.
    return True if collection_path.is_symlink() else None


def pytest_pycollect_makemodule(module_path: Path, parent):
    lab = _lab_of(module_path)
    if lab is not None:
        _activate(lab)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    lab = _lab_of(item.path)
    if lab is not None:
        _activate(lab)


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
