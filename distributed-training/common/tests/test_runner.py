"""The spine every runner stands on: one declaration of the run flags (listed apart in --help), presets as the
defaults the command line overrides, the check before launch, and open_run's outcomes: a preset run published, an
experiment kept, an interrupted run recorded and results/ untouched, a launch left for the next, a bad resume refused
on every rank in one line."""

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from common.config import build_parser, parse_preset
from common.runner import RunFlags, RunPlan, Table, check_before_launch, experiment, hold_open, open_run, saved_config
from common.runs import RunError, read_manifest
from testkit import run_ranks


@dataclass(frozen=True)
class Cfg(RunFlags):
    iters: int = field(default=0, metadata={"help": "timed iterations"})
    model: str = field(default="tiny", metadata={"help": "model size"})

    def __post_init__(self):
        if self.iters < 1:
            raise ValueError(f"--iters must be >= 1, got {self.iters}")


def cpu(model: str = "tiny") -> Cfg:
    return Cfg(gpu="cpu", iters=3 if model == "tiny" else 2, model=model)


def preset(gpu: str = "auto", model: str = "tiny") -> Cfg:
    if gpu not in ("auto", "cpu", "h100"):
        raise ValueError(f"unknown GPU preset {gpu!r}")
    return cpu(model) if gpu in ("auto", "cpu") else replace(cpu(model), gpu="h100", iters=20)


TABLE = Table("rows.csv", ["op", "time_us"], ["op"])


def _plan(tmp_path, config=None) -> RunPlan:
    return RunPlan.beside(tmp_path / "results", "rows_cpu_ws1", [TABLE], config=config or {"iters": 3})


def test_the_run_flags_are_declared_once_and_listed_apart_in_help():
    text = build_parser(Cfg).format_help()
    group = text[text.index("the run folder"):]
    assert all(f"--{name}" in group for name in ("gpu", "results", "resume", "promote"))
    assert "--iters" not in group and "--iters" in text
    assert saved_config(cpu()) == {"gpu": "cpu", "resume": False, "promote": "auto", "iters": 3, "model": "tiny"}


def test_flags_override_the_preset_their_keys_choose(capsys):
    assert parse_preset(Cfg, [], preset, keys=("gpu", "model")) == cpu()  # --gpu auto: this machine's preset
    assert parse_preset(Cfg, ["--gpu", "h100"], preset, keys=("gpu", "model")).iters == 20
    assert parse_preset(Cfg, ["--model", "small", "--iters", "9"], preset, keys=("gpu", "model")) == \
        Cfg(gpu="cpu", iters=9, model="small")
    with pytest.raises(SystemExit) as e:  # --help shows the chosen preset's values
        parse_preset(Cfg, ["--model", "small", "--help"], preset, keys=("gpu", "model"))
    assert e.value.code == 0 and "(default: 2)" in capsys.readouterr().out
    for argv, needle in ((["--gpu", "tpu"], "unknown GPU preset 'tpu'"), (["--iters", "x"], "invalid int value")):
        with pytest.raises(SystemExit) as e:
            parse_preset(Cfg, argv, preset, keys=("gpu",), prog="bench.py")
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and needle in err[0] and err[0].startswith("bench.py: error:")
    assert experiment(Cfg(gpu="cpu", iters=3, resume=True, results="/x"), cpu()) == []
    assert experiment(Cfg(gpu="cpu", iters=4), cpu()) == ["--iters"]


def test_a_preset_run_is_published_and_an_experiment_kept(tmp_path, capsys):
    plan = _plan(tmp_path)
    with open_run(plan, cpu(), provenance={}) as run:
        (rows,) = run.writers
        rows.write({"op": "a", "time_us": 1.5})
    assert (tmp_path / "results" / "rows.csv").read_text().startswith("op,time_us,")
    assert "published 2 file(s)" in capsys.readouterr().out  # rows.csv and its config
    with open_run(plan, cpu(), provenance={}, changed=["--iters"]) as run:
        run.writers[0].write({"op": "b", "time_us": 2.0})
    assert "experiment (--iters differ" in capsys.readouterr().out
    assert "b," not in (tmp_path / "results" / "rows.csv").read_text()
    with open_run(plan, replace(cpu(), resume=True), provenance={}, preset_publishes="merge") as run:
        assert run.writers[0].done({"op": "b"})
        run.writers[0].write({"op": "c", "time_us": 3.0})
    published = (tmp_path / "results" / "rows.csv").read_text()
    assert "merged" in capsys.readouterr().out and all(f"\n{op}," in published for op in "abc")


def test_an_interrupted_run_is_recorded_and_results_untouched(tmp_path):
    plan = _plan(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        with open_run(plan, cpu(), provenance={}) as run:
            run.writers[0].write({"op": "a", "time_us": 1.5})
            raise KeyboardInterrupt
    assert read_manifest(plan.folder)["state"] == "incomplete" and not (tmp_path / "results").exists()
    with open_run(plan, replace(cpu(), resume=True), provenance={}) as run:
        run.complete = False  # the body's verdict: not every row was measured
    assert read_manifest(plan.folder)["state"] == "incomplete" and not (tmp_path / "results").exists()
    with open_run(plan, replace(cpu(), resume=True), provenance={}) as run:
        run.complete = None  # a launch of a sweep whose later launch publishes it
    assert read_manifest(plan.folder)["state"] == "running"
    check_before_launch(plan, cpu())  # the lock was released


def test_bad_resumes_are_refused_before_launch_and_on_every_rank(tmp_path, capsys):
    plan = _plan(tmp_path)
    with pytest.raises(RunError, match="nothing to resume"):
        check_before_launch(plan, replace(cpu(), resume=True))
    check_before_launch(plan, replace(cpu(), resume=True), mode="append")  # append makes what is missing
    with open_run(plan, cpu(), provenance={}) as run:
        run.complete = False
    other = _plan(tmp_path, config={"iters": 4})
    with pytest.raises(ValueError, match="the config changed"):
        check_before_launch(other, replace(cpu(), resume=True))

    def opened(env, plan):
        try:
            with open_run(plan, replace(cpu(), resume=True), env, provenance={}):
                return "opened"
        except SystemExit as e:
            return e.code
    assert run_ranks(opened, 2, other) == [2, 2]
    assert run_ranks(opened, 2, plan) == ["opened", "opened"]


def test_a_run_of_several_launches_is_prepared_once_and_held_until_they_end(tmp_path, monkeypatch):
    """hold_open: the folder prepared (fresh unless --resume) and locked while `then` runs: a launch inside finds the
    lock its own (DT_RUN_LOCKS), any other run is refused; released when the launches end."""
    plan = _plan(tmp_path)
    with pytest.raises(RunError, match="nothing to resume"):
        hold_open(plan, replace(cpu(), resume=True), [])
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # the launches import common
    launch = ("import sys; from pathlib import Path; from common.runs import check_free; "
              "check_free(Path(sys.argv[1]))")  # refused unless the lock is this invocation's
    assert hold_open(plan, cpu(), [sys.executable, "-c", launch, str(plan.folder)]) == 0
    assert read_manifest(plan.folder)["state"] == "running"  # prepared, not published: the last launch publishes
    assert hold_open(plan, replace(cpu(), resume=True), ["sh", "-c", "exit 3"]) == 3
    check_before_launch(plan, cpu())  # released
