"""fp8-train's settings: one frozen dataclass (every flag, its default and help) and the presets.

A preset is a function that returns a complete Config (cpu(), h100(), ...; `preset(name)` looks one up):
the command line takes the preset that --gpu and --fp8-backend pick (auto: this machine's) and every other flag
overrides a field of it (`parse`, on common.config.parse_preset; --help shows the preset's values). The run-folder
flags (--gpu --results --resume --promote) are common.runner.RunFlags', as in every lab. The config is what is saved
beside the results (steps.config.json) and what --resume compares against. A test config is a preset with a few fields
replaced: `dataclasses.replace(preset("cpu"), steps=5)`.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

from common.config import parse_preset, parse_size
from common.hardware import GPUPreset, get_preset
from common.runner import RUN_FLAGS, RunFlags
from health.alerts import Thresholds
from precision.modes import BACKENDS, DEFAULT_FP8_MODULES, LOW
from precision.mx import MX_SCALE_RULES
from precision.scaling import DelayedScaling
from training.faults import parse as parse_faults


# The fields without a default are the ones a preset sets (model, runs, schedule, compile, bound, sweep,
# checkpoints): a Config is built from a preset, never from half a set of defaults.
@dataclass(frozen=True, kw_only=True)
class Config(RunFlags):
    runs: tuple[str, ...] = field(metadata={"help": "precision[:backend] list"})
    only: tuple[str, ...] = field(default=(), metadata={"help": "train only these of the planned runs now "
                                                                "(precision[:backend]); the others later with "
                                                                "--resume, which publishes once all are done"})
    list_runs: bool = field(default=False, metadata={"help": "print the plan (each run, or why it is skipped here) "
                                                          "and stop: what make gpu-quick orders its steps by"})
    publish_finished: bool = field(default=False, metadata={
        "help": "merge the plan's finished runs into results/ now and stop (the end of a short GPU job); a run cut "
                "off mid-way loses its rows and checkpoint: --resume trains it again from its first step"})
    fp8_backend: str = field(default="auto", metadata={"help": "backend for fp8 runs", "choices": BACKENDS})
    seed: int = field(default=0, metadata={"help": "seed of every run (weights and batch order)"})
    noise_seeds: int = field(metadata={"help": "bf16 seeds for the noise band"})
    steps: int = field(metadata={"help": "optimizer steps"})
    batch: int = field(metadata={"help": "global sequences per step"})
    grad_accum: int = field(default=1, metadata={"help": "micro-batches per step"})
    seq_len: int = field(metadata={"help": "tokens per sequence"})
    d_model: int = field(metadata={"help": "hidden size"})
    n_layers: int = field(metadata={"help": "blocks"})
    n_heads: int = field(metadata={"help": "attention heads"})
    lr: float = field(metadata={"help": "peak AdamW learning rate"})
    warmup: int = field(metadata={"help": "warm-up steps"})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay on matrices"})
    clip: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    val_every: int = field(default=25, metadata={"help": "validation loss every N steps (0 = only at the end)"})
    val_batches: int = field(default=4, metadata={"help": "validation batches per evaluation"})
    log_every: int = field(default=50, metadata={"help": "print a line every N steps"})
    stats_every: int = field(default=10, metadata={"help": "FP8 tensors' amax and scale to fp8.csv every N steps"})
    fractions_every: int = field(default=50, metadata={"help": "FP8 underflow/saturation fractions every N steps"})
    fp8_modules: tuple[str, ...] = field(default=DEFAULT_FP8_MODULES, metadata={"help": "modules in low precision"})
    hp_modules: tuple[str, ...] = field(default=(), metadata={"help": "globs kept high precision anyway"})
    fp8_scaling: str = field(default="delayed", metadata={"help": "per-tensor scaling",
                                                          "choices": ["delayed", "current"]})
    amax_history: int = field(default=16, metadata={"help": "delayed scaling: amax window (TE default 1024)"})
    amax_algo: str = field(default="max", metadata={"help": "delayed scaling: amax over the window",
                                                    "choices": ["max", "most_recent"]})
    fp8_margin: int = field(default=0, metadata={"help": "delayed scaling: scale /= 2^margin"})
    torchao_recipe: str = field(default="tensorwise", metadata={"help": "torchao recipe",
                                                                "choices": ["tensorwise", "rowwise"]})
    mx_scale_rule: str = field(default=MX_SCALE_RULES[0], metadata={
        "help": "emulated MXFP8/MXFP4 E8M0 block scale: te = TransformerEngine's (exponent rounded up, nothing "
                "saturates), ocp = the OCP MX v1.0 spec's floor(log2 amax) - emax (precision/mx.py)",
        "choices": MX_SCALE_RULES})
    compile: bool = field(metadata={"help": "torch.compile each block"})
    bound: bool = field(metadata={"help": "measure the FP8 bound after the first BF16 run (bound.csv)"})
    sweep_hidden: tuple[int, ...] = field(metadata={"help": "hidden sizes for the FP8 crossover sweep"})
    sweep_steps: int = field(default=30, metadata={"help": "steps per sweep point (half warm-up)"})
    data: str | None = field(default=None, metadata={"help": "nanoGPT train.bin/val.bin dir (default: stdlib)"})
    data_size: str = field(default="16M", metadata={"help": "bytes of the stdlib corpus to read"})
    threads: int = field(default=0, metadata={"help": "torch threads (0 = torch's default)"})
    # ---- training health (issue 7) ----
    monitor: bool = field(default=True, metadata={"help": "health metrics and alerts (off: loss and grad norm only)"})
    health_every: int = field(default=10, metadata={"help": "per-layer norms, activation ranges, grad SNR every N"})
    on_nan: str = field(default="skip", metadata={"help": "policy for a non-finite loss or gradient",
                                                  "choices": ["skip", "reduce-lr", "rollback", "stop"]})
    nan_lr_factor: float = field(default=0.5, metadata={"help": "reduce-lr: multiply the lr by this"})
    inject: tuple[str, ...] = field(default=(), metadata={"help": "faults: nan@STEP, spike@STEP, overflow@STEP"})
    spike_scale: float = field(default=1e3, metadata={"help": "spike@: gradient multiplier"})
    overflow_scale: float = field(default=4096.0, metadata={"help": "overflow@: FP8 input multiplier"})
    ckpt_every: int = field(metadata={"help": "checkpoint every N steps, on SIGTERM and at the end "
                                               "(0: no checkpoints)"})
    keep_ckpts: int = field(default=1, metadata={"help": "checkpoints of completed runs kept on disk: the newest N "
                                                         "(the run in progress always keeps its own)"})
    ckpt_dir: str = field(default="", metadata={"help": "checkpoint dir (default: checkpoints/ in the run folder, "
                                                        "runs/<tag>/checkpoints)"})
    dashboard_every: int = field(default=25, metadata={"help": "rewrite the HTML dashboard every N steps (0 = end)"})
    dashboard_refresh: int = field(default=10, metadata={"help": "seconds between reloads of a live dashboard"})
    progress: bool = field(default=True, metadata={"help": "progress bar (on a terminal)"})
    spike_sigma: float = field(default=6.0, metadata={"help": "alert: grad norm above mean + k sigma"})
    spike_window: int = field(default=128, metadata={"help": "alert: steps in the spike window"})
    spike_factor: float = field(default=10.0, metadata={"help": "alert: grad norm above k x the running max"})
    alert_warmup: int = field(default=20, metadata={"help": "alert: steps before spike/scale alerts arm"})
    plateau_patience: int = field(default=5, metadata={"help": "alert: evaluations without improvement"})
    plateau_threshold: float = field(default=1e-3, metadata={"help": "alert: relative improvement that counts"})
    scale_jump: float = field(default=8.0, metadata={"help": "alert: FP8 scale change factor"})
    scale_window: int = field(default=16, metadata={"help": "alert: steps the scale change is measured over"})

    def __post_init__(self):
        for name in ("steps", "batch", "seq_len", "d_model", "n_layers", "n_heads", "noise_seeds"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup", "ckpt_every", "threads", "val_every", "stats_every", "fractions_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if not self.runs:
            raise ValueError("--runs must name at least one precision[:backend] run")
        if self.grad_accum < 1 or self.val_batches < 1 or self.log_every < 1 or self.sweep_steps < 2:
            raise ValueError("--grad-accum, --val-batches and --log-every must be >= 1 and --sweep-steps >= 2")
        if self.batch % self.grad_accum:
            raise ValueError(f"--batch {self.batch} must be divisible by --grad-accum {self.grad_accum}")
        if self.lr < 0 or self.clip <= 0:
            raise ValueError(f"--lr must be >= 0 and --clip > 0, got {self.lr}, {self.clip}")
        DelayedScaling(self.fp8_margin, self.amax_history, self.amax_algo)  # validates the recipe
        parse_size(self.data_size)
        parse_faults(self.inject)
        self.thresholds  # validates the alert thresholds
        if self.health_every < 0 or self.dashboard_every < 0 or self.dashboard_refresh < 1:
            raise ValueError("--health-every/--dashboard-every must be >= 0 and --dashboard-refresh >= 1")
        if not 0 < self.nan_lr_factor < 1:
            raise ValueError(f"--nan-lr-factor must be in (0, 1), got {self.nan_lr_factor}")
        if self.keep_ckpts < 0:
            raise ValueError(f"--keep-ckpts must be >= 0, got {self.keep_ckpts}")
        if self.on_nan == "rollback" and self.ckpt_every == 0:
            raise ValueError("--on-nan rollback needs checkpoints to roll back to: set --ckpt-every > 0")

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds(self.spike_sigma, self.spike_window, self.spike_factor, self.alert_warmup,
                          self.plateau_patience, self.plateau_threshold, self.scale_jump, self.scale_window)

    @property
    def recipe(self) -> DelayedScaling:
        return DelayedScaling(self.fp8_margin, self.amax_history, self.amax_algo)


# Flags that do not change what is measured: a run differing from its preset only in them is the preset's run
# (published to results/), and a checkpoint resumes across them; every other field is part of the result
# (Trainer.fingerprint, what a checkpoint must match).
OPERATIONAL = ("gpu", *RUN_FLAGS, "ckpt_every", "ckpt_dir", "progress", "dashboard_every", "dashboard_refresh",
               "threads", "log_every", "only", "list_runs", "publish_finished")


# GPU presets compare where FP8 can win (fp8-anchors.md section 5): hidden 4096, 8 blocks, 8K tokens per
# step, every block compiled; BF16 x3 distinct seeds for the noise band, FP8 through torchao, the lab's
# own layer, TransformerEngine's te.Linear swap and TE's fused modules, and the measured FP8 bound
# (bound.py). No fp32 run on GPUs (it says nothing about FP8 and costs more than the rest).
# Checkpoints are off there: one is ~19 GB at this size (--ckpt-every N turns them on).
# The CPU preset answers the lab's question in a few minutes on 2 cores (BF16 x2 seeds for the band, FP8 emulated
# and native); the wider comparison (fp32, a third seed, MXFP8, NVFP4) is opt-in: `make fp8-train-wide`.
def cpu() -> Config:
    return Config(gpu="cpu", runs=("bf16", "fp8:emulated", "fp8:native"), noise_seeds=2, steps=200, batch=8,
                  seq_len=128, d_model=128, n_layers=2, n_heads=4, lr=3e-3, warmup=20, compile=False,
                  sweep_hidden=(), ckpt_every=50, bound=False)


def h100() -> Config:
    return Config(gpu="h100", runs=("bf16", "fp8:torchao", "fp8:native", "fp8:te", "fp8:te-fused"), noise_seeds=3,
                  steps=200, batch=8, seq_len=1024, d_model=4096, n_layers=8, n_heads=32, lr=3e-4, warmup=20,
                  compile=True, sweep_hidden=(), ckpt_every=0, bound=True)


def h200() -> Config:
    return dataclasses.replace(h100(), gpu="h200")


def b200() -> Config:
    """The h100 set plus MXFP8 and NVFP4 through TransformerEngine (Blackwell's block-scaled formats)."""
    base = h100()
    return dataclasses.replace(base, gpu="b200", runs=base.runs + ("mxfp8:te", "nvfp4:te"))


def gb200() -> Config:
    return dataclasses.replace(b200(), gpu="gb200")


def a100() -> Config:
    """No FP8 hardware: fp32 vs bf16 vs fp16 (+ GradScaler)."""
    return Config(gpu="a100", runs=("fp32", "bf16", "fp16"), noise_seeds=2, steps=400, batch=8, seq_len=1024,
                  d_model=1024, n_layers=8, n_heads=8, lr=3e-4, warmup=40, compile=True, sweep_hidden=(),
                  ckpt_every=200, bound=False)


def a100_40gb() -> Config:
    return dataclasses.replace(a100(), gpu="a100-40gb")


PRESETS: dict[str, Callable[[], Config]] = {"cpu": cpu, "h100": h100, "h200": h200, "b200": b200, "gb200": gb200,
                                            "a100": a100, "a100-40gb": a100_40gb}


def preset(name: str, fp8_backend: str = "auto") -> Config:
    """The named hardware preset's Config (a GPU the table has no row for, e.g. h100-gt or an unknown one
    detected by --gpu auto, trains the h100 set). With a backend, the preset's high-precision runs plus
    fp8:<backend> (what `--fp8-backend X` without --runs asks for)."""
    cfg = PRESETS.get(name, h100)()
    if fp8_backend == "auto":
        return cfg
    runs = tuple(r for r in cfg.runs if r.split(":")[0] not in LOW) + (f"fp8:{fp8_backend}",)
    return dataclasses.replace(cfg, runs=runs, fp8_backend=fp8_backend)


class Parsed(NamedTuple):
    cfg: Config
    hardware: GPUPreset
    named_runs: bool  # --runs or --fp8-backend given: a backend that cannot run here is an error, not a skip


def parse(argv: Sequence[str] | None, description: str | None = None, prog: str | None = None) -> Parsed:
    """The command line: --gpu (auto: this machine's) and --fp8-backend pick the preset, every other flag
    overrides a field of it. An unknown --gpu, or one that auto-detection cannot read, is one line, exit 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    picked: list[GPUPreset] = []

    def chosen(gpu: str = "auto", fp8_backend: str = "auto") -> Config:
        picked.append(get_preset(gpu))  # ValueError naming the valid presets: parse_preset's one line
        backend = fp8_backend if fp8_backend in BACKENDS else "auto"  # another name fails the full parse
        return dataclasses.replace(preset(picked[-1].name, backend), gpu=gpu)

    cfg = parse_preset(Config, argv, chosen, keys=("gpu", "fp8_backend"), description=description, prog=prog)
    named = any(a == "--runs" or a.startswith("--runs=") for a in argv)
    return Parsed(cfg, picked[-1], named or cfg.fp8_backend != "auto")
