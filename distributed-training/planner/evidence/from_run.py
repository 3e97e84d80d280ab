"""`make plan ARGS="--from-run <csv> [--run NAME]"`: one measured run priced exactly as its lab's report prices
it, so the CLI and the report's predicted column give one number.

The report's column (vs_measured.py) prices every GPU row with explain_rows.compare: the row's own columns read
by own_runs.py (model shape, precision, FP8 backend and recipe, torch.compile, the Adam implementation its lab
runs, degrees, micro-batch, the kernels its profiler counted where it did) and the sustained matmul fraction of
the GPU's committed GEMM benchmark. Typing those as flags invites a mismatch (the issue's example: the CLI
pinned to fp8-train's preset predicted 14.6% faster than measured where the report said 5.8%, because the
report knew the optimizer and the kernel count); reading the run's CSV does not. Nothing is searched: the run
is priced as it ran.

    PYTHONPATH=distributed-training python -m planner.plan --from-run distributed-training/fp8-train/results/h100_ws1/steps.csv --run te-delayed
"""

from __future__ import annotations

from pathlib import Path

from common.csvread import BadResults

from . import explain_rows, own_runs


def _rel(path: Path) -> str:
    return own_runs._rel(path)


def _own_readers(p: Path) -> tuple | None:
    """The readers of the lab whose folder holds `p` (None for a file outside the labs)."""
    try:
        return own_runs.READERS.get(p.resolve().relative_to(own_runs.LABS).parts[0])
    except ValueError:
        return None


def runs_in(path: str) -> list[own_runs.Run]:
    """Every GPU run own_runs reads from the file `path` (its readers look in the file's folder and the one above).

    A file of a lab's results is read by that lab's readers, as its report reads it: a damaged file among those
    they read (the file, its saved config, the run folders beside it) is one line (ValueError). A file elsewhere (a
    run copied home) is tried with every lab's readers, each of which skips what is not its kind."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--from-run: no such file {path}")
    own = _own_readers(p)
    readers = own or tuple(r for rs in own_runs.READERS.values() for r in rs)
    want, found = _rel(p), {}
    for reader in readers:
        for folder in (p.parent, p.parent.parent):
            try:
                runs = reader(folder)
            except BadResults as e:
                if own is not None or (folder == p.parent and str(p) in str(e)):
                    raise ValueError(f"--from-run: {e}") from None
                continue
            except (ValueError, KeyError, TypeError):
                continue
            found.update({(r.file, r.name): r for r in runs if r.file == want})
    return list(found.values())


def pick(path: str, name: str | None) -> own_runs.Run:
    """The run of `path` named `name` (a name as the report prints it, or its last part), or the file's only run."""
    runs = runs_in(path)
    if not runs:
        raise ValueError(f"--from-run {path}: no GPU row the planner prices (fp8-train steps/bench_step, fsdp-scaling, "
                         "tp-attention, parallel-3d runs; a CPU row measures core contention, not a GPU)")
    if name is None:
        if len(runs) > 1:
            raise ValueError(f"--from-run {path} holds {len(runs)} runs: name one with --run (one of "
                             f"{', '.join(r.name for r in runs[:8])}{', ...' if len(runs) > 8 else ''})")
        return runs[0]
    chosen = [r for r in runs if name in (r.name, r.name.split("/")[-1])]
    if len(chosen) != 1:
        raise ValueError(f"--run {name!r} is not one run of {path} (its runs: "
                         f"{', '.join(r.name for r in runs[:8])}{', ...' if len(runs) > 8 else ''})")
    return chosen[0]


def report(run: own_runs.Run) -> dict:
    """The run, what the planner read of it, and the report's prediction with its error."""
    c = explain_rows.compare([run], explain_rows.measured_calibration())[0]
    s, lay = run.stack, run.layout
    return {"file": run.file, "run": run.name, "gpu": run.gpu, "kind": run.kind, "unit": run.unit,
            "measured": run.measured, "predicted": c.predicted.value, "error": c.error,
            "shape": None if run.shape is None else run.shape.describe(),
            "software": {"precision": s.precision, "backend": s.backend, "recipe": s.recipe, "compiled": s.compiled,
                         "optimizer": s.optimizer, "weights": s.weights, "fp8_eager": s.fp8_eager,
                         **run.detail},
            "layout": {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "zero": lay.zero, "microbatch": lay.microbatch,
                       "micro_batches": lay.micro_batches, "interleave": lay.interleave,
                       "recompute": lay.recompute},
            "note": c.predicted.note, "projection": "cost-model projection of a measured run, priced from its CSV"}


def lines(rep: dict) -> list[str]:
    err = "" if rep["error"] is None else f" ({rep['error']:+.1%} vs measured)"
    return [f"run      {rep['run']} in {rep['file']} ({rep['gpu']}), priced as its lab's report prices it: from its "
            "own columns, nothing searched",
            f"model    {rep['shape']}",
            "software " + ", ".join(f"{k} {v}" for k, v in rep["software"].items()),
            "layout   " + ", ".join(f"{k} {v}" for k, v in rep["layout"].items()),
            f"measured {rep['measured']:,.1f} {rep['unit']}",
            f"predicted {rep['predicted']:,.1f} {rep['unit']}{err} (a cost-model projection)"
            + (f"; {rep['note']}" if rep["note"] else "")]
