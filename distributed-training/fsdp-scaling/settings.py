"""The lab's one configuration: every runner (bench.py, at_scale.py, project.py) reads it, so `ARGS`
given to make reach all of them and the resolved config is saved beside every CSV. The presets are
functions (cpu(): the tiny model in fp32; cuda(): the medium model in bf16); --gpu picks one and every
other flag overrides it (common.config.parse_preset; --help shows the preset's values).

Validation that needs the world size (HSDP's mesh, the strong-scaling batch split) lives in
`check_world`, which the runners call before any process group exists, and which `make` runs for
every planned world size before the first torchrun launch (`bench.py --preflight`): a bad
combination exits 2 with one line and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from common.dist import check_batch_split
from common.hardware import get_preset
from common.model import GPTConfig
from common.runner import RESUME_MAY_CHANGE, RunFlags

LAB = Path(__file__).resolve().parent

STRATEGIES = ("single", "ddp", "zero1", "zero2", "zero3", "hsdp")
FSDP_STRATEGIES = ("zero2", "zero3", "hsdp")
MODES = ("strong", "weak")

# Model sizes (vocab comes from the data: 256 for the byte-level stdlib corpus). tiny is what 2 CPU
# cores can train in seconds; medium (~300 M parameters) keeps one H100 busy enough for MFU to mean
# something. Every dim is a power of two so FSDP2's Shard(0) splits evenly up to 128 ranks.
MODELS: dict[str, dict] = {
    "tiny": dict(d_model=128, n_layers=4, n_heads=4, seq_len=128),
    "small": dict(d_model=512, n_layers=8, n_heads=8, seq_len=512),
    "medium": dict(d_model=1024, n_layers=24, n_heads=16, seq_len=1024),
}


def _h(text: str, **kw) -> dict:
    return {"help": text, **kw}


@dataclass(frozen=True, kw_only=True)
class Config(RunFlags):
    strategies: tuple[str, ...] = field(default=STRATEGIES, metadata=_h(f"subset of {','.join(STRATEGIES)}"))
    modes: tuple[str, ...] = field(default=MODES, metadata=_h("strong (fixed global batch), weak (fixed per rank)"))
    model: str = field(metadata=_h("model size (the preset's: tiny on CPU, medium on GPUs)", choices=tuple(MODELS)))
    global_batch: int = field(default=16, metadata=_h("strong scaling: sequences per optimizer step, all ranks"))
    micro_batch: int = field(default=4, metadata=_h("weak scaling: sequences per rank per micro-step"))
    grad_accum: int = field(default=2, metadata=_h("micro-steps per optimizer step (no gradient sync before the last)"))
    warmup: int = field(default=1, metadata=_h("untimed optimizer steps first (FSDP2 initialises lazily)"))
    steps: int = field(default=5, metadata=_h("timed optimizer steps (the median is reported)"))
    optimizer: str = field(default="adamw", metadata=_h("adamw or sgd", choices=("adamw", "sgd")))
    lr: float = field(default=3e-4, metadata=_h("learning rate"))
    precision: str = field(metadata=_h("fp32 or bf16 (the preset's: fp32 on CPU, bf16 on GPUs)",
                                       choices=("fp32", "bf16")))
    hsdp_shard: int = field(default=0, metadata=_h("HSDP shard-group size; 0 = ranks per node, or W/2 on one node"))
    prefetch: bool = field(default=False, metadata=_h("explicit FSDP2 prefetch of the next block in the timed runs"))
    profile: bool = field(default=True, metadata=_h("GPU only: torch.profiler overlap, prefetch off and on"))
    data: str = field(default="", metadata=_h("nanoGPT dir with train.bin/val.bin; empty = stdlib bytes"))
    seed: int = field(default=0, metadata=_h("model init and batch order"))
    worlds: tuple[int, ...] = field(default=(1,), metadata=_h("world sizes the sweep will launch (preflight checks)"))
    preflight: bool = field(default=False, metadata=_h("check the plan for every --worlds, prepare the run folder; "
                                                       "then run what follows `--` (make's launches) under its lock"))
    append: bool = field(default=False, metadata=_h("add rows to this preset's CSVs (the make sweep's later launches)"))
    scale_worlds: tuple[int, ...] = field(default=(8, 16, 32, 64, 128, 1024),
                                          metadata=_h("at_scale.py: simulated world sizes (fake process group)"))
    node_size: int = field(default=8, metadata=_h("GPUs per node assumed at scale (HSDP shard group, projection)"))
    timeout_s: float = field(default=300.0, metadata=_h("a collective waiting longer ends the run"))

    def __post_init__(self):
        for name, allowed in (("strategies", STRATEGIES), ("modes", MODES)):
            values = getattr(self, name)
            bad = [v for v in values if v not in allowed]
            if bad or not values:
                raise ValueError(f"--{name} got {bad[0] if bad else 'nothing'!r}; allowed: {', '.join(allowed)}")
        for name in ("global_batch", "micro_batch", "grad_accum", "steps", "node_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(self, name)}")
        if self.warmup < 0 or self.hsdp_shard < 0 or self.lr <= 0 or self.timeout_s <= 0:
            raise ValueError("--warmup and --hsdp-shard must be >= 0, --lr and --timeout-s > 0")
        for name in ("worlds", "scale_worlds"):
            if not getattr(self, name) or min(getattr(self, name)) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be a list of positive world sizes")
        bad = [w for w in self.scale_worlds if w % self.node_size]
        if bad:
            raise ValueError(f"--scale-worlds {bad[0]} is not a multiple of --node-size {self.node_size} "
                             "(HSDP at scale shards within a node)")
        get_preset(self.gpu)  # an unknown preset: ValueError naming the valid ones
        if self.data:
            missing = [n for n in ("train.bin", "val.bin") if not (Path(self.data) / n).is_file()]
            if missing:
                raise ValueError(f"--data {self.data}: " + ("no such folder" if not Path(self.data).is_dir() else
                                 f"missing {', '.join(missing)}") + " (a nanoGPT folder with train.bin and val.bin)")


def cpu() -> Config:
    """2 CPU cores: the tiny model in fp32, a sweep of every strategy in minutes."""
    return Config(gpu="cpu", model="tiny", precision="fp32")


def cuda(name: str = "h100") -> Config:
    """GPUs: the medium model (~300M parameters) in bf16, busy enough for MFU to mean something."""
    return Config(gpu=name, model="medium", precision="bf16")


def preset(gpu: str = "auto") -> Config:
    """The preset --gpu picks (auto: this machine's), with --gpu as given (the runners resolve it)."""
    return replace(cpu() if get_preset(gpu).name == "cpu" else cuda(), gpu=gpu)


# Flags that do not change what is measured (a run differing only in them, or in the run flags, is still the
# preset's run: common.runner.experiment), and the ones a resumed run may change.
OPERATIONAL = ("worlds", "preflight", "append", "profile", "timeout_s")
CONFIG_IGNORE = (*RESUME_MAY_CHANGE, "append", "preflight", "worlds", "timeout_s")


def gpt_config(cfg: Config, vocab_size: int = 256) -> GPTConfig:
    return GPTConfig(vocab_size=vocab_size, **MODELS[cfg.model])


def describe_model(g: GPTConfig) -> str:
    return f"d{g.d_model}-L{g.n_layers}-h{g.n_heads}-T{g.seq_len}-V{g.vocab_size}"


def parse_model(desc: str) -> GPTConfig:
    """The inverse of describe_model (the CSVs name their model this way)."""
    v = {part[0]: int(part[1:]) for part in desc.split("-")}
    return GPTConfig(vocab_size=v["V"], seq_len=v["T"], d_model=v["d"], n_layers=v["L"], n_heads=v["h"])


def hsdp_mesh_shape(world: int, hsdp_shard: int = 0, local_world: int | None = None,
                    nnodes: int = 1) -> tuple[int, int]:
    """(replicate, shard) for HSDP. Auto (0): shard within a node, replicate across nodes (the usual
    choice: all-gathers and reduce-scatters stay on NVLink); on one node, two replica groups."""
    if hsdp_shard:
        shard = hsdp_shard
    elif nnodes > 1 and local_world:
        shard = local_world
    else:
        shard = world // 2 if world % 2 == 0 else world
    if shard > world or world % shard:
        raise ValueError(f"hsdp needs the world size ({world}) to be a multiple of its shard group "
                         f"(--hsdp-shard {shard}); pick a divisor of {world} or drop hsdp from --strategies")
    return world // shard, shard


def check_world(cfg: Config, world: int, local_world: int | None = None, nnodes: int = 1) -> None:
    """Everything that depends on the world size; ValueError (-> exit 2) before anything runs."""
    if "strong" in cfg.modes:
        check_batch_split(cfg.global_batch, cfg.grad_accum, world, nnodes, "--global-batch")
    if "hsdp" in cfg.strategies:
        hsdp_mesh_shape(world, cfg.hsdp_shard, local_world, nnodes)
    if cfg.strategies == ("single",) and world > 1:
        raise ValueError(f"strategy 'single' is the one-process baseline; it cannot run at world size {world}")
