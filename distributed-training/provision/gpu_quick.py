"""`make gpu-quick`: one short GPU lease answers the FP8 question, most important measurement first, and always
brings what it measured home.

Why. A rented GPU by the hour, a slot on a shared node, or the lent one these results come from (15 minutes in
all, its start included, 10 per command, no network): the full GPU suite needs half an hour, and a step cut off
by a time limit used to lose the report or the archive. Here a deadline (BUDGET_S) orders everything:

    0  the offline kit installed (KIT=...), if one is given
    1  doctor: what the node has, in the log
    2  fp8-train's preset, one run per step, in priority order: bf16-s0 and the measured FP8 bound, then
       torchao, native, te, te-fused (a backend the node lacks is skipped with its reason)
    3  fp8-train-bench at one hidden size: each mode's step time beside the GPU's busy time (gpu_busy_ms)
    4  the other BF16 seeds (the noise band), if time remains

Each step runs under a timeout of what is left before the deadline minus a reserve for the end, and is skipped
with a one-line reason when less than its minimum is left. The end always runs (a failed or stopped step, Ctrl-C
or SIGTERM included): whatever finished is published into results/ by merging (a partial plan keeps its
identity, <preset>_ws1, and the seeds it has), the closing table (tokens/s, vs BF16, the bound, % of bound, MFU,
GPU busy ms; what was skipped and why) is printed and saved beside the archive, and the results archive is
written to ARCHIVE_DIR. `make results-import ARCHIVE=...` takes it home.

    make gpu-quick PYTHON=python3 KIT=kit ARCHIVE_DIR=$OUT DT_GIT_COMMIT=$(git rev-parse --short=12 HEAD)
    make gpu-quick BUDGET_S=300                            # a shorter slot: fewer steps, the same priorities
    PYTHONPATH=distributed-training python -m provision.gpu_quick --help
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from common.config import parse_config
from common.cuda_env import read_driver, refusal
from common.hardware import CHOICES, get_preset
from common.runs import MANIFEST, RunError, data_rows, promote_run, read_manifest, run_dir_for

from . import archive, offline_kit

LABS = Path(__file__).resolve().parents[1]
FP8 = LABS / "fp8-train"


@dataclass(frozen=True)
class QuickConfig:
    gpu: str = field(default="auto", metadata={"help": "preset (cpu: a rehearsal with CPU stand-ins)",
                                               "choices": CHOICES})
    budget_s: float = field(default=480.0, metadata={"help": "seconds for everything, the end included"})
    reserve_s: float = field(default=40.0, metadata={"help": "seconds kept for publishing, the table and the "
                                                             "archive"})
    grace_s: float = field(default=20.0, metadata={"help": "after a step's SIGTERM, seconds before SIGKILL"})
    kit: str = field(default="", metadata={"help": "an offline kit to install first (make offline-kit)"})
    site: str = field(default=str(LABS.parent / ".kit-site"), metadata={"help": "where the kit is installed"})
    archive_dir: str = field(default=str(LABS.parent), metadata={"help": "where the results archive goes"})
    bench_hidden: int = field(default=4096, metadata={"help": "the bench's one hidden size"})
    # Minimum seconds a step needs to finish, from the committed H100 runs (68dffd9: 200 steps of 0.14-0.23 s,
    # compiles of 25-54 s; the bound ~20 s) plus reading the initial weights: started with less, it would only
    # be cut off. The plan's first run draws the weights (~34 s) and measures the bound (~20 s).
    min_first_s: float = field(default=100.0, metadata={"help": "skip the plan's first run with less than this left"})
    min_train_s: float = field(default=60.0, metadata={"help": "skip another training run with less than this left"})
    min_bench_s: float = field(default=45.0, metadata={"help": "skip the bench with less than this left"})
    bench_limit_s: float = field(default=150.0, metadata={"help": "the bench's own cap: the least important step, "
                                                                  "and open-ended (rows of finished modes stay)"})
    train_args: str = field(default="", metadata={"help": "extra fp8-train arguments (rehearsals: a tiny model)"})
    bench_args: str = field(default="", metadata={"help": "extra fp8-train-bench arguments"})
    out: str = field(default="", metadata={"help": "fp8-train's results folder (default: results/<preset>_ws1)"})

    def __post_init__(self):
        if self.budget_s <= self.reserve_s or self.reserve_s < 0 or self.grace_s < 0:
            raise ValueError(f"--budget-s ({self.budget_s:g}) must exceed --reserve-s ({self.reserve_s:g}), "
                             "both >= 0")
        if self.bench_hidden < 16 or self.bench_hidden % 16:
            raise ValueError(f"--bench-hidden must be a multiple of 16, got {self.bench_hidden}")


class Step(NamedTuple):
    name: str
    argv: list[str]
    needs_s: float  # less left than this: skipped
    limit_s: float = float("inf")  # its own cap, whatever is left


class Outcome(NamedTuple):
    step: str
    status: str  # done | failed (exit N) | cut off at the deadline / at its limit | skipped | stopped
    seconds: float
    note: str = ""


class Stopped(Exception):
    """SIGTERM or Ctrl-C on gpu-quick itself: the end still runs."""


def plan(cfg: QuickConfig, train: list[str], left_s: float) -> tuple[list[str], list[Outcome]]:
    """The preset's runs in its order (base seed first), and one skipped outcome per run it cannot do here."""
    r = subprocess.run(train + ["--list-runs"], capture_output=True, text=True, timeout=max(left_s, 1))
    if r.returncode:
        raise RuntimeError((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1])
    lines = r.stdout.splitlines()
    runs = [line[4:] for line in lines if line.startswith("run ")]
    skipped = [Outcome(*line[8:].split(": ", 1)[:1], "skipped", 0.0, line[8:].split(": ", 1)[-1])
               for line in lines if line.startswith("skipped ")]
    return runs, skipped


def steps(cfg: QuickConfig, results: Path, runs: list[str]) -> list[Step]:
    """The fp8-train runs one per step (the base seed's first), the bench after them, the other seeds last."""
    run_dir = run_dir_for(results.parent, results.name)
    fresh = not (run_dir / MANIFEST).is_file()  # a second attempt in the same slot continues the first
    train = train_argv(cfg)
    base = runs[0].rsplit("-", 1)[-1] if runs else ""
    first = [r for r in runs if r.endswith(f"-{base}")]
    out = []
    for i, run in enumerate(first):
        needs = cfg.min_first_s if i == 0 else cfg.min_train_s
        out.append(Step(run, train + ["--only", run] + ([] if fresh and i == 0 else ["--resume"]), needs))
    bench = [sys.executable, str(FP8 / "bench.py"), "--gpu", cfg.gpu, "--hidden", str(cfg.bench_hidden),
             "--parts", "step", "--promote", "merge", *cfg.bench_args.split()]
    out.append(Step("bench", bench + (["--out", cfg.out] if cfg.out else []), cfg.min_bench_s, cfg.bench_limit_s))
    out += [Step(run, train + ["--only", run, "--resume"], cfg.min_train_s) for run in runs if run not in first]
    return out


def train_argv(cfg: QuickConfig) -> list[str]:
    argv = [sys.executable, str(FP8 / "train.py"), "--gpu", cfg.gpu, "--no-progress", *cfg.train_args.split()]
    return argv + (["--out", cfg.out] if cfg.out else [])


def run_step(step: Step, left_s: float, grace_s: float) -> Outcome:
    """One step under a deadline (or its own cap): SIGTERM when reached (the labs keep their rows), SIGKILL
    after grace_s."""
    print(f"== gpu-quick: {step.name} ({left_s:.0f} s left)", flush=True)
    t0 = time.monotonic()
    limit = min(left_s, step.limit_s)
    proc = subprocess.Popen(step.argv, start_new_session=True)  # its own group: the signal reaches its children
    try:
        code = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait()
        why = "at its limit" if step.limit_s < left_s else "at the deadline"
        return Outcome(step.name, f"cut off {why}", time.monotonic() - t0, f"after {limit:.0f} s")
    except BaseException:
        _signal(proc, signal.SIGTERM)
        proc.wait()
        raise
    status = "done" if code == 0 else f"failed (exit {code})"
    return Outcome(step.name, status, time.monotonic() - t0)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def run_all(cfg: QuickConfig, plan: list[Step], deadline: float, done: list[Outcome]) -> None:
    """Every step in order, each outcome appended to `done` as it ends (a stop keeps the ones before)."""
    for step in plan:
        left = deadline - time.monotonic()
        if left < step.needs_s:
            done.append(Outcome(step.name, "skipped", 0.0, f"needs >= {step.needs_s:.0f} s, {max(left, 0):.0f} s left"))
            print(f"== gpu-quick: skipped {step.name}: {done[-1].note}", flush=True)
            continue
        done.append(run_step(step, left, cfg.grace_s))


def publish(cfg: QuickConfig, results: Path) -> list[str]:
    """Whatever finished, merged into results/ by key: fp8-train's finished runs (it drops a run cut off mid-way)
    and the bench's measured modes (each row is a whole measurement)."""
    lines = []
    if (run_dir_for(results.parent, results.name) / MANIFEST).is_file():
        r = subprocess.run(train_argv(cfg) + ["--publish-finished"], capture_output=True, text=True)
        lines += r.stdout.strip().splitlines() + r.stderr.strip().splitlines()[-1:]
    bench = run_dir_for(results.parent, f"{results.name}-bench")
    try:
        state = read_manifest(bench).get("state")
    except (RunError, OSError, ValueError):
        return lines  # the bench never started
    if state in ("promoted", "merged"):
        return lines + [f"{bench.name}: published by its own run"]
    if data_rows(bench) == 0:  # stopped before its first mode finished: headers alone are no result
        return lines + [f"{bench.name}: no mode finished; nothing published"]
    try:
        lines.append(f"{bench.name}: merged {len(promote_run(bench, merge=True))} file(s) into results/ ({state})")
    except RunError as e:
        lines.append(f"{bench.name}: not published ({e})")
    return lines


def outcome_lines(outcomes: list[Outcome]) -> list[str]:
    rows = [f"{o.step:16s} {o.status:24s} {o.seconds:6.0f} s  {o.note}".rstrip() for o in outcomes]
    return ["step             status                   time", *rows]


def finish(cfg: QuickConfig, outcomes: list[Outcome], results: Path, started: float) -> int:
    """The end: publish, the closing table, the archive. Runs whatever happened before."""
    lines = outcome_lines(outcomes) + [""] + publish(cfg, results)
    table = subprocess.run([sys.executable, str(FP8 / "quick_summary.py"), "--results", str(results)],
                           capture_output=True, text=True)
    lines += ["", *(table.stdout.strip().splitlines() or [f"closing table: failed ({table.stderr.strip()[-200:]})"])]
    lines.append(f"gpu-quick: {time.monotonic() - started:.0f} s of a {cfg.budget_s:.0f} s budget")
    text = "\n".join(lines)
    print(text, flush=True)
    out = Path(cfg.archive_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu_quick_{results.name}.txt").write_text(text + "\n")
    path = archive.create(out)
    print(f"gpu-quick: wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)", flush=True)
    # A step cut off by the time box is the design working; a step that failed, or a stop, is not.
    return 1 if any(o.status.startswith(("failed", "stopped")) for o in outcomes) else 0


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    cfg = parse_config(QuickConfig, argv, description=__doc__, prog="gpu-quick")
    preset = get_preset(cfg.gpu)
    if preset.name != "cpu":
        why = refusal("gpu-quick", "make gpu-quick GPU=cpu (a rehearsal with CPU stand-ins)", read_driver())
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 2
    results = Path(cfg.out) if cfg.out else FP8 / "results" / preset.run_tag(1)
    deadline = started + cfg.budget_s - cfg.reserve_s
    outcomes: list[Outcome] = []
    before = signal.signal(signal.SIGTERM, _stop)
    try:
        if cfg.kit:
            t0 = time.monotonic()
            try:
                outcomes.append(Outcome("offline-install", "done", time.monotonic() - t0,
                                        offline_kit.install(Path(cfg.kit), Path(cfg.site))))
            except offline_kit.KitError as e:
                outcomes.append(Outcome("offline-install", "failed", time.monotonic() - t0, str(e)))
        run_all(cfg, [Step("doctor", [sys.executable, "-m", "provision.doctor", "--gpu", cfg.gpu], 5.0)], deadline,
                outcomes)
        runs, skipped = plan(cfg, train_argv(cfg), deadline - time.monotonic())
        outcomes += skipped
        run_all(cfg, steps(cfg, results, runs), deadline, outcomes)
    except (Stopped, KeyboardInterrupt):
        outcomes.append(Outcome("gpu-quick", "stopped", time.monotonic() - started, "SIGTERM or Ctrl-C"))
    except (RuntimeError, subprocess.TimeoutExpired) as e:  # fp8-train could not list its plan
        outcomes.append(Outcome("fp8-train plan", "failed", time.monotonic() - started, str(e)))
    finally:
        signal.signal(signal.SIGTERM, before)
        code = finish(cfg, outcomes, results, started)
    return code


def _stop(signum, frame) -> None:
    raise Stopped


if __name__ == "__main__":
    raise SystemExit(main())
