"""`make gpu-quick`: one short GPU lease measures what the committed results still lack, most important first,
and always brings what it measured home.

Why. A rented GPU by the hour, a slot on a shared node, or the lent one these results come from (15 minutes in
all, its start included, 10 per command, no network): a slot that re-measures what results/ holds buys
nothing, and a step cut off by a time limit used to lose the report or the archive. So:

    the run list   what fp8-train/results/<preset>_ws1 lacks, read from its CSVs (provision/slot_plan.py): on
                   h200_ws1 today bf16-s0 (+ the FP8 bound), te-fused, native (its FP8 record is damaged),
                   bf16-s1, bf16-s2, then the GEMM rates (gemm) and the bench (bench); --runs sets it
    --dry-run      that list for a GPU, with each step's estimated seconds from the committed step times (a
                   guess where none exist, said so) and what the budget holds; no GPU needed
    the time box   BUDGET_S orders everything: the kit installed (KIT=...), doctor, fp8-train's plan (a TE run
                   whose library does not import here is dropped with one line, the rest goes on), then each
                   step if its estimate fits in what is left (else skipped with its reason and the next tried),
                   under a timeout of what is left minus a reserve for the end (provision/timebox.py)
    the end        always (a failed or stopped step, Ctrl-C or SIGTERM included): whatever finished is merged
                   into results/, the closing table (tokens/s, vs BF16, the bound, MFU, GPU busy ms, what was
                   skipped and why) printed and saved, the results archive written; ARCHIVE_DIR (default $OUT)
                   then holds the whole log too. `make results-import ARCHIVE=...` takes it home.

A GPU target: with no CUDA GPU, an nvidia-smi that hangs or fails, or GPUs this torch cannot use, it is one
line and exit 2 before anything is written. GPU=cpu REHEARSAL=1 rehearses it on CPU stand-ins, into
fp8-train/runs/rehearsal (or --results outside every results/ folder), never into committed results.

    make gpu-quick PYTHON=python3 KIT=kit ARCHIVE_DIR=$OUT DT_GIT_COMMIT=$(git rev-parse --short=12 HEAD)
    make gpu-quick GPU=h200 ARGS=--dry-run                 # what a slot would do here, in order, with estimates
    make gpu-quick RUNS=te-fused,native BUDGET_S=300       # a shorter slot, the caller's priorities
    make gpu-quick GPU=cpu REHEARSAL=1 ARCHIVE_DIR=/tmp/q  # the rehearsal
    bash distributed-training/provision/gpu_slot.sh        # the whole command for a lent machine
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from common.config import parse_config
from common.csvread import BadResults
from common.cuda_env import probe_driver, refusal
from common.hardware import CHOICES, GPUPreset, get_preset
from common.runs import run_dir_for

from . import quick_run, slot_plan, timebox
from .slot_plan import Guesses, Item

LABS = Path(__file__).resolve().parents[1]
ROOT = LABS.parent
FP8 = LABS / "fp8-train"


@dataclass(frozen=True)
class QuickConfig:
    gpu: str = field(default="auto", metadata={"help": "preset (cpu: the rehearsal, with --rehearsal)",
                                               "choices": CHOICES})
    runs: tuple[str, ...] = field(default=(), metadata={
        "help": "the steps in priority order: fp8-train runs (bf16-s0, te-fused, native, bf16-s1, ... or run names), "
                "gemm (the GEMM rates), bench; none: what the committed results for this GPU lack"})
    dry_run: bool = field(default=False, metadata={"help": "print the steps, their estimates and what the budget "
                                                           "holds, and stop (no GPU needed: name --gpu)"})
    rehearsal: bool = field(default=False, metadata={"help": "GPU=cpu only: the rehearsal on CPU stand-ins, into "
                                                             "fp8-train/runs/rehearsal or --results, never results/"})
    budget_s: float = field(default=480.0, metadata={"help": "seconds for everything, the end included"})
    reserve_s: float = field(default=60.0, metadata={"help": "seconds kept for the end: publish, table, archive (the "
                                                             "H200 slot at cd873fd overran a 40 s reserve)"})
    grace_s: float = field(default=20.0, metadata={"help": "after a step's SIGTERM, seconds before SIGKILL"})
    kit: str = field(default="", metadata={"help": "an offline kit to install first (make offline-kit)"})
    site: str = field(default=str(ROOT / ".kit-site"), metadata={"help": "where the kit is installed"})
    archive_dir: str = field(default="", metadata={"help": "where the archive, the closing table and the log go "
                                                           "(default: $OUT; never the checkout)"})
    bench_hidden: int = field(default=4096, metadata={"help": "the bench's one hidden size"})
    bench_limit_s: float = field(default=150.0, metadata={"help": "the bench's cap and estimate (rows of finished "
                                                                  "modes stay)"})
    gemm_limit_s: float = field(default=120.0, metadata={"help": "the GEMM rates' cap"})
    # Guesses, used where no committed row measures a step (the dry run says which estimates are guesses).
    guess_first_s: float = field(default=100.0, metadata={"help": "guess: the first training run, no rows on this GPU"})
    guess_train_s: float = field(default=60.0, metadata={"help": "guess: another training run, no rows on this GPU"})
    guess_start_s: float = field(default=30.0, metadata={"help": "guess: a run's start and end, where no two "
                                                                 "committed runs measure it"})
    guess_weights_s: float = field(default=35.0, metadata={"help": "guess: drawing the initial weights (first run)"})
    guess_gemm_s: float = field(default=40.0, metadata={"help": "guess: the GEMM rates (a start, 16 GEMMs)"})
    guess_doctor_s: float = field(default=20.0, metadata={"help": "guess: doctor and fp8-train's plan"})
    guess_install_s: float = field(default=20.0, metadata={"help": "guess: installing the kit"})
    train_args: str = field(default="", metadata={"help": "extra fp8-train arguments (rehearsals: a tiny model)"})
    bench_args: str = field(default="", metadata={"help": "extra fp8-train-bench arguments"})
    results: str = field(default="", metadata={"help": "fp8-train's results folder, its --results (default: "
                                                       "results/<preset>_ws1; the rehearsal's: "
                                                       "runs/rehearsal/cpu_ws1)"})
    fp8_lab: str = field(default=str(FP8), metadata={"help": "the folder whose train.py, bench.py and "
                                                             "quick_summary.py run (a rehearsal's stand-in)"})

    def __post_init__(self):
        if self.budget_s <= self.reserve_s or self.reserve_s < 0 or self.grace_s < 0:
            raise ValueError(f"--budget-s ({self.budget_s:g}) must exceed --reserve-s ({self.reserve_s:g}), "
                             "both >= 0")
        if self.bench_hidden < 16 or self.bench_hidden % 16:
            raise ValueError(f"--bench-hidden must be a multiple of 16, got {self.bench_hidden}")
        if self.rehearsal != (self.gpu == "cpu"):
            raise ValueError("--rehearsal takes GPU=cpu, its CPU stand-ins" if self.rehearsal else
                             "gpu-quick measures a GPU; GPU=cpu only rehearses it: add REHEARSAL=1 (--rehearsal), "
                             "which writes under fp8-train/runs/rehearsal, never into results/")
        if self.dry_run and self.gpu == "auto":
            raise ValueError("--dry-run plans for a named GPU: --gpu h100, h200, ... (GPU=...)")
        guesses = {f.name: getattr(self, f.name) for f in self.__dataclass_fields__.values() if f.name.endswith("_s")}
        bad = [k for k, v in guesses.items() if v < 0 or v != v or v == float("inf")]
        if bad:
            raise ValueError(f"--{bad[0].replace('_', '-')} takes seconds >= 0, got {guesses[bad[0]]}")

    @property
    def guesses(self) -> Guesses:
        return Guesses(self.guess_first_s, self.guess_train_s, self.guess_gemm_s, self.bench_limit_s,
                       self.guess_start_s, self.guess_weights_s)


class Prepared(NamedTuple):
    """Everything checked before launch: the GPU, where results and the archive go, the run list."""
    preset: GPUPreset
    results: Path
    archive: Path | None  # None in a dry run
    plan: slot_plan.PresetPlan
    items: list[Item]


def unwritable(path: Path) -> str | None:
    """Why nothing can be written at `path` (the folder, or the nearest one above it that exists), else None."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{path}: {probe} is not a folder"
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        return f"{probe} is not writable ({e.strerror})"
    return None


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve() == folder.resolve() or folder.resolve() in path.resolve().parents


def prepare(cfg: QuickConfig) -> Prepared:
    """Every input checked before anything is written or launched; ValueError (one line) otherwise."""
    if not cfg.dry_run and not cfg.rehearsal:
        why = refusal("gpu-quick", "make gpu-quick GPU=cpu REHEARSAL=1 (a rehearsal on CPU stand-ins)",
                      probe_driver())
        if why:
            raise ValueError(why)
    preset = get_preset(cfg.gpu)  # auto on a GPU node: the GPU's preset
    lab = Path(cfg.fp8_lab)
    default = lab / "runs" / "rehearsal" if cfg.rehearsal else lab / "results"
    results = Path(cfg.results) if cfg.results else default / preset.run_tag(1)
    if cfg.rehearsal and any(_inside(results, p) for p in LABS.glob("*/results")):
        raise ValueError(f"--results {results}: a rehearsal never writes into committed results; name a folder under "
                         "runs/ or outside the checkout")
    plan = slot_plan.preset_plan(lab / "train.py", cfg.gpu)
    items = slot_plan.items_for(list(cfg.runs) or None, plan, results, cfg.bench_hidden, cfg.guesses)
    if cfg.dry_run:
        return Prepared(preset, results, None, plan, items)
    given = cfg.archive_dir or os.environ.get("OUT", "")
    if not given:
        raise ValueError("gpu-quick needs ARCHIVE_DIR=<folder> for its archive, closing table and log (a lent "
                         "machine's $OUT is the default), outside the checkout")
    where = Path(given)
    if _inside(where, LABS) or where.resolve() == ROOT.resolve():
        raise ValueError(f"ARCHIVE_DIR={given} is inside the checkout's {'labs' if _inside(where, LABS) else 'root'}: "
                         "name a folder outside it ($OUT on a lent machine)")
    checked = [(results, "the results folder"), (run_dir_for(results.parent, results.name).parent, "the runs folder"),
               (where, "ARCHIVE_DIR")] + ([(Path(cfg.site), "KIT_SITE")] if cfg.kit else [])
    for path, what in checked:
        if problem := unwritable(path):
            raise ValueError(f"{what} cannot be written: {problem}")
    return Prepared(preset, results, where, plan, items)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    cfg = parse_config(QuickConfig, argv, description=__doc__, prog="gpu-quick")
    try:
        p = prepare(cfg)
    except (ValueError, BadResults, subprocess.TimeoutExpired) as e:  # BadResults: a damaged committed CSV
        print(f"error: {e}" if str(e).startswith("gpu-quick") else f"gpu-quick: error: {e}", file=sys.stderr)
        return 2
    if cfg.dry_run:
        untimed = "guess: no committed timing of this step"
        pre = ([Item("offline-install", "", -1, "the kit's wheels into KIT_SITE", cfg.guess_install_s, untimed)]
               if cfg.kit else [])
        pre.append(Item("doctor", "", -1, "what the node has, in the log; fp8-train's plan", cfg.guess_doctor_s,
                        untimed))
        print("\n".join(slot_plan.dry_run_lines(pre + p.items, p.results, p.plan, cfg.budget_s, cfg.reserve_s)))
        return 0
    p.archive.mkdir(parents=True, exist_ok=True)
    with timebox.teed(p.archive / f"gpu_quick_{p.results.name}.log"):
        print(f"gpu-quick: {p.preset.name}, {cfg.budget_s:.0f} s; the steps: "
              f"{', '.join(i.label for i in p.items) or 'none (nothing is lacking)'}", flush=True)
        return quick_run.run(cfg, p, started)


if __name__ == "__main__":
    raise SystemExit(main())
