"""What the next GPU slot should measure, in what order, and what each step will cost: gpu-quick's run list.

Why. A lent GPU comes for minutes: a slot that measures again what the committed rows already hold buys
nothing. So the default run list is what the results set gpu-quick publishes into lacks
(fp8-train/results/<preset>_ws1), read from its CSVs, most important first:

    0  the base BF16 run (bf16-s0), first whenever anything else is measured: every FP8 result is read
       against BF16 of the same GPU and commit, and the FP8 bound (bound.csv) is measured right after it
    1  FP8 runs measured on no GPU at all (no row in any GPU set under results/)
    2  runs whose committed rows are damaged (provision/committed.py: steps missing, or an FP8 record that
       lost layers: a scale of exactly 0.0, a module missing at a recorded step, partial underflow), or were
       written by an older version of the lab's own FP8 layer than fp8-train's code now (rows name it in
       precision_backend_version, `train.py --list-runs` names the version it writes: common/fp8_record.py)
    3  FP8 runs with no rows in the set; 4  the other runs with no rows there (BF16 seeds: the noise band)
    5  the GEMM rates (`gemm`: fp8-train's bench --parts gemm -> bench_gemm.csv, the sustained matmul rate
       planner/gemm_rates.py prices this GPU with), when the set has none
    6  the bench at one hidden size (`bench`: bench_step.csv, step time beside GPU busy time), when missing
    7  runs measured only in another set of this GPU (results/<preset>_ws1-*: an experiment's folder)

Each step's seconds: a training run's committed step times on this GPU (their sum; step 0 holds its
compile) plus one run's start and end (the shortest gap between two committed runs of this GPU: imports,
data, weights, final evaluation, the bound), from the run's own rows, else another set's of this GPU, else
a run of the same precision on this GPU (a guess, said so); with no rows at all, the step's minimum is the
guess. The preset's runs come from `train.py --gpu GPU --list-runs`, which answers without a GPU (its backends
unprobed there). `gpu-quick --dry-run` prints the list with its estimates; nothing here needs a GPU.

    PYTHONPATH=distributed-training python -m provision.gpu_quick --gpu h200 --dry-run
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from common.fp8_record import layer_tag, layer_version

from .committed import HIGH, ResultsSet, gpu_sets, precision_of, read_set

GEMM, BENCH = "gemm", "bench"  # the two steps that are not training runs


class PresetPlan(NamedTuple):
    """fp8-train's preset for a GPU, as its --list-runs states it."""
    gpu: str
    runs: tuple[str, ...]  # fp8-train's run names, the base seed's first (the order fp8-train trains them)
    seed: int
    bound: bool
    layers: tuple[tuple[str, int], ...] = ()  # (run, version of the lab's own FP8 layer its rows will name)

    def layer(self, run: str) -> int | None:
        return dict(self.layers).get(run)


@functools.lru_cache(maxsize=8)  # one answer per process: it costs a torch import
def preset_plan(train_py: Path, gpu: str, timeout_s: float = 120.0) -> PresetPlan:
    """The preset's runs from `train.py --gpu GPU --list-runs` (training/plan.py's `listing`; no GPU needed)."""
    r = subprocess.run([sys.executable, str(train_py), "--gpu", gpu, "--list-runs"], capture_output=True, text=True,
                       timeout=timeout_s)
    lines = r.stdout.splitlines()
    names = [line.split()[1].rstrip(":") for line in lines if line.startswith(("run ", "skipped "))]
    if r.returncode or not names:
        why = (r.stderr.strip().splitlines() or ["it lists no run"])[-1]
        raise ValueError(f"{train_py.name} --gpu {gpu} --list-runs: {why}")
    seed = re.fullmatch(r".*-s(\d+)", names[0])
    layers = tuple((line.split()[1].rstrip(":"), layer_version(line.partition(": ")[2]))
                   for line in lines if line.startswith("layer "))
    bound = any(line.startswith("bound ") for line in lines)
    return PresetPlan(gpu, tuple(names), int(seed.group(1)) if seed else 0, bound, layers)


def label(run: str, seed: int) -> str:
    """What --runs takes for a run: the backend of a base-seed FP8 run (te-fused, native), else the run's name."""
    if run.startswith("fp8-") and run.endswith(f"-s{seed}"):
        return run[4:-len(f"-s{seed}")]
    return run


class Guesses(NamedTuple):
    """Seconds assumed where no committed row measures a step (gpu-quick's flags; each is said to be a guess)."""
    first_s: float  # the plan's first training run with no rows on this GPU
    train_s: float  # another training run with no rows on this GPU
    gemm_s: float  # the GEMM rates: a process start, the corpus read, 16 GEMMs
    bench_s: float  # the bench at one hidden size (it runs under its own cap)
    start_s: float  # one run's start and end, where no two committed runs of this GPU measure it
    weights_s: float  # drawing the initial weights: the first training run of a slot only


class Item(NamedTuple):
    """One step of a slot's run list."""
    label: str  # what --runs takes: bf16-s0, te-fused, native, gemm, bench
    run: str  # fp8-train's run name ("" for gemm and bench)
    rank: int  # the priority class (module docstring); lower first
    why: str  # why the default list holds it
    seconds: float  # estimated
    basis: str  # where `seconds` comes from: "measured: ..." or "guess: ..."

    @property
    def guessed(self) -> bool:
        return self.basis.startswith("guess")


def start_gap_s(sets: list[ResultsSet]) -> float | None:
    """One run's start and end, measured: the shortest gap between a run's last row and the next run's start
    (its first row less that step's time) within a committed set of this GPU; None without two runs."""
    gaps = []
    for s in sets:
        ordered = sorted(s.runs.values(), key=lambda r: r.start)
        gaps += [(b.start - a.end).total_seconds() for a, b in zip(ordered, ordered[1:])]
    gaps = [g for g in gaps if g > 0]
    return min(gaps) if gaps else None


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def estimate(run: str, first: bool, here: list[ResultsSet], g: Guesses) -> tuple[float, str]:
    """A training run's seconds on this GPU and where they come from (`here`: the target set first, then this
    GPU's other sets)."""
    gap = start_gap_s(here)
    total = gap if gap is not None else g.start_s
    extra = [f"{total:.0f} s start and end ({'measured' if gap is not None else 'guess'})"]
    if first:
        extra.append(f"{g.weights_s:.0f} s drawing the weights (guess)")
        total += g.weights_s
    own = [(s, s.runs[run]) for s in here if run in s.runs]
    proxies = [(s, name) for s in here for name in s.runs if precision_of(name) == precision_of(run)]
    if own:
        s, rows = own[0]
        head = f"measured: {rows.steps} steps of {run} in {rows.seconds:.1f} s ({s.path.name} at {rows.commit})"
    elif proxies:
        s, name = max(proxies, key=lambda p: _common_prefix(p[1], run))
        rows = s.runs[name]
        head = f"guess: {name}'s {rows.steps} steps in {rows.seconds:.1f} s ({s.path.name} at {rows.commit})"
    else:
        floor = g.first_s if first else g.train_s
        return floor, f"guess: no {precision_of(run)} run on this GPU yet; the minimum a training step gets"
    return rows.seconds + total, " + ".join([head, *extra])


def remeasure(results: ResultsSet, run: str, layer: int | None) -> str:
    """Why `run`'s committed rows in `results` must be measured again ("" if they stand): damaged rows, or rows
    an older version of the lab's own FP8 layer wrote than the code now (`layer`, from --list-runs)."""
    why = [f"are damaged: {results.damage[run]}"] if run in results.damage else []
    rows = results.runs.get(run)
    if layer is not None and rows is not None and rows.layer < layer:
        why.append(f"were written by {layer_tag(rows.layer)} of the lab's FP8 layer; the code now is {layer_tag(layer)}")
    return "; and ".join(why)


def default_items(plan: PresetPlan, target: ResultsSet, siblings: list[ResultsSet], every_gpu: list[ResultsSet],
                  bench_hidden: int) -> list[tuple[int, str, str]]:
    """What `target` lacks, as (rank, why, run or gemm/bench), most important first (module docstring)."""
    name = target.path.name
    base = f"bf16-s{plan.seed}"
    chosen = []
    for run in plan.runs:
        if why := remeasure(target, run, plan.layer(run)):
            chosen.append((2, f"its rows in {name} {why}", run))
        elif run in target.runs:
            if run == base and plan.bound and not target.has_bound:
                chosen.append((0, f"no bound.csv in {name} (the measured FP8 bound follows this run)", run))
        elif elsewhere := [s.path.name for s in siblings if run in s.runs and not remeasure(s, run, plan.layer(run))]:
            chosen.append((7, f"measured only in {', '.join(elsewhere)}", run))
        elif precision_of(run) not in HIGH:
            on_gpu = any(run in s.runs for s in every_gpu)
            chosen.append((3, f"no rows in {name}", run) if on_gpu else (1, "measured on no GPU yet", run))
        else:
            band = " (another BF16 seed: the noise band)" if precision_of(run) == "bf16" and run != base else ""
            chosen.append((4, f"no rows in {name}{band}", run))
    if chosen and base in plan.runs:
        mine = [c for c in chosen if c[2] == base]
        chosen = [c for c in chosen if c[2] != base]
        chosen.append((0, mine[0][1] if mine else "the baseline: each FP8 run is read against BF16 of the same GPU "
                          "and commit", base))
    if not target.has_gemms:
        chosen.append((5, f"no bench_gemm.csv in {name}: the planner prices this GPU without its own GEMM rates",
                       GEMM))
    if bench_hidden not in target.bench_hidden:
        chosen.append((6, f"no bench_step.csv row at hidden {bench_hidden} in {name}", BENCH))
    order = {run: i for i, run in enumerate(plan.runs)}
    return sorted(chosen, key=lambda c: (c[0], order.get(c[2], len(order))))


def items_for(names: list[str] | None, plan: PresetPlan, results: Path, bench_hidden: int, g: Guesses) -> list[Item]:
    """The run list: `names` (labels or fp8-train run names, gemm, bench) in the caller's order, or the default
    (what `results` lacks); each with its estimate. ValueError (one line) for a name the preset has no run for."""
    target = read_set(results)
    siblings, every_gpu = gpu_sets(results.parent, results.name)
    lacking = default_items(plan, target, siblings, every_gpu, bench_hidden)
    why = {run: w for _, w, run in lacking}
    rank = {run: r for r, _, run in lacking}
    by_label = {label(run, plan.seed): run for run in plan.runs} | {run: run for run in plan.runs}
    if names is None:
        chosen = [run for _, _, run in lacking]
    else:
        unknown = [n for n in names if n not in by_label and n not in (GEMM, BENCH)]
        if unknown:
            allowed = [label(r, plan.seed) for r in plan.runs] + [GEMM, BENCH]
            raise ValueError(f"--runs: {', '.join(unknown)} is not a step of the {plan.gpu} preset; allowed: "
                             f"{', '.join(allowed)} (or fp8-train's run names)")
        chosen = [by_label.get(n, n) for n in names]
        if len(set(chosen)) < len(chosen):
            raise ValueError(f"--runs names a step twice: {', '.join(names)}")
    here = [target, *siblings]
    out, first = [], True
    for run in chosen:
        if run == GEMM:
            seconds, basis = g.gemm_s, "guess: no committed timing of this step"
        elif run == BENCH:
            seconds, basis = g.bench_s, "guess: its own cap (no committed timing of this step)"
        else:
            seconds, basis = estimate(run, first, here, g)
            first = False
        out.append(Item(label(run, plan.seed) if run not in (GEMM, BENCH) else run, run if run not in (GEMM, BENCH)
                        else "", rank.get(run, -1), why.get(run, "named by --runs"), seconds, basis))
    return out


def schedule(items: list[Item], deadline_s: float) -> list[tuple[Item, float | None, str]]:
    """gpu-quick's order on the estimates: each step starts if its estimate fits before the deadline, else it is
    skipped and the next one tried; (item, its estimated end or None, the note)."""
    t, out = 0.0, []
    for item in items:
        if t + item.seconds <= deadline_s:
            t += item.seconds
            out.append((item, t, ""))
        else:
            out.append((item, None, f"skipped: needs {item.seconds:.0f} s, {max(deadline_s - t, 0):.0f} s left"))
    return out


def dry_run_lines(items: list[Item], results: Path, plan: PresetPlan, budget_s: float, reserve_s: float) -> list[str]:
    plain = [label(r, plan.seed) for r in plan.runs]
    lines = [f"gpu-quick --dry-run, {plan.gpu}: what {results.name} lacks, most important first (fp8-train's "
             f"{plan.gpu} preset: {', '.join(plain)})",
             f"budget {budget_s:.0f} s: steps start until {budget_s - reserve_s:.0f} s, then {reserve_s:.0f} s for the "
             "end (publish, closing table, archive)", "",
             f"  #  {'step':20s} {'est.':>6s} {'ends':>6s}  why"]
    shown = {f"bf16-s{plan.seed}": f"bf16-s{plan.seed} (+ bound)"} if plan.bound else {}
    for i, (item, end, note) in enumerate(schedule(items, budget_s - reserve_s), 1):
        ends = f"{end:4.0f} s" if end is not None else "     -"
        lines.append(f"{i:3d}  {shown.get(item.label, item.label):20s} {item.seconds:4.0f} s {ends}  {item.why}")
        lines.append(f"{'':26s}{item.basis}" + (f"; {note}" if note else ""))
    fits = [i for i, end, _ in schedule(items, budget_s - reserve_s) if end is not None]
    guessed = sum(i.guessed for i in items)
    lines += ["", f"estimated: {len(fits)} of {len(items)} steps fit, {sum(i.seconds for i in fits):.0f} s of steps "
                  f"({guessed} of the {len(items)} estimates are guesses: no committed row of their own)"]
    te = [i.label for i in items if i.run and precision_of(i.run) not in HIGH and i.run.split("-")[1] == "te"]
    if te:
        one = len(te) == 1
        lines.append(f"{', '.join(te)} need{'s' if one else ''} TransformerEngine on the node (KIT=...): where it does "
                     f"not import, fp8-train's plan skips {'it' if one else 'them'} and gpu-quick drops "
                     f"{'it' if one else 'them'} with one line")
    return lines
