"""Where parallel-3d's runners write: a run folder per launch (common/runs.py), merged into results/ by key.

The lab's results are unions of launches: `make parallel-3d` runs the one-process baseline, then a
TP x PP x DP launch; another day adds other degrees, a GPU node adds its preset's files. So each launch
writes into its own run folder under the lock, as every lab does,

    train.py        runs/<preset>_ws<N>[_n<nodes>]_tp<t>pp<p>dp<d>/   runs_<preset>.csv, comms_<preset>.csv
    activations.py  runs/activations_<preset>_ws<N>/                  activations_<preset>.csv
    at_scale.py     runs/at_scale/                                    at_scale.csv, at_scale_terms.csv

(file names as in results/), and a complete launch of the preset's measurement settings is published by
merging: its rows replace the rows with the same key in results/ (same degrees and variant, world size
and nodes; same TP degree, recompute and shape; same study) and every other row stays. Degrees, schedule
variants, the TP degrees of the activation study and the studies chosen are what a launch measures, not
how: they never make it an experiment. Any other measurement flag does (--steps, --model, --stage-layers,
...): the run stays in runs/ and says how to publish it. --promote replace|merge|no as everywhere.
--resume continues an interrupted launch's folder. A fresh launch keeps an unpublished earlier one as
runs/<name>@<UTC time>/.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from common.config import config_dict
from common.dist import fail, from_rank0
from common.results import SchemaMismatch, check_resume
from common.runs import RunError, RunFolder, check_free, check_resumable, results_path

LAB = Path(__file__).resolve().parent
T = TypeVar("T")
PROMOTE_HELP = ("when complete: auto (merge the rows into results/ for a run of the preset's measurement settings, "
                "keep an experiment in runs/), merge, replace or no")


def results_dir(results: str) -> Path:
    return results_path(results, LAB)


def saved_config(cfg: Any) -> dict:
    """The config saved beside the CSVs: no machine paths (results are committed)."""
    return {k: v for k, v in config_dict(cfg).items() if k != "results"}


def check_before_launch(run_dir: Path, resume: bool, files: Iterable[tuple[str, list[str]]], config: dict,
                        ignore: Iterable[str]) -> None:
    """Before any rank starts (make's check pass, or the plain process itself): the run folder is free; a --resume
    has one whose CSVs have this run's columns and config. RunError/SchemaMismatch: one line, exit 2."""
    check_free(run_dir)
    if resume:
        check_resumable(run_dir)
        for name, columns in files:
            check_resume(run_dir / name, columns, config, ignore)


def open_on_rank0(run_dir: Path, results: Path, resume: bool, is_main: bool,
                  writers: Callable[[RunFolder], T]) -> tuple[RunFolder | None, T | None]:
    """Rank 0 opens (and locks) the folder and makes its writers; every rank learns whether that worked (exit 2
    on every rank, one line, if not). Other ranks get (None, None)."""
    folder, made, error = None, None, None
    if is_main:
        try:
            folder = RunFolder.open(run_dir, results, "resume" if resume else "fresh")
            for note in folder.notes:
                print(note, file=sys.stderr)
            made = writers(folder)
        except (RunError, SchemaMismatch) as e:
            error = str(e)
            if folder is not None:
                folder.close()
    if (error := from_rank0(error)) is not None:
        fail(error, code=2)
    return folder, made


def finish(folder: RunFolder | None, complete: bool, changed: list[str], promote: str) -> None:
    """Record the outcome; a complete preset run is merged into results/ (auto), an experiment stays."""
    if folder is None:
        return
    how = "merge" if promote == "auto" and not changed else promote
    for line in folder.finish(complete=complete, changed=changed, promote=how):
        print(line, flush=True)
