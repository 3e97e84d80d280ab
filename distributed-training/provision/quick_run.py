"""gpu-quick's run: the kit, doctor, fp8-train's plan here, each step of the list in the time box, and the end
that always runs (publish what finished, the closing table, the archive). provision/gpu_quick.py checks every
input first and calls `run`; provision/timebox.py times the steps.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from common.runs import MANIFEST, RunError, data_rows, promote_run, read_manifest, run_dir_for

from . import archive, offline_kit, timebox
from .slot_plan import GEMM, Item
from .timebox import Outcome, Step

if TYPE_CHECKING:
    from .gpu_quick import Prepared, QuickConfig


def train_argv(cfg: QuickConfig, results: Path) -> list[str]:
    """fp8-train with the results folder always named: a rehearsal's default one too (never results/)."""
    argv = [sys.executable, str(Path(cfg.fp8_lab) / "train.py"), "--gpu", cfg.gpu, "--no-progress",
            *cfg.train_args.split()]
    return argv + ["--results", str(results)]


def bench_argv(cfg: QuickConfig, results: Path, parts: str) -> list[str]:
    argv = [sys.executable, str(Path(cfg.fp8_lab) / "bench.py"), "--gpu", cfg.gpu, "--parts", parts,
            "--promote", "merge", *(["--hidden", str(cfg.bench_hidden)] if parts == "step" else []),
            *cfg.bench_args.split()]
    return argv + ["--results", str(results)]


def runnable(cfg: QuickConfig, results: Path, items: list[Item], left_s: float) -> tuple[list[Item], list[Outcome]]:
    """fp8-train's plan here (--list-runs): the items it can run, and one dropped outcome per item it cannot,
    told in one line per reason (a TransformerEngine that does not import drops the TE runs, the rest goes on)."""
    r = subprocess.run(train_argv(cfg, results) + ["--list-runs"], capture_output=True, text=True,
                       timeout=max(left_s, 1))
    if r.returncode:
        raise RuntimeError((r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1])
    lines = r.stdout.splitlines()
    runs = {line[4:] for line in lines if line.startswith("run ")}
    skipped = dict(line[8:].split(": ", 1) for line in lines if line.startswith("skipped ") and ": " in line)
    keep = [i for i in items if not i.run or i.run in runs]
    dropped = [Outcome(i.label, "dropped", 0.0, skipped.get(i.run, "not in fp8-train's plan with these arguments"))
               for i in items if i not in keep]
    for reason in dict.fromkeys(o.note for o in dropped):
        names = ", ".join(o.step for o in dropped if o.note == reason)
        print(f"== gpu-quick: dropped {names}: {reason}; the rest goes on", flush=True)
    return keep, dropped


def steps(cfg: QuickConfig, results: Path, items: list[Item]) -> list[Step]:
    """One step per item, in the list's order, each needing its estimate."""
    out = []
    for item in items:
        if item.run:
            out.append(Step(item.label, train_argv(cfg, results) + ["--only", item.run], item.seconds))
        else:
            cap = cfg.gemm_limit_s if item.label == GEMM else cfg.bench_limit_s
            parts = "gemm" if item.label == GEMM else "step"
            out.append(Step(item.label, bench_argv(cfg, results, parts), item.seconds, cap))
    return out


def resuming(results: Path):
    """A training step continues this slot's run folder when one is open (its first step starts it fresh)."""
    run_dir = run_dir_for(results.parent, results.name)

    def launch(step: Step) -> Step:
        if "--only" not in step.argv or not (run_dir / MANIFEST).is_file():
            return step
        state = read_manifest(run_dir).get("state")
        return step if state in ("promoted", "merged") else step._replace(argv=step.argv + ["--resume"])
    return launch


def publish(cfg: QuickConfig, results: Path, timeout_s: float) -> list[str]:
    """Whatever finished, merged into results/ by key: fp8-train's finished runs (it drops a run cut off mid-way)
    and the bench's measured modes (each row is a whole measurement)."""
    lines = []
    if (run_dir_for(results.parent, results.name) / MANIFEST).is_file():
        try:
            r = subprocess.run(train_argv(cfg, results) + ["--publish-finished"], capture_output=True, text=True,
                               timeout=timeout_s)
            lines += r.stdout.strip().splitlines() + r.stderr.strip().splitlines()[-1:]
        except subprocess.TimeoutExpired:
            lines.append(f"fp8-train --publish-finished: no answer within {timeout_s:.0f} s; runs/ keeps the runs")
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
    except (RunError, OSError) as e:
        lines.append(f"{bench.name}: not published ({e})")
    return lines


def outcome_lines(outcomes: list[Outcome]) -> list[str]:
    rows = [f"{o.step:16s} {o.status:24s} {o.seconds:6.0f} s  {o.note}".rstrip() for o in outcomes]
    return ["step             status                   time", *rows]


def finish(cfg: QuickConfig, p: Prepared, outcomes: list[Outcome], started: float) -> int:
    """The end: publish, the closing table, the archive. Runs whatever happened before, within the reserve."""
    lines = outcome_lines(outcomes) + [""] + publish(cfg, p.results, max(10.0, 0.5 * cfg.reserve_s))
    try:
        table = subprocess.run([sys.executable, str(Path(cfg.fp8_lab) / "quick_summary.py"), "--results",
                                str(p.results)], capture_output=True, text=True, timeout=max(10.0, 0.2 * cfg.reserve_s))
        failed = f"closing table: failed ({table.stderr.strip()[-200:]})"
        lines += ["", *(table.stdout.strip().splitlines() or [failed])]
    except subprocess.TimeoutExpired:
        lines += ["", "closing table: no answer in time (the archive carries the rows)"]
    lines.append(f"gpu-quick: {time.monotonic() - started:.0f} s of a {cfg.budget_s:.0f} s budget")
    text = "\n".join(lines)
    print(text, flush=True)
    try:
        (p.archive / f"gpu_quick_{p.results.name}.txt").write_text(text + "\n")
        path = archive.create(p.archive)
    except OSError as e:
        print(f"gpu-quick: error: no archive written ({e})", flush=True)
        return 1
    print(f"gpu-quick: wrote {path} ({path.stat().st_size / 2**20:.1f} MiB); the log: "
          f"{p.archive / f'gpu_quick_{p.results.name}.log'}", flush=True)
    # A step cut off by the time box is the design working; a step that failed, or a stop, is not.
    return 1 if any(o.status.startswith(("failed", "stopped")) for o in outcomes) else 0


def run(cfg: QuickConfig, p: Prepared, started: float) -> int:
    deadline = started + cfg.budget_s - cfg.reserve_s
    outcomes: list[Outcome] = []
    before = signal.signal(signal.SIGTERM, timebox.stop)
    try:
        if cfg.kit:
            t0 = time.monotonic()
            try:
                note = offline_kit.install(Path(cfg.kit), Path(cfg.site))
                outcomes.append(Outcome("offline-install", "done", time.monotonic() - t0, note))
            except offline_kit.KitError as e:
                outcomes.append(Outcome("offline-install", "failed", time.monotonic() - t0, str(e)))
            print(f"== gpu-quick: offline-install {outcomes[-1].status}: {outcomes[-1].note}", flush=True)
        doctor = Step("doctor", [sys.executable, "-m", "provision.doctor", "--gpu", cfg.gpu], 5.0)
        timebox.run_all([doctor], deadline, outcomes, cfg.grace_s)
        items, dropped = runnable(cfg, p.results, p.items, deadline - time.monotonic())
        outcomes += dropped
        timebox.run_all(steps(cfg, p.results, items), deadline, outcomes, cfg.grace_s, resuming(p.results))
    except (timebox.Stopped, KeyboardInterrupt):
        outcomes.append(Outcome("gpu-quick", "stopped", time.monotonic() - started, "SIGTERM or Ctrl-C"))
    except (RuntimeError, subprocess.TimeoutExpired) as e:  # fp8-train could not list its plan
        outcomes.append(Outcome("fp8-train plan", "failed", time.monotonic() - started, str(e)))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the end runs to its end: the archive is the point
        try:
            code = finish(cfg, p, outcomes, started)
        finally:
            signal.signal(signal.SIGTERM, before)
    return code
