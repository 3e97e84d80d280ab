"""parallel-3d's configuration: one frozen dataclass for the training runner, its presets, and the checks that
need the world size. Everything here runs before any process group exists, so a bad combination is one line and
exit code 2 (common.config), not N ranks' tracebacks inside torchrun.

The degrees are the planner's names (planner/plan.py): --tp, --pp, --dp, --cp, --zero, --microbatch,
--global-batch, --interleave, --recompute, and the model as --layers/--hidden/--heads/--kv-heads/--ffn/
--vocab/--seq, so the command `make plan` prints for its choice is accepted here as it stands.

A run is one set of degrees (TP x PP x DP x CP = the torchrun world) and one or more *variants* of the
schedule: every combination of --zero, --recompute and --interleave listed, each measured in turn in
the same launch.

The presets are functions returning a complete Config (cpu(): the tiny GPT, every recompute setting, 1F1B and
interleaved; cuda(): the medium GPT in bf16): preset() picks one for --gpu and fits it to the flags it depends on
(PRESET_KEYS: --model's shape, with --kv-heads = --heads and --ffn = 4 x --hidden where only those are given; no
interleaving without a pipeline, no per-op recompute with CP), and every other flag overrides it (--help shows
its values).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple, TypeVar

from common.cp_bytes import CP_KINDS
from common.cp_checks import heads_problem
from common.hardware import GPUPreset, device_kind, get_preset
from common.model import GPTConfig
from common.runner import RESUME_MAY_CHANGE, RunFlags
from pipeline_stages import split_layers

LAB = Path(__file__).resolve().parent
ZEROS = (2, 3)  # FSDP2 reshard_after_forward False (ZeRO-2 traffic) / True (ZeRO-3); see parallelize.py
RECOMPUTE = ("none", "op", "full")  # the planner's names: op = per-op selective checkpointing (parallelize.py)
RECOMPUTE_ALIASES = {"selective": "op"}  # this lab's earlier name for op, still accepted (and in older result rows)


def recompute_name(name: str) -> str:
    """A recompute setting by its one name (RECOMPUTE), the earlier 'selective' read as 'op'."""
    return RECOMPUTE_ALIASES.get(name, name)

# Model sizes. tiny is what 8 gloo ranks on 2 CPU cores train in seconds (6 layers, so that 4 virtual
# stages are uneven: 1, 2, 2, 1); medium (~300M parameters) keeps 8 GPUs busy enough for MFU to mean
# something. Every width divides by 8 for TP, and vocab 256 is the byte-level corpus (common.data).
MODELS: dict[str, dict] = {
    "tiny": dict(layers=6, hidden=64, heads=4, kv_heads=4, ffn=256, vocab=256, seq=64),
    "small": dict(layers=8, hidden=512, heads=8, kv_heads=8, ffn=2048, vocab=256, seq=512),
    "medium": dict(layers=24, hidden=1024, heads=16, kv_heads=16, ffn=4096, vocab=256, seq=1024),
}
PRESET_KEYS = ("gpu", "model", "pp", "cp", "hidden", "heads")  # the flags preset() fits the rest to


def _h(text: str, **kw) -> dict:
    return {"help": text, **kw}


@dataclass(frozen=True, kw_only=True)
class Config(RunFlags):
    tp: int = field(default=1, metadata=_h("tensor-parallel degree (DTensor TP + sequence parallelism)"))
    pp: int = field(default=1, metadata=_h("pipeline stages across ranks (torch.distributed.pipelining)"))
    dp: int = field(default=0, metadata=_h("data-parallel degree (FSDP2 over it); 0 = world / (tp x pp x cp)"))
    cp: int = field(default=1, metadata=_h("context-parallel degree: each sequence split over cp ranks "
                                           "(context_parallel.py); FSDP2 then shards over dp x cp"))
    cp_kind: str = field(default="ring", metadata=_h("context-parallel design: K/V around a ring, gathered, or heads "
                                                     "scattered by all-to-all (Ulysses)", choices=CP_KINDS))
    world: int = field(default=0, metadata=_h("ranks the launch will have, for checking before torchrun starts "
                                              "(make passes it; under torchrun WORLD_SIZE is used)"))
    zero: tuple[int, ...] = field(metadata=_h("FSDP2 mode(s): 2 = no reshard after forward, 3 = reshard"))
    recompute: tuple[str, ...] = field(metadata=_h("activation checkpointing per block: none, op (per-op selective: "
                                                   "matmul and collective outputs kept; 'selective' is accepted for "
                                                   "it), full"))
    interleave: tuple[int, ...] = field(metadata=_h("virtual stages per rank: 1 = 1F1B, > 1 = interleaved 1F1B"))
    stage_layers: tuple[int, ...] = field(default=(), metadata=_h("layers of each virtual stage, in order "
                                                                  "(empty = balanced, extras to the middle)"))
    model: str = field(metadata=_h("size preset; the shape flags below are its values unless given",
                                   choices=tuple(MODELS)))
    layers: int = field(metadata=_h("transformer blocks"))
    hidden: int = field(metadata=_h("model width"))
    heads: int = field(metadata=_h("attention heads"))
    kv_heads: int = field(metadata=_h("key/value heads (GQA)"))
    ffn: int = field(metadata=_h("MLP width"))
    vocab: int = field(metadata=_h("vocabulary (>= the data's; the corpus is bytes)"))
    seq: int = field(metadata=_h("sequence length"))
    microbatch: int = field(metadata=_h("sequences per micro-batch"))
    global_batch: int = field(metadata=_h("sequences per optimizer step, all replicas"))
    steps: int = field(metadata=_h("timed optimizer steps per variant"))
    warmup: int = field(metadata=_h("untimed steps first"))
    optimizer: str = field(default="adamw", metadata=_h("optimizer", choices=("adamw", "sgd")))
    lr: float = field(default=3e-4, metadata=_h("learning rate"))
    precision: str = field(metadata=_h("fp32 or bf16 (FSDP2's bf16 compute, fp32 master weights)",
                                       choices=("fp32", "bf16")))
    data: str = field(default="", metadata=_h("nanoGPT dir with train.bin/val.bin; empty = stdlib bytes"))
    seed: int = field(default=0, metadata=_h("model init and batch order"))
    timeout_s: float = field(default=300.0, metadata=_h("a collective waiting longer ends the run"))

    def __post_init__(self):
        for name in ("tp", "pp", "cp", "microbatch", "global_batch", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("dp", "world", "warmup"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")
        if self.lr <= 0 or self.timeout_s <= 0:
            raise ValueError("--lr and --timeout-s must be > 0")
        bad = [z for z in self.zero if z not in ZEROS]
        if bad or not self.zero:
            raise ValueError(f"--zero {bad[0] if bad else '(none)'} is not available: FSDP2 gives 2 "
                             "(reshard_after_forward=False) or 3 (True); ZeRO-0/1 keep whole parameters per rank, "
                             "which fully_shard never does")
        object.__setattr__(self, "recompute", tuple(recompute_name(r) for r in self.recompute))
        bad_r = [r for r in self.recompute if r not in RECOMPUTE]
        if bad_r or not self.recompute:
            raise ValueError(f"--recompute {bad_r[0] if bad_r else '(none)'!r}; allowed: {', '.join(RECOMPUTE)}")
        if not self.interleave or any(v < 1 for v in self.interleave) or any(n < 1 for n in self.stage_layers):
            raise ValueError("--interleave and --stage-layers take positive integers")
        for name in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")


def cpu() -> Config:
    """8 gloo ranks on 2 cores: the tiny GPT in fp32, every recompute setting, 1F1B and interleaved 1F1B."""
    return Config(gpu="cpu", model="tiny", **MODELS["tiny"], zero=(3,), recompute=RECOMPUTE, interleave=(1, 2),
                  microbatch=1, global_batch=8, steps=3, warmup=1, precision="fp32")


def cuda(name: str = "h100") -> Config:
    """GPUs: the medium GPT (~300M parameters) in bf16, recompute none and full, 1F1B."""
    return Config(gpu=name, model="medium", **MODELS["medium"], zero=(3,), recompute=("none", "full"),
                  interleave=(1,), microbatch=2, global_batch=32, steps=10, warmup=3, precision="bf16")


def preset(gpu: str = "auto", model: str | None = None, pp: int = 1, cp: int = 1, hidden: int | None = None,
           heads: int | None = None) -> Config:
    """The preset --gpu picks, fitted to the flags it depends on (the module docstring)."""
    base = cpu() if get_preset(gpu).name == "cpu" else cuda()
    shape = dict(MODELS[model or base.model])
    if hidden is not None:
        shape.update(hidden=hidden, ffn=4 * hidden)
    if heads is not None:
        shape.update(heads=heads, kv_heads=heads)
    interleave = base.interleave if pp > 1 else (1,)
    recompute = tuple(r for r in base.recompute if r != "op") if cp > 1 else base.recompute
    return replace(base, gpu=gpu, model=model or base.model, pp=pp, cp=cp, interleave=interleave, recompute=recompute,
                   **shape)


# What a launch measures, not how: launches that differ only here (and in the run flags) are the preset's, merged
# into the same files (train.py); what a --resume may change.
OPERATIONAL = ("tp", "pp", "dp", "cp", "world", "zero", "recompute", "interleave", "timeout_s")
CONFIG_IGNORE = (*RESUME_MAY_CHANGE, "timeout_s", "tp", "pp", "dp", "cp", "world", "zero", "recompute", "interleave",
                 "stage_layers")


class Variant(NamedTuple):
    """One schedule setting measured within a run."""
    zero: int
    recompute: str
    interleave: int

    @property
    def name(self) -> str:
        return f"z{self.zero}-{self.recompute}-v{self.interleave}"


class Layout(NamedTuple):
    """The resolved degrees and batch of a run (the same for every variant)."""
    tp: int
    pp: int
    dp: int
    microbatch: int
    num_microbatches: int  # m: micro-batches per step per replica
    cp: int = 1  # context parallelism: the cp ranks of a replica hold s/cp tokens of the same sequences
    cp_kind: str = "ring"  # its design (common/cp_attention.py): ring, allgather, ulysses

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def shard_group(self) -> int:
        """FSDP2's group: the dp x cp ranks that hold the same weights (CP ranks see other tokens of the same
        samples, so their gradients are reduced like data parallelism's: Megatron, torchtitan)."""
        return self.dp * self.cp

    @property
    def global_batch(self) -> int:
        return self.microbatch * self.num_microbatches * self.dp


C = TypeVar("C")


def resolve(cfg: C) -> tuple[C, GPUPreset]:
    """A runner's config (train.py's or activations.py's) with --gpu resolved (auto: this machine's), and the one line
    when torch cannot use CUDA (common.hardware: the driver, the build, the fix)."""
    hw = get_preset(cfg.gpu)
    device_kind(hw)
    return replace(cfg, gpu=hw.name), hw


def gpt_config(cfg: Config, vocab_from_data: int = 256) -> GPTConfig:
    """The model of the flags (vocab at least the data's)."""
    return GPTConfig(vocab_size=max(cfg.vocab, vocab_from_data), seq_len=cfg.seq, d_model=cfg.hidden,
                     n_layers=cfg.layers, n_heads=cfg.heads, n_kv_heads=cfg.kv_heads, d_ff=cfg.ffn)


def variants(cfg: Config) -> list[Variant]:
    """Every combination of --zero, --recompute, --interleave."""
    return [Variant(z, r, v) for z, r, v in itertools.product(cfg.zero, cfg.recompute, cfg.interleave)]


def check(cfg: Config, g: GPTConfig, world: int) -> Layout:
    """Every rule that depends on the world size or the model; ValueError (-> exit 2) before anything runs."""
    tp, pp, cp = cfg.tp, cfg.pp, cfg.cp
    names, sizes = ("tp x pp x cp", f"{tp * pp * cp}") if cp > 1 else ("tp x pp", f"{tp * pp}")
    if world % (tp * pp * cp):
        raise ValueError(f"world size {world} is not a multiple of {names} = {sizes}")
    dp = cfg.dp or world // (tp * pp * cp)
    if tp * pp * dp * cp != world:
        degrees = f"tp x pp x dp x cp = {tp}x{pp}x{dp}x{cp}" if cp > 1 else f"tp x pp x dp = {tp}x{pp}x{dp}"
        raise ValueError(f"{degrees} = {tp * pp * dp * cp}, but the world is {world} ranks (NPROC x NNODES); "
                         f"set --dp 0 to derive it")
    for what, n in (("heads", g.n_heads), ("kv-heads", g.kv_heads), ("ffn", g.ffn), ("vocab", g.vocab_size),
                    ("seq (sequence parallelism)", g.seq_len)):
        if n % tp:
            raise ValueError(f"--tp {tp} does not divide {what} {n}")
    if cp > 1 and g.seq_len % (2 * cp * tp):
        raise ValueError(f"--cp {cp} with --tp {tp} needs the sequence ({g.seq_len}) to split into 2 x cp load-"
                         f"balanced chunks of whole sequence-parallel shards: a multiple of 2 x cp x tp = {2 * cp * tp}")
    if cp > 1 and heads_problem(g.n_heads // tp, g.kv_heads // tp, cp, cfg.cp_kind):
        raise ValueError(f"--cp-kind {cfg.cp_kind} at --tp {tp}: {heads_problem(g.n_heads // tp, g.kv_heads // tp, cp, cfg.cp_kind)}")
    if cp > 1 and "op" in cfg.recompute:
        raise ValueError("--recompute op with --cp > 1 is not supported: the per-op selective-checkpoint policy and "
                         "the ring's sends and receives do not mix (recomputation hangs); use none or full")
    mb, gb = cfg.microbatch, cfg.global_batch
    if gb % (dp * mb):
        raise ValueError(f"--global-batch {gb} is not a multiple of dp x microbatch = {dp} x {mb}")
    m = gb // (dp * mb)
    for v in {x.interleave for x in variants(cfg)}:
        if v > 1 and pp == 1:
            raise ValueError(f"--interleave {v} needs --pp > 1")
        if v > 1 and m % pp:
            raise ValueError(f"interleaved 1F1B needs the {m} micro-batches per replica to be a multiple of pp={pp}")
        split_layers(g.n_layers, pp * v, cfg.stage_layers)  # raises on a bad split
    if len({x.interleave for x in variants(cfg)}) > 1 and cfg.stage_layers:
        raise ValueError("--stage-layers names one split; give one --interleave value with it")
    return Layout(tp, pp, dp, mb, m, cp, cfg.cp_kind)


def torchrun_world(cfg: Config) -> int:
    """The world to check against: torchrun's WORLD_SIZE, common.launch's DT_PLANNED_WORLD in its check pass;
    else --world or the degrees' product."""
    for var in ("WORLD_SIZE", "DT_PLANNED_WORLD"):
        if var in os.environ:
            return int(os.environ[var])
    return cfg.world or cfg.tp * cfg.pp * max(1, cfg.dp) * cfg.cp
