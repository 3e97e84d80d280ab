"""Activation memory per transformer block, measured, against the planner's formula (Korthikanti et al. 2022).

For each TP degree t and recompute setting (none, op, full; parallelize.py), a pipeline-middle stage
of n blocks runs forward on its input (b, s/t, h) under footprint.PeakTracker; the bytes still alive when
the forward returns, minus the output, are what autograd (and checkpointing) keeps for backward. The
difference between n = 2 and n = 1 blocks is one block's activations, with nothing else in it.

Beside each measurement, two predictions per block for one micro-batch:
  planner      memory.activation_coefficient x s·b·h (sequence parallelism, FlashAttention, no dropout),
               in bf16 bytes, scaled to the run's element size (every term is a 2-byte tensor there)
  torch terms  what PyTorch keeps, tensor by tensor: the planner's pytorch-stack formula (torch_terms, from
               planner/model/torch_memory.py), which the at-scale study's memory rests on; the tests hold the
               measurement to it byte for byte

    make parallel-3d-activations                  # CPU: 2 gloo ranks, t = 1 and 2, fp32
    make parallel-3d-activations GPU=h100 NPROC=2 # 2 GPUs, bf16, the GPU preset's shape
    (make parallel-3d-gpu on one GPU runs t = 1 alone; rows are merged into results/ by t, recompute, dtype, shape,
    as train.py's are)

The presets are functions (cpu(): a 256-wide block in fp32; cuda(): an 8B-like block, 4096 wide, in bf16).
    PYTHONPATH=distributed-training torchrun --nproc-per-node 2 distributed-training/parallel-3d/activations.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch
from torch.distributed.device_mesh import init_device_mesh

import planner_bridge as pb
from planner.model import degrees, torch_memory
from common.config import parse_preset
from common.dist import distributed, fail, planned_world, print0
from common.failures import entrypoint
from common.hardware import GPUPreset, get_preset
from common.model import GPT, GPTConfig
from common.results import provenance
from common.runner import (RESUME_MAY_CHANGE, RunFlags, RunPlan, Table, check_before_launch, experiment, open_run,
                           saved_config)
from footprint import PeakTracker
from parallelize import apply_recompute, apply_tp
from settings import LAB, RECOMPUTE, resolve
from pipeline_stages import StageModule, StageSpec

BENCH_VERSION = "1"
OPERATIONAL = ("tp", "recompute")  # what, not how: never an experiment (nor are the run flags)
CONFIG_IGNORE = (*RESUME_MAY_CHANGE, "tp")
COLUMNS = ["tp", "recompute", "dtype", "microbatch", "seq", "hidden", "heads", "kv_heads", "ffn",
           "measured_bytes", "torch_terms_bytes", "planner_bytes", "measured_over_planner",
           "measured_coef_bf16", "planner_coef_bf16"]
KEY = ["tp", "recompute", "dtype", "microbatch", "seq", "hidden", "heads", "kv_heads", "ffn"]


@dataclass(frozen=True, kw_only=True)
class ActConfig(RunFlags):
    tp: tuple[int, ...] = field(default=(1, 2), metadata={"help": "TP degrees (each must divide the world)"})
    recompute: tuple[str, ...] = field(default=RECOMPUTE, metadata={"help": "recompute settings"})
    microbatch: int = field(metadata={"help": "sequences"})
    seq: int = field(metadata={"help": "sequence length"})
    hidden: int = field(metadata={"help": "model width"})
    heads: int = field(metadata={"help": "attention heads"})
    kv_heads: int = field(metadata={"help": "key/value heads"})
    ffn: int = field(metadata={"help": "MLP width"})
    precision: str = field(metadata={"help": "fp32 or bf16", "choices": ("fp32", "bf16")})

    def __post_init__(self):
        bad = [r for r in self.recompute if r not in RECOMPUTE]
        if bad or not self.recompute or not self.tp or min(self.tp) < 1:
            raise ValueError(f"--recompute takes {', '.join(RECOMPUTE)} and --tp positive degrees")
        for name in Shape._fields:
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")


def cpu() -> ActConfig:
    """2 gloo ranks: a block 256 wide (4 heads) over 256 tokens, 2 sequences, fp32."""
    return ActConfig(gpu="cpu", microbatch=2, seq=256, hidden=256, heads=4, kv_heads=4, ffn=1024, precision="fp32")


def cuda(name: str = "h100") -> ActConfig:
    """GPUs: an 8B-like block (4096 wide, 32 heads over 8 K/V heads) over 4096 tokens, bf16."""
    return ActConfig(gpu=name, microbatch=1, seq=4096, hidden=4096, heads=32, kv_heads=8, ffn=16384,
                     precision="bf16")


def preset(gpu: str = "auto") -> ActConfig:
    return replace(cpu() if get_preset(gpu).name == "cpu" else cuda(), gpu=gpu)


class Shape(NamedTuple):
    microbatch: int
    seq: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int

    def gpt(self) -> GPTConfig:
        return GPTConfig(vocab_size=256, seq_len=self.seq, d_model=self.hidden, n_layers=2, n_heads=self.heads,
                         n_kv_heads=self.kv_heads, d_ff=self.ffn)


def torch_terms(sh: Shape, t: int, recompute: str, e: int, stat_bytes: int = 4) -> int:
    """Bytes PyTorch keeps for one block's backward, tensor by tensor: the planner's pytorch-stack formula
    (planner.model.torch_memory.torch_layer_bytes: the LayerNorm outputs all-gathered to full length by DTensor's
    sequence parallelism, q/k/v kv_heads wide, the fused attention's output and fp32 log-sum-exp, LayerNorm's
    statistics in stat_bytes: fp32 on CUDA, but on the CPU a LayerNorm whose input and weights are both bf16
    keeps them in bf16, ln_stat_bytes). recompute: none, op or full, the planner's names."""
    g = sh.gpt()
    shape = pb.shape_of(g)
    code = degrees.RECOMPUTE.index(pb.planner_recompute(recompute))
    return int(round(float(torch_memory.torch_layer_bytes(shape, t, 1, sh.microbatch, code, e, stat_bytes))))


def ln_stat_bytes(device: torch.device, dtype: torch.dtype) -> int:
    """Bytes per LayerNorm statistic: CUDA keeps them in the accumulation type (fp32); the CPU kernel in the
    parameters' dtype when input and weights share it (aten layer_norm_cpu), so bf16 on a CPU."""
    return 4 if device.type == "cuda" else torch.finfo(dtype).bits // 8


def saved_bytes(sh: Shape, n_blocks: int, t: int, recompute: str, mesh, device, dtype) -> int:
    """Bytes alive after the forward of n blocks (a middle pipeline stage), minus its output."""
    torch.manual_seed(0)
    with torch.device(device):  # built where it runs (the values do not matter here, only the bytes)
        gpt = GPT(sh.gpt())
    stage = StageModule(gpt, StageSpec(1, 3, tuple(range(n_blocks)))).to(dtype=dtype)
    if t > 1:
        apply_tp(stage, mesh)
    apply_recompute(stage, recompute)
    x = torch.randn(sh.microbatch, sh.seq // t, sh.hidden, device=device, dtype=dtype, requires_grad=True)
    with PeakTracker() as mem:
        out = stage(x)
        alive = mem.live_bytes - out.numel() * out.element_size()
    out.float().sum().backward()
    return alive


def measure(sh: Shape, t: int, recompute: str, mesh, device, dtype) -> dict:
    e = torch.finfo(dtype).bits // 8
    per_block = saved_bytes(sh, 2, t, recompute, mesh, device, dtype) - saved_bytes(sh, 1, t, recompute, mesh,
                                                                                       device, dtype)
    planner = pb.activation_bytes_per_layer(sh.gpt(), t, recompute, sh.microbatch, e)
    sbh = sh.microbatch * sh.seq * sh.hidden
    return {"tp": t, "recompute": recompute, "dtype": str(dtype).removeprefix("torch."), **sh._asdict(),
            "measured_bytes": per_block,
            "torch_terms_bytes": torch_terms(sh, t, recompute, e, ln_stat_bytes(device, dtype)),
            "planner_bytes": planner, "measured_over_planner": per_block / planner,
            "measured_coef_bf16": per_block / sbh * 2 / e, "planner_coef_bf16": planner / sbh * 2 / e}


def shape_of(cfg: ActConfig) -> Shape:
    sh = Shape(**{k: getattr(cfg, k) for k in Shape._fields})
    for t in cfg.tp:
        if sh.heads % t or sh.kv_heads % t or sh.seq % t or sh.ffn % t:
            raise ValueError(f"--tp {t} must divide heads, kv-heads, seq and ffn of {sh}")
    sh.gpt()
    return sh


def run_plan(cfg: ActConfig, hw: GPUPreset, world: int, nnodes: int) -> RunPlan:
    """runs/activations_<preset>_ws<N>/ and its one CSV, activations_<preset>.csv (merged into results/ by key)."""
    return RunPlan.beside(cfg.results_dir(LAB), f"activations_{hw.run_tag(world, nnodes)}",
                          [Table(f"activations_{hw.tag}.csv", COLUMNS, KEY)], config=saved_config(cfg),
                          ignore=CONFIG_IGNORE)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_preset(ActConfig, argv, preset, description=__doc__.split("\n\n")[0], prog="activations.py")
    try:
        cfg, hw = resolve(cfg)
        sh = shape_of(cfg)
        changed = experiment(cfg, resolve(preset(cfg.gpu))[0], OPERATIONAL)
        world, _, nnodes = planned_world()
        check_before_launch(run_plan(cfg, hw, world, nnodes), cfg)
    except ValueError as e:
        fail(str(e), code=2)
    dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
    with distributed(device="cpu" if hw.name == "cpu" else "auto") as env, \
            open_run(run_plan(cfg, hw, env.world_size, env.nnodes), cfg, env, provenance(env, BENCH_VERSION), changed,
                     preset_publishes="merge") as run:
        (writer,) = run.writers
        for t in cfg.tp:
            if env.world_size % t:
                print0(f"skipping tp={t}: it does not divide the {env.world_size} ranks")
                continue
            mesh = init_device_mesh(env.device.type, (env.world_size // t, t), mesh_dim_names=("rep", "tp"))["tp"]
            for rec in cfg.recompute:
                row = measure(sh, t, rec, mesh, env.device, dtype)
                if not writer.done(row):
                    writer.write(row)
                print0(f"tp={t} {rec:9s} {row['measured_bytes'] / 2**20:8.3f} MiB per block (torch terms "
                       f"{row['torch_terms_bytes'] / 2**20:8.3f}, planner {row['planner_bytes'] / 2**20:8.3f}; "
                       f"coefficient {row['measured_coef_bf16']:.2f} vs {row['planner_coef_bf16']:.2f} "
                       "bf16 bytes/sbh)")
    return 0


if __name__ == "__main__":
    sys.exit(entrypoint(main))
