"""A run plan, checked before anything is written: which runs, each with the backend that will run it.

    plan        the runs of the preset or --runs; the precision map, --inject and every backend checked here
                first: a preset run whose backend cannot run here is Skipped with its reason, a backend you
                named yourself is an error (exit 2); the base seed's runs first (they share initial weights).
                Without a device (--list-runs of a GPU preset on a machine without one) backends are not probed
    selected    the planned runs --only names (`bf16-s0`, `bf16`, `fp8:torchao`), in the plan's order
    listing     --list-runs: the plan as lines a program reads (make gpu-quick's slot planner and its run)
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from common.fp8_record import layer_tag
from common.model import GPT, GPTConfig
from precision import backends
from precision.fp8_linear import LAYER_VERSION
from precision.modes import LOW, RunSpec, parse_runs
from precision.prepare import select_modules
from training.faults import parse as parse_faults
from training.settings import Config


def plan(cfg: Config, device: torch.device | None, explicit: bool, mcfg: GPTConfig) -> tuple[list[RunSpec],
                                                                                              list[Skipped]]:
    """Resolve every run's backend before anything is written: (runnable specs, skipped ones with the reason).
    device None: every check but the backends' (which need the machine the plan runs on)."""
    specs = parse_runs(cfg.runs, cfg.fp8_backend, cfg.seed, cfg.noise_seeds)
    with torch.device("meta"):
        select_modules(GPT(mcfg), cfg.fp8_modules, cfg.hp_modules)  # a bad precision map fails here
    late = [f for f in parse_faults(cfg.inject) if f.step >= cfg.steps]
    if late:
        raise ValueError(f"--inject {late[0].kind}@{late[0].step}: the run has steps 0..{cfg.steps - 1} (--steps "
                         f"{cfg.steps}); pick a step inside it")
    if any(f.kind == "overflow" for f in parse_faults(cfg.inject)):
        hp = [s.name for s in specs if s.precision not in LOW]
        if hp:
            raise ValueError(f"--inject overflow@STEP pushes an FP8 tensor out of range; {', '.join(hp)} has none "
                             "(use --runs with FP8 runs only)")
    fused = [s.backend for s in specs if s.backend in backends.REGISTRY and backends.REGISTRY[s.backend].fused_norm]
    if fused and any(f.kind == "overflow" for f in parse_faults(cfg.inject)):
        raise ValueError(f"--inject overflow@STEP scales an FP8 linear's input, which {fused[0]}'s LayerNorm "
                         "renormalises; inject it into another backend's run")
    keep, skipped = [], []
    for s in specs:
        if s.precision in LOW and device is not None:
            try:
                backends.resolve(s.precision, s.backend, device)
            except backends.BackendUnavailable as e:
                if explicit:
                    raise
                skipped.append(Skipped(s, str(e)))
                continue
        keep.append(s)
    selected(keep, cfg.only, skipped)  # an --only item that names no planned run fails here
    # The base seed's runs first: they share one set of initial weights (prepare.initial_gpt caches it).
    keep.sort(key=lambda s: s.seed != cfg.seed)
    return keep, skipped


class Skipped(NamedTuple):
    """A preset run that cannot run here, and why (its backend's own reason)."""
    spec: RunSpec
    reason: str

    def __str__(self) -> str:
        return f"{self.spec.name}: {self.reason}"


def names(item: str, spec: RunSpec) -> bool:
    """Whether an --only item names this run: its name (`bf16-s0`, `fp8-te-fused-s0`) or `precision[:backend]`
    (`bf16`: every bf16 seed; `fp8`: every FP8 backend)."""
    if item == spec.name:
        return True
    prec, _, backend = item.partition(":")
    return spec.precision == prec and backend in ("", spec.backend)


def selected(specs: list[RunSpec], only: tuple[str, ...], skipped: list[Skipped] = ()) -> list[RunSpec]:
    """The planned runs that --only names, in the plan's order (all of them without --only).

    An item that names only preset runs that cannot run here selects nothing: plan() has said why, and the
    rest of a short job still runs. An item that names no run of the plan is an error.
    """
    if not only:
        return specs
    for item in only:
        if not any(names(item, s) for s in list(specs) + [k.spec for k in skipped]):
            raise ValueError(f"--only {item}: not one of this plan's runs ({', '.join(s.name for s in specs)}); "
                             "name a run (bf16-s0) or precision[:backend] (bf16, fp8:torchao)")
    return [s for s in specs if any(names(item, s) for item in only)]


def listing(cfg: Config, specs: list[RunSpec], skipped: list[Skipped], probed: bool) -> list[str]:
    """--list-runs' lines, in the order the plan trains its runs (skipped ones in their place):

        run NAME                 a run of the plan
        skipped NAME: WHY        a preset run whose backend cannot run here
        layer NAME: fp8_linear N the version of the lab's own FP8 layer its rows will name (common/fp8_record.py)
        bound NAME               the FP8 bound is measured after this run (on one GPU)
        unchecked: WHY           backends were not probed here: the plan is the preset's, checked where it runs
    """
    why = {k.spec.name: k.reason for k in skipped}
    order = {s.name: i for i, s in enumerate(parse_runs(cfg.runs, cfg.fp8_backend, cfg.seed, cfg.noise_seeds))}
    every = sorted(specs + [k.spec for k in skipped], key=lambda s: (s.seed != cfg.seed, order[s.name]))
    lines = [f"skipped {s.name}: {why[s.name]}" if s.name in why else f"run {s.name}" for s in every]
    for s in specs:
        backend = backends.REGISTRY.get(s.backend)
        if s.precision == "fp8" and backend is not None and backend.own_layer:
            lines.append(f"layer {s.name}: {layer_tag(LAYER_VERSION)}")
    base = [s.name for s in specs if s.precision == "bf16" and s.seed == cfg.seed]
    if cfg.bound and base:
        lines.append(f"bound {base[0]}")
    if not probed:
        lines.append("unchecked: no CUDA device here; each backend is checked where the plan runs")
    return lines
