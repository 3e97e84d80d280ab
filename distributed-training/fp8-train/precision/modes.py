"""What a run may ask for, as records: the precisions, the backends, a run's identity and its precision settings.

    PRECISIONS   fp32 bf16 fp16 fp8 mxfp8 mxfp4 nvfp4 (what each does: prepare.py)
    LOW          the low-precision ones, each run through a backend (backends.py)
    BACKENDS     what --fp8-backend and --runs precision:backend take: auto and common/fp8_names.py's names
    RunSpec      one run of a plan: precision, backend as asked, seed; its name (`fp8-native-s0`) keys every CSV
    PrecisionSettings   the precision map and the scaling recipe every backend's convert reads

Records only, no model: the backend records (backend.py) and the report (reporting/comparison.py) read them without the
code that converts a model (prepare.py), so nothing here imports a backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.fp8_names import NAMES
from precision.scaling import DelayedScaling

PRECISIONS = ("fp32", "bf16", "fp16", "fp8", "mxfp8", "mxfp4", "nvfp4")
LOW = ("fp8", "mxfp8", "mxfp4", "nvfp4")
BACKENDS = ("auto",) + NAMES  # what --fp8-backend and --runs precision:backend take (backends.REGISTRY's names)
DEFAULT_FP8_MODULES = ("layers.*.attn.wq", "layers.*.attn.wk", "layers.*.attn.wv", "layers.*.attn.wo",
                       "layers.*.mlp.w1", "layers.*.mlp.w2")


@dataclass(frozen=True)
class RunSpec:
    precision: str
    backend: str  # as requested: auto/te/torchao/native/emulated; "torch" for fp32/bf16/fp16
    seed: int

    @property
    def name(self) -> str:
        parts = [self.precision] + ([self.backend] if self.precision in LOW else []) + [f"s{self.seed}"]
        return "-".join(parts)


def parse_runs(items: tuple[str, ...], default_backend: str, seed: int, noise_seeds: int) -> list[RunSpec]:
    """'fp32,bf16,fp8:native,nvfp4:emulated' -> RunSpecs; bf16 repeated over `noise_seeds` seeds."""
    specs: list[RunSpec] = []
    for item in items:
        prec, _, backend = item.partition(":")
        if prec not in PRECISIONS:
            raise ValueError(f"--runs: unknown precision {prec!r} in {item!r}; valid: {', '.join(PRECISIONS)}")
        if prec not in LOW:
            if backend:
                raise ValueError(f"--runs: {prec} takes no backend ({item!r}); backends are for {', '.join(LOW)}")
            backend = "torch"
        backend = backend or default_backend
        if backend not in BACKENDS + ("torch",):
            raise ValueError(f"--runs: unknown backend {backend!r} in {item!r}; valid: {', '.join(BACKENDS)}")
        seeds = range(seed, seed + noise_seeds) if prec == "bf16" else (seed,)
        specs += [RunSpec(prec, backend, s) for s in seeds]
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"--runs lists the same run twice: {', '.join(dup)}")
    return specs


@dataclass(frozen=True)
class PrecisionSettings:
    fp8_modules: tuple[str, ...] = DEFAULT_FP8_MODULES
    hp_modules: tuple[str, ...] = ()
    recipe: DelayedScaling = field(default_factory=DelayedScaling)
    scaling: str = "delayed"  # delayed | current (per-tensor backends)
    torchao_recipe: str = "tensorwise"
    compile: bool = False
    compile_backend: str = "inductor"  # tests use "aot_eager": the same tracing, no code generation
    probes: bool = True  # amax probes where the backend keeps no scaling state (off: nothing recorded)
    mx_scale_rule: str = "te"  # emulated MX formats' E8M0 block-scale rule (mx.py)
