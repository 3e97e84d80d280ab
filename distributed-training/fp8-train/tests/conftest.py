"""Shared tiny runs for fp8-train's tests: a clean FP8 run and the same run with injected faults.

Lab modules are imported inside the fixtures: the repository's root conftest puts this lab on
sys.path only while its tests are collected and run, after this file is loaded.
"""

from pathlib import Path
from types import SimpleNamespace

import pytest

TINY = ["--gpu", "cpu", "--batch", "4", "--seq-len", "16", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
        "--lr", "1e-2", "--warmup", "1", "--val-batches", "1", "--data-size", "256K", "--log-every", "1000",
        "--threads", "1", "--no-progress", "--promote", "replace"]
DEMO = ["--runs", "fp8:emulated", "--steps", "28", "--val-every", "7", "--stats-every", "2", "--health-every", "4",
        "--alert-warmup", "6", "--scale-window", "4", "--ckpt-every", "5", "--dashboard-every", "10"]
FAULTS = ["--inject", "spike@12,nan@16,overflow@20", "--on-nan", "rollback"]


def _run_tiny(tmp: Path, name: str, *extra: str) -> Path:
    import train
    out = tmp / "results" / name
    assert train.main(TINY + DEMO + ["--results", str(out), "--ckpt-dir", str(tmp / "ckpt" / name), *extra]) == 0
    return out


@pytest.fixture(scope="session")
def tiny():
    """The tiny-run arguments and a function that trains one into a folder."""
    return SimpleNamespace(TINY=TINY, DEMO=DEMO, FAULTS=FAULTS, run=_run_tiny)


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory) -> tuple[Path, Path]:
    """(clean result folder, faulted result folder) of the same tiny FP8 run."""
    tmp = tmp_path_factory.mktemp("demo")
    return _run_tiny(tmp, "clean"), _run_tiny(tmp, "faults", *FAULTS)
