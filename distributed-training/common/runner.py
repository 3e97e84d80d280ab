"""The spine every runner stands on: its run-folder flags, declared once (RunFlags); what it writes, declared once
(RunPlan: the run folder, the results folder it is published into, its tables, its saved config); the check before
any rank starts (check_before_launch); and open_run, the one way a runner opens its run folder, writes into it and
publishes it. common/runs.py holds a run folder's mechanics (the lock, the manifest, atomic promotion); a lab's
presets are functions returning a complete Config, read by common.config.parse_preset.

    @dataclass(frozen=True)
    class Config(RunFlags):                      # --gpu --results --resume --promote, listed apart in --help
        iters: int = field(default=20, metadata={"help": "timed iterations"})

    def main(argv=None) -> int:
        cfg = parse_preset(Config, argv, preset, prog="bench.py")     # flags override the preset --gpu picks
        plan = RunPlan.beside(cfg.results_dir(LAB), f"bench_{tag}", [Table(f"bench_{tag}.csv", COLUMNS, KEY)],
                              config=saved_config(cfg))
        try:
            check_before_launch(plan, cfg)       # the launcher's check pass, or the one process of a run
        except ValueError as e:                  # RunError and SchemaMismatch are ValueErrors
            fail(str(e), 2)
        with distributed() as env, open_run(plan, cfg, env, provenance(env, "1"), changed) as run:
            (bench,) = run.writers               # rank 0's writers; NoWriter on every other rank
            for row in todo:
                bench.write(measure(row))
            run.complete = all(bench.done(r) for r in todo)     # True unless the body says otherwise
        return 0

What open_run does (common/runs.py says what each word means):
    open       rank 0 takes the folder's lock and prepares it: fresh (an unpublished earlier run is set aside),
               resume (continue it: its files must have this run's columns and config) or append (keep it, make it
               if missing); prints its notes on stderr and makes the plan's writers. Every rank learns whether that
               worked; if not, each exits 2 with rank 0's one line.
    complete   (leaving the block) the outcome is recorded and published as --promote says: auto publishes a run of
               the preset's measurement settings (`changed` empty) by replacing results/, or by merging its rows
               where a lab's results are unions of launches (preset_publishes="merge"); an experiment stays in
               runs/ and says how to publish it. run.complete = False records it incomplete (results/ unchanged;
               --resume continues); None leaves the folder for a later launch of the same sweep (its lock released,
               nothing recorded: fsdp-scaling's launches at 1, 2, 4 ... ranks fill one folder).
    interrupt  an exception in the block (Ctrl-C, a SIGTERM turned exception, a lost peer, an exit 2 from inside)
               records the run incomplete, leaves results/ unchanged and goes on to common.failures.entrypoint, which
               tells it in one line with its exit code (130, 75, 4, ...).

A runner of one process passes env=None. A run that spans several launches (fsdp-scaling's sweep: one torchrun
launch per world size) is prepared once by hold_open, which holds its folder's lock across the launches; each launch
then opens the folder with open_run(mode="append"). fp8-train's runners stand on the same calls: RunPlan names its target
folder (results/<preset>_ws<N>) and run folder directly, and run.writers are the writers of its Writers record.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Sequence

from .config import config_dict
from .runs import PROMOTE_CHOICES, Lock, RunError, RunFolder, check_free, check_resumable, experiment_flags, hold, \
    results_path, run_dir_for

if TYPE_CHECKING:
    from .dist import DistInfo
    from .results import NoWriter, ResultsWriter

RUN_GROUP = "the run folder (the same flags in every lab; docs/results.md)"


def _run_flag(default: Any, text: str, **kw) -> Any:
    return field(default=default, metadata={"help": text, "group": RUN_GROUP, **kw})


@dataclass(frozen=True, kw_only=True)
class RunFlags:
    """The flags every runner takes, declared here once: a lab's Config derives from this (`class Config(RunFlags)`).
    `results` is a machine path and stays out of the saved config (saved_config)."""

    gpu: str = _run_flag("auto", "hardware preset (common/hardware.py): auto = this machine's, cpu = CPU + gloo, "
                                 "h100, h200, ...")
    results: str = _run_flag("", "the results folder complete runs are published into (each run writes into "
                                 "runs/<name>/ beside it first); empty = results/ in this lab")
    resume: bool = _run_flag(False, "continue this run's interrupted run folder (runs/): rows already measured are "
                                    "kept and skipped")
    promote: str = _run_flag("auto", "when complete: auto (publish a run of the preset's measurement settings, keep "
                                     "an experiment in runs/), replace, merge or no", choices=PROMOTE_CHOICES)

    def results_dir(self, lab: Path, *default: str) -> Path:
        """Where this run publishes: --results, else <lab>/results[/default...]."""
        return results_path(self.results, lab, *default)


# Never a measurement: a run differing from its preset only in these is the preset's run. --gpu is not among them:
# a runner compares a run with the preset --gpu picks, so it differs only where a runner's preset names the GPU it
# plans for (parallel-3d's at-scale study), and there another GPU is an experiment.
RUN_FLAGS = ("results", "resume", "promote")
RESUME_MAY_CHANGE = ("resume", "promote", "results")  # what a --resume may give otherwise than the run it continues


def saved_config(cfg: Any, drop: Sequence[str] = ()) -> dict[str, Any]:
    """The resolved config saved beside the CSVs: no machine paths (results are committed)."""
    return {k: v for k, v in config_dict(cfg).items() if k not in ("results", *drop)}


def experiment(cfg: RunFlags, preset: RunFlags, operational: Sequence[str] = ()) -> list[str]:
    """The measurement flags in which `cfg` differs from `preset` (the preset's run, resolved as cfg is), leaving out
    the run flags and the lab's own `operational` ones: none, the run publishes; any, it is an experiment
    (common.runs.experiment_flags)."""
    return experiment_flags(cfg, preset, (*RUN_FLAGS, *operational))


class Table(NamedTuple):
    """One CSV a run writes: its file name (the same in the run folder and in results/), columns and row key."""

    name: str
    columns: Sequence[str]
    key: Sequence[str]
    config: bool = True  # the saved config beside it (<name>.config.json), held equal on --resume


class RunPlan(NamedTuple):
    """Where a run writes and what: checked before launch, opened by open_run."""

    folder: Path  # the run folder (runs/<name>/)
    target: Path  # the results folder a complete run is published into
    tables: tuple[Table, ...] = ()
    config: dict[str, Any] | None = None  # the resolved config saved beside the tables that carry one
    ignore: tuple[str, ...] = RESUME_MAY_CHANGE  # config keys a --resume may change

    @classmethod
    def beside(cls, results: Path, name: str, tables: Sequence[Table] = (), config: dict[str, Any] | None = None,
               ignore: Sequence[str] = RESUME_MAY_CHANGE) -> "RunPlan":
        """The plan of a run published into `results`, written first into runs/<name>/ beside it."""
        return cls(run_dir_for(results, name), Path(results), tuple(tables), config, tuple(ignore))


def _mode(flags: RunFlags, mode: str | None) -> str:
    return mode or ("resume" if flags.resume else "fresh")


def check_before_launch(plan: RunPlan, flags: RunFlags, mode: str | None = None) -> None:
    """What can be checked before any rank starts, in the launcher's check pass or the one process of a run: the run
    folder is free, and a resume has a folder whose files have this run's columns and config. RunError or
    SchemaMismatch (ValueErrors: one line, exit 2, nothing written). Inside torchrun's ranks it does nothing: rank 0
    checks the same under the lock when open_run opens the folder."""
    from .dist import launched_by_torchrun
    from .results import check_resume
    if launched_by_torchrun():
        return
    check_free(plan.folder)
    if _mode(flags, mode) == "resume":
        check_resumable(plan.folder)
        for t in plan.tables:
            check_resume(plan.folder / t.name, t.columns, plan.config if t.config else None, plan.ignore)


@dataclass
class Run:
    """An open run: rank 0's folder and writers (None and NoWriters on the other ranks), and its outcome."""

    folder: RunFolder | None
    writers: tuple[ResultsWriter | NoWriter, ...]
    complete: bool | None = True  # True: record and publish; False: record incomplete; None: leave for a later launch

    @property
    def path(self) -> Path | None:
        return self.folder.path if self.folder is not None else None


@contextmanager
def open_run(plan: RunPlan, flags: RunFlags, env: DistInfo | None = None, provenance: dict[str, Any] | None = None,
             changed: Sequence[str] = (), *, mode: str | None = None,
             preset_publishes: str = "replace") -> Iterator[Run]:
    """Open the plan's run folder on rank 0 (every rank learns whether it worked: exit 2 with one line if not), yield
    the Run, and on leaving record and publish it as the module docstring says. `changed`: the run's experiment
    flags (`experiment`); `mode`: fresh/resume/append (default: resume under --resume, else fresh)."""
    from .dist import fail, from_rank0
    from .results import NoWriter, SchemaMismatch
    folder, writers, error = None, None, None
    if env is None or env.is_main:
        try:
            folder = RunFolder.open(plan.folder, plan.target, _mode(flags, mode))
            for note in folder.notes:
                print(note, file=sys.stderr, flush=True)
            writers = tuple(folder.writer(t.name, t.columns, t.key, provenance or {},
                                          config=plan.config if t.config else None, config_ignore=plan.ignore)
                            for t in plan.tables)
        except (RunError, SchemaMismatch) as e:
            error = str(e)
            if folder is not None:
                folder.close()
    if env is not None:
        error = from_rank0(error)
    if error is not None:
        fail(error, 2)
    run = Run(folder, writers or tuple(NoWriter() for _ in plan.tables))
    try:
        yield run
    except BaseException:
        if folder is not None:
            folder.finish(complete=False, changed=list(changed))
        raise
    if folder is None:
        return
    if run.complete is None:
        folder.close()
        return
    promote = preset_publishes if flags.promote == "auto" and not changed else flags.promote
    for line in folder.finish(complete=run.complete, changed=list(changed), promote=promote):
        print(line, flush=True)


def hold_open(plan: RunPlan, flags: RunFlags, then: Sequence[str], nnodes: int = 1) -> int:
    """A run that spans several launches, prepared once: check it (check_before_launch), prepare its folder (fresh
    unless --resume) and run `then`, the launches, holding the folder's lock until they end (common.runs.hold). Each
    launch opens the folder with open_run(mode="append") under that lock, the last one publishes it, and a second
    run is refused whichever launch the first is in; results/ is not touched here. In a Slurm job's ranks phase
    (DT_LAUNCH_PHASE=ranks, common/launch.py) the job's check phase has checked and prepared it: this only holds
    the lock (on one node; across nodes each launch's rank 0 takes it). Returns the launches' exit code (with no
    `then`, 0: the folder prepared and its lock released)."""
    if os.environ.get("DT_LAUNCH_PHASE") == "ranks":
        if nnodes > 1:
            return hold(None, then) if then else 0
        lock = Lock(plan.folder)
        lock.acquire()
    elif flags.resume:
        check_before_launch(plan, flags)
        lock = Lock(plan.folder)
        lock.acquire()
    else:
        check_before_launch(plan, flags)
        folder = RunFolder.open(plan.folder, plan.target, "fresh")
        for note in folder.notes:
            print(note, file=sys.stderr)
        lock = folder.lock
    if then:
        return hold(lock, then)
    lock.release()
    return 0
