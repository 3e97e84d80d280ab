"""fp8-train: the same GPT trained in FP32, BF16, FP16 and FP8 -- speed, memory, loss curves, scales.

What it measures and why. FP8 GEMMs run at twice the BF16 tensor-core rate on Hopper, but every
FP8 tensor needs a scale, casts cost memory traffic, and small GEMMs do not win (fp8-anchors.md
section 5). This runner trains one GPT from identical initial weights on identical batches in
each precision and records, per step, loss, grad/param norms, update ratio, lr, tokens/s, step
time and memory (steps.csv), and per FP8 tensor its amax, scale and underflow/saturation
fractions (fp8.csv). BF16 runs with several seeds give the seed-to-seed noise band that decides
whether FP8 "matches". On GPU presets a hidden-size sweep (sweep.csv) shows where FP8 starts to pay.

Runs (--runs, comma-separated `precision[:backend]`; precision fp32|bf16|fp16|fp8|mxfp8|mxfp4|nvfp4,
backend auto|te|torchao|native|emulated). Presets (GPU=, common/hardware.py) pick the runs and the model:
    cpu        tiny GPT, fp32 / bf16 (emulated) x3 seeds / fp8 native + emulated / mxfp8, nvfp4 emulated
    h100 h200  hidden 2048, 8 layers, 8K tokens/step, torch.compile; fp8 native, torchao, te; sweep 512-4096
    a100       no FP8 hardware: fp32 vs bf16 vs fp16 + GradScaler
    b200       the h100 set plus mxfp8 and nvfp4 through TransformerEngine
Preset runs whose backend is missing are skipped with the reason; a backend you name yourself
(--runs or --fp8-backend) that cannot run here is an error (exit 2) that says how to get it.

Commands:
    make fp8-train GPU=cpu                                    # CPU preset + report (a few minutes)
    make fp8-train GPU=h100                                   # 1 GPU
    make fp8-train-run GPU=h100 NPROC=8                       # 8 GPUs, FSDP2 (torchrun)
    sbatch --nodes=2 slurm/lab.sbatch fp8-train GPU=h100      # N nodes
    PYTHONPATH=distributed-training python distributed-training/fp8-train/train.py --gpu cpu \\
        --runs bf16,fp8:emulated --steps 50                   # by hand; --help lists every flag
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

import backends
from common.config import config_dict, parse_config, parse_size
from common.data import load_data
from common.dist import DistInfo, distributed, fail, print0
from common.fsdp import apply_fsdp
from common.hardware import CHOICES, get_preset
from common.model import GPTConfig
from common.results import ResultsWriter, provenance
from precision import BACKENDS, DEFAULT_FP8_MODULES, LOW, PrecisionSettings, RunSpec, parse_runs, prepare, \
    select_modules
from scaling import DelayedScaling
from trainer import FP8_COLUMNS, STEP_COLUMNS, Trainer, Writers

LAB = Path(__file__).resolve().parent
BENCH_VERSION = "1"
PRESETS: dict[str, dict] = {
    "cpu": dict(runs=("fp32", "bf16", "fp8:native", "fp8:emulated", "mxfp8:emulated", "nvfp4:emulated"),
                noise_seeds=3, steps=200, batch=8, seq_len=128, d_model=128, n_layers=2, n_heads=4, lr=3e-3,
                warmup=20, compile=False, sweep_hidden=()),
    "h100": dict(runs=("fp32", "bf16", "fp8:native", "fp8:torchao", "fp8:te"), noise_seeds=2, steps=400, batch=8,
                 seq_len=1024, d_model=2048, n_layers=8, n_heads=16, lr=3e-4, warmup=40, compile=True,
                 sweep_hidden=(512, 1024, 2048, 4096)),
    "a100": dict(runs=("fp32", "bf16", "fp16"), noise_seeds=2, steps=400, batch=8, seq_len=1024, d_model=1024,
                 n_layers=8, n_heads=8, lr=3e-4, warmup=40, compile=True, sweep_hidden=()),
}
PRESETS["h200"] = PRESETS["h100"]
PRESETS["b200"] = dict(PRESETS["h100"], runs=PRESETS["h100"]["runs"] + ("mxfp8:te", "nvfp4:te"))
PRESETS["gb200"] = PRESETS["b200"]
PRESETS["a100-40gb"] = PRESETS["a100"]


@dataclass(frozen=True)
class Config:
    gpu: str = field(default="auto", metadata={"help": "preset", "choices": CHOICES})
    runs: tuple[str, ...] = field(default=(), metadata={"help": "precision[:backend] list (empty = preset)"})
    fp8_backend: str = field(default="auto", metadata={"help": "backend for fp8 runs", "choices": BACKENDS})
    seed: int = field(default=0, metadata={"help": "seed of every run (weights and batch order)"})
    noise_seeds: int = field(default=0, metadata={"help": "bf16 seeds for the noise band (0 = preset)"})
    steps: int = field(default=0, metadata={"help": "optimizer steps (0 = preset)"})
    batch: int = field(default=0, metadata={"help": "global sequences per step (0 = preset)"})
    grad_accum: int = field(default=1, metadata={"help": "micro-batches per step"})
    seq_len: int = field(default=0, metadata={"help": "tokens per sequence (0 = preset)"})
    d_model: int = field(default=0, metadata={"help": "hidden size (0 = preset)"})
    n_layers: int = field(default=0, metadata={"help": "blocks (0 = preset)"})
    n_heads: int = field(default=0, metadata={"help": "attention heads (0 = preset)"})
    lr: float = field(default=0.0, metadata={"help": "peak AdamW learning rate (0 = preset)"})
    warmup: int = field(default=-1, metadata={"help": "warm-up steps (-1 = preset)"})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay on matrices"})
    clip: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    val_every: int = field(default=25, metadata={"help": "validation loss every N steps (0 = only at the end)"})
    val_batches: int = field(default=4, metadata={"help": "validation batches per evaluation"})
    log_every: int = field(default=50, metadata={"help": "print a line every N steps"})
    stats_every: int = field(default=5, metadata={"help": "FP8 tensor statistics every N steps (0 = never)"})
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
    compile: bool | None = field(default=None, metadata={"help": "torch.compile the model (default: preset)"})
    sweep_hidden: tuple[int, ...] | None = field(default=None, metadata={"help": "hidden sizes for the FP8 "
                                                                         "crossover sweep (default: preset)"})
    sweep_steps: int = field(default=30, metadata={"help": "steps per sweep point (half warm-up)"})
    data: str | None = field(default=None, metadata={"help": "nanoGPT train.bin/val.bin dir (default: stdlib)"})
    data_size: str = field(default="16M", metadata={"help": "bytes of the stdlib corpus to read"})
    threads: int = field(default=0, metadata={"help": "torch threads (0 = torch's default)"})
    out: str = field(default="", metadata={"help": "results dir (default: fp8-train/results/<preset>)"})

    def __post_init__(self):
        for name in ("steps", "batch", "seq_len", "d_model", "n_layers", "n_heads", "noise_seeds", "threads",
                     "val_every", "stats_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.grad_accum < 1 or self.val_batches < 1 or self.log_every < 1 or self.sweep_steps < 2:
            raise ValueError("--grad-accum, --val-batches and --log-every must be >= 1 and --sweep-steps >= 2")
        if self.batch and self.batch % self.grad_accum:
            raise ValueError(f"--batch {self.batch} must be divisible by --grad-accum {self.grad_accum}")
        if self.lr < 0 or self.clip <= 0:
            raise ValueError(f"--lr must be >= 0 and --clip > 0, got {self.lr}, {self.clip}")
        DelayedScaling(self.fp8_margin, self.amax_history, self.amax_algo)  # validates the recipe
        parse_size(self.data_size)

    @property
    def recipe(self) -> DelayedScaling:
        return DelayedScaling(self.fp8_margin, self.amax_history, self.amax_algo)


def with_preset(cfg: Config, preset_name: str, explicit_runs: bool) -> Config:
    """Fill every 'from preset' field; the result is what gets saved beside the CSVs."""
    p = PRESETS.get(preset_name, PRESETS["h100"])
    upd = {k: p[k] for k in ("steps", "batch", "seq_len", "d_model", "n_layers", "n_heads", "lr", "noise_seeds")
           if not getattr(cfg, k)}
    upd.update({k: p[k] for k, unset in (("warmup", cfg.warmup < 0), ("compile", cfg.compile is None),
                                         ("sweep_hidden", cfg.sweep_hidden is None)) if unset})
    if not explicit_runs:
        runs = p["runs"]
        if cfg.fp8_backend != "auto":  # `--fp8-backend X` alone: the preset's high-precision runs + fp8:X
            runs = tuple(r for r in runs if r.split(":")[0] not in LOW) + (f"fp8:{cfg.fp8_backend}",)
        upd["runs"] = runs
    return dataclasses.replace(cfg, **upd)


def plan(cfg: Config, device: torch.device, explicit: bool, mcfg: GPTConfig) -> tuple[list, list[str]]:
    """Resolve every run's backend before anything is written: (runnable specs, skipped notes)."""
    specs = parse_runs(cfg.runs, cfg.fp8_backend, cfg.seed, cfg.noise_seeds)
    from common.model import GPT
    with torch.device("meta"):
        select_modules(GPT(mcfg), cfg.fp8_modules, cfg.hp_modules)  # a bad precision map fails here
    keep, skipped = [], []
    for s in specs:
        if s.precision in LOW:
            try:
                backends.resolve(s.precision, s.backend, device)
            except backends.BackendUnavailable as e:
                if explicit:
                    raise
                skipped.append(f"{s.name}: {e}")
                continue
        keep.append(s)
    return keep, skipped


def settings(cfg: Config) -> PrecisionSettings:
    return PrecisionSettings(cfg.fp8_modules, cfg.hp_modules, cfg.recipe, cfg.fp8_scaling, cfg.torchao_recipe,
                             bool(cfg.compile))


def build(cfg: Config, spec: RunSpec, mcfg: GPTConfig, env: DistInfo):
    prep = prepare(spec, mcfg, settings(cfg), env.device)
    if env.world_size > 1:  # FSDP2 per block then root (common.fsdp); fp32 params, autocast does bf16
        from torch.distributed.device_mesh import init_device_mesh
        apply_fsdp(prep.raw, init_device_mesh(env.device.type, (env.world_size,)), reshard_after_forward=True)
    return prep


def sweep(cfg: Config, specs: list[RunSpec], env: DistInfo, data, out: Path, prov: dict) -> None:
    """Tokens/s of bf16 vs each FP8 backend across hidden sizes: where FP8 starts to pay (GPU presets)."""
    w = ResultsWriter(out / "sweep.csv", ["d_model", "n_layers", "run", "precision", "backend", "tokens_per_s",
                                          "step_time_s", "peak_mem_MiB", "tokens_per_step"],
                      key=["d_model", "run"], provenance=prov, enabled=env.is_main)
    for d in cfg.sweep_hidden or ():
        mcfg = GPTConfig(vocab_size=data.vocab_size, seq_len=cfg.seq_len, d_model=d, n_layers=4,
                         n_heads=max(1, d // 128))
        for spec in [s for s in specs if s.precision in ("bf16",) + LOW and s.seed == cfg.seed]:
            prep = build(cfg, spec, mcfg, env)
            sc = dataclasses.replace(cfg, steps=cfg.sweep_steps, stats_every=0)
            tr = Trainer(sc, spec, prep, env, data, mcfg, None)
            times = []
            for step in range(cfg.sweep_steps):
                times.append(tr.train_step(step)["step_time_s"])
            t = sorted(times[cfg.sweep_steps // 2:])[len(times[cfg.sweep_steps // 2:]) // 2]  # median, warm half
            row = dict(d_model=d, n_layers=4, run=spec.name, precision=spec.precision, backend=prep.backend,
                       tokens_per_s=tr.tokens_per_step / t, step_time_s=t, tokens_per_step=tr.tokens_per_step,
                       peak_mem_MiB=torch.cuda.max_memory_allocated() / 2**20 if env.device.type == "cuda" else None)
            w.write(row)
            print0(f"sweep d_model={d:5d} {spec.name:22s} {row['tokens_per_s']:12,.0f} tokens/s")
            del tr, prep


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(Config, argv, description=__doc__, prog="fp8-train")
    explicit = bool(cfg.runs) or cfg.fp8_backend != "auto"
    try:
        preset = get_preset(cfg.gpu)
    except ValueError as e:
        fail(str(e), 2)
    on_gpu = preset.name != "cpu"
    if on_gpu and not torch.cuda.is_available():
        fail(f"GPU={cfg.gpu} needs a CUDA GPU and torch sees none; use GPU=cpu here", 2)
    cfg = with_preset(cfg, preset.name, bool(cfg.runs))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with distributed(device="cuda" if on_gpu else "cpu") as env:
        try:
            mcfg = GPTConfig(seq_len=cfg.seq_len, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads)
            specs, skipped = plan(cfg, env.device, explicit, mcfg)
            data = load_data(cfg.data, parse_size(cfg.data_size))
        except (ValueError, backends.BackendUnavailable) as e:
            fail(str(e), 2)
        mcfg = dataclasses.replace(mcfg, vocab_size=data.vocab_size)
        out = Path(cfg.out) if cfg.out else LAB / "results" / preset.name
        prov = provenance(env, BENCH_VERSION)
        cfg_json = {**config_dict(cfg), "preset": preset.name, "data": data.source, "data_fingerprint":
                    data.fingerprint, "skipped_runs": skipped}
        writers = Writers(
            ResultsWriter(out / "steps.csv", STEP_COLUMNS, key=["run", "step"], provenance=prov, config=cfg_json,
                          enabled=env.is_main),
            ResultsWriter(out / "fp8.csv", FP8_COLUMNS, key=["run", "step", "module", "role"], provenance=prov,
                          enabled=env.is_main))
        for note in skipped:
            print0(f"skipped {note}")
        for spec in specs:
            prep = build(cfg, spec, mcfg, env)
            print0(f"== {spec.name}: backend {prep.backend}" + (f" ({prep.reason})" if prep.reason else "") +
                   "".join(f"; {n}" for n in prep.notes))
            Trainer(cfg, spec, prep, env, data, mcfg, writers, preset.peak_tflops("bf16")).run()
        if cfg.sweep_hidden:
            sweep(cfg, specs, env, data, out, prov)
    return 0


if __name__ == "__main__":
    sys.exit(main())
