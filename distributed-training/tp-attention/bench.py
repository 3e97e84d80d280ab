"""Forward+backward time of one tensor-parallel transformer block vs TP degree, sequence and hidden size.

What it measures, for every TP degree t that divides the world size (each group of t consecutive
ranks runs one block; the others run copies of it, so every device is busy as in DP x TP), every
shape in the sweep (sequence lengths at one hidden size, hidden sizes at one sequence length),
and sequence parallelism off and on:

    ref_ms            the plain single-device Block (t = 1 rows only)
    ours_ms           the hand-rolled Megatron block (tp_block.py); at t = 1 over ref_ms: wrapper overhead
    ours_compute_ms   the same block with every collective replaced by a local stand-in of the
                      same shapes (mappings.without_communication): the time left without
                      communication; comm_share = 1 - compute/total (our blocks do not overlap
                      communication with compute, so this is the exposed communication)
    dtensor_ms        the same module through DTensor parallelize_module (dtensor_tp.py), and
                      ours_over_dtensor = ours_ms / dtensor_ms
    comm_bytes_*      bytes each rank sends per step under the ring model, counted at the
                      dispatcher, vs the analytic 8*b*s*h*(t-1)/t per layer (SC21, section 3.2)
    *_max_rel_err     both implementations verified against the single-device block (verify.py)

Times are medians over iterations of the max over ranks (common.timing), the implementations
interleaved iteration by iteration so that drift on a shared machine hits both alike. First the
runner writes the correctness grid (verify.correctness_grid) to results/correctness_<tag>.csv;
then the timings to results/bench_<tag>.csv, row by row (--resume continues a killed sweep).

    make tp-attention                        # CPU: 4 gloo ranks (t = 1, 2, 4), then the report
    make tp-attention-gpu GPU=h100           # 1 GPU: t = 1, ours vs the plain block vs DTensor
    make tp-attention-run GPU=h100           # all GPUs of a node (NPROC): t = 1, 2, 4, 8
    sbatch --nodes=2 slurm/lab.sbatch tp-attention GPU=h100 ARGS="--tp 8,16"   # t = 16 crosses nodes
    # without make: OMP_NUM_THREADS=1 PYTHONPATH=distributed-training \\
    #   python -m torch.distributed.run --standalone --nproc-per-node 4 distributed-training/tp-attention/bench.py

On CPU every rank is a process on a few shared cores and gloo runs over loopback TCP: the
timings there show contention and the shape of the curves, not tensor-parallel speedups.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from tqdm import tqdm

from common.config import config_dict, parse_config
from common.dist import distributed, fail, from_rank0, launched_by_torchrun, planned_world, print0
from common.failures import entrypoint
from common.hardware import device_kind, get_preset
from common.results import NoWriter, SchemaMismatch, check_resume, provenance
from common.runs import PROMOTE_CHOICES, RunError, RunFolder, check_free, check_resumable, experiment_flags, run_dir_for
from common.timing import time_iterations
from dtensor_tp import dtensor_parallel
from mappings import TPGroup, without_communication
from tp_block import tensor_parallel
from tp_config import VerifyConfig, check_tp_shape
from verify import CheckResult, build_reference, check, correctness_grid

BENCH_VERSION = "1"
RESULTS = Path(__file__).resolve().parent / "results"
# Sweeps per kind of machine; any flag given on the command line wins. GPU shapes are Llama-like
# (head_dim 128, d = 2048..8192); CPU shapes are small enough for 4 ranks on 2 cores.
PRESETS = {
    "cpu": dict(seq_lens=(64, 128, 256), d_models=(128, 256, 384), seq_len=128, d_model=256, head_dim=32, batch=4,
                dtype="float32", warmup=2, iters=5),
    "cuda": dict(seq_lens=(1024, 2048, 4096), d_models=(2048, 4096, 8192), seq_len=2048, d_model=4096, head_dim=128,
                 batch=4, dtype="bfloat16", warmup=5, iters=20),
}


# The CSVs' columns; the first 5 / 4 are the row keys (what --resume skips on).
CORRECTNESS_COLUMNS = ["case", "impl", "tp", "sp", "dtype", "n_heads", "n_kv_heads", "d_model", "seq_len", "batch",
                       "bias", "fused_qkv", "err_output", "err_input_grad", "err_params_max", "worst_param",
                       "tolerance", "reference_vs_fp32", "fwd_collectives", "bwd_collectives", "grad_sync_collectives",
                       "comm_bytes_measured", "comm_bytes_analytic", "counts_ok", "pass"]
BENCH_COLUMNS = ["tp", "sp", "seq_len", "d_model", "n_heads", "head_dim", "batch", "dtype", "ref_ms", "ours_ms",
                 "ours_compute_ms", "comm_share", "dtensor_ms", "ours_over_dtensor", "ours_over_ref",
                 "ours_max_rel_err", "dtensor_max_rel_err", "tolerance", "verified", "ours_fwd_collectives",
                 "ours_bwd_collectives", "dtensor_fwd_collectives", "dtensor_bwd_collectives", "comm_bytes_ours",
                 "comm_bytes_dtensor", "comm_bytes_analytic", "iters", "timing"]


@dataclass(frozen=True)
class BenchConfig:
    gpu: str = field(default="auto", metadata={"help": "preset (common/hardware.py); cpu = CPU + gloo"})
    tp: tuple[int, ...] = field(default=(), metadata={"help": "TP degrees (default: 1, 2, 4, ... up to the ranks)"})
    seq_lens: tuple[int, ...] = field(default=(), metadata={"help": "sequence lengths swept at --d-model"})
    d_models: tuple[int, ...] = field(default=(), metadata={"help": "hidden sizes swept at --seq-len"})
    seq_len: int | None = field(default=None, metadata={"help": "sequence length held while d_model varies"})
    d_model: int | None = field(default=None, metadata={"help": "hidden size held while seq_len varies"})
    head_dim: int | None = field(default=None, metadata={"help": "n_heads = d_model / head_dim (MHA)"})
    batch: int | None = field(default=None, metadata={"help": "batch size b"})
    dtype: Literal["float32", "bfloat16"] | None = field(default=None, metadata={"help": "parameter dtype"})
    warmup: int | None = field(default=None, metadata={"help": "untimed iterations per implementation"})
    iters: int | None = field(default=None, metadata={"help": "timed iterations per implementation"})
    correctness: bool = field(default=True, metadata={"help": "write the correctness grid first"})
    require_gpu: bool = field(default=False, metadata={"help": "refuse to run without CUDA (make tp-attention-gpu)"})
    out_dir: str = field(default="", metadata={"help": "where finished CSVs go (default: results/ in this lab; the "
                                                      "run writes into ../runs/<preset>_ws<ranks>/ first)"})
    resume: bool = field(default=False, metadata={"help": "continue the run folder's sweep: done rows are skipped"})
    promote: str = field(default="auto", metadata={"help": "when complete: auto (replace results/ for a preset run, "
                                                           "keep an experiment in runs/), replace, merge, no",
                                                   "choices": PROMOTE_CHOICES})
    # (None means: the preset's value; the resolved config is what gets saved beside the CSV)

    def __post_init__(self):
        for name in ("seq_len", "d_model", "head_dim", "batch", "iters"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        for name in ("seq_lens", "d_models"):
            if any(v < 1 for v in getattr(self, name)):
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.warmup is not None and self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")
        if self.head_dim is not None:
            for d in (*self.d_models, *([self.d_model] if self.d_model else [])):
                if d % self.head_dim:
                    raise ValueError(f"every d_model must be a multiple of --head-dim {self.head_dim}, got {d}")
        if any(t < 1 for t in self.tp):
            raise ValueError(f"--tp degrees must be positive, got {self.tp}")

    def shapes(self) -> list[tuple[int, int]]:
        """(seq_len, d_model) pairs: the sequence sweep at d_model, then the hidden sweep at seq_len."""
        pairs = [(s, self.d_model) for s in self.seq_lens] + [(self.seq_len, d) for d in self.d_models]
        return list(dict.fromkeys(pairs))


def resolve(cfg: BenchConfig, kind: str, world: int) -> BenchConfig:
    """Fill the preset's defaults and check every (t, shape) of the sweep; ValueError on bad input."""
    preset = PRESETS[kind]
    filled = {k: (v if getattr(cfg, k) in (None, ()) else getattr(cfg, k)) for k, v in preset.items()}
    tps = cfg.tp or tuple(t for t in (1, 2, 4, 8, 16, 32, 64) if world % t == 0)
    gpu = get_preset(cfg.gpu).name  # auto -> cpu, h100, ...
    cfg = dataclasses.replace(cfg, tp=tps, gpu=gpu, out_dir=cfg.out_dir or str(RESULTS), **filled)
    bad = [d for _, d in cfg.shapes() if d % cfg.head_dim]
    if bad:
        raise ValueError(f"hidden size {bad[0]} is not a multiple of the head size {cfg.head_dim} (--head-dim; "
                         f"n_heads = d_model / head_dim); use multiples of {cfg.head_dim}")
    for t in cfg.tp:
        if world % t:
            raise ValueError(f"--tp {t} must divide the number of ranks ({world}; NPROC x NNODES)")
        for s, d in cfg.shapes():
            h = d // cfg.head_dim
            check_tp_shape(tp=t, n_heads=h, n_kv_heads=h, d_model=d, d_ff=4 * d, seq_len=s, sequence_parallel=t > 1)
    return cfg


def _fmt_counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items())) or "none"


def correctness_row(case: str, res: CheckResult) -> dict:
    c = res.config
    worst, worst_err = res.worst_param
    return {"case": case, "impl": c.impl, "tp": c.tp, "sp": c.sp, "dtype": c.dtype, "n_heads": c.n_heads,
            "n_kv_heads": c.n_kv_heads, "d_model": c.d_model, "seq_len": c.seq_len, "batch": c.batch, "bias": c.bias,
            "fused_qkv": c.fused_qkv, "err_output": res.errors["output"], "err_input_grad": res.errors["input_grad"],
            "err_params_max": worst_err, "worst_param": worst, "tolerance": res.tolerance,
            "reference_vs_fp32": res.reference_vs_fp32, "fwd_collectives": _fmt_counts(res.collectives.forward),
            "bwd_collectives": _fmt_counts(res.collectives.backward),
            "grad_sync_collectives": _fmt_counts(res.collectives.grad_sync),
            "comm_bytes_measured": res.comm_bytes_measured, "comm_bytes_analytic": res.comm_bytes_analytic,
            "counts_ok": res.counts_ok, "pass": res.passed}


def _step(module: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], None]:
    """One forward+backward of the block (gradients dropped first, as a training step's zero_grad would)."""
    x = x.clone().requires_grad_(True)

    def step() -> None:
        x.grad = None
        for p in module.parameters():
            p.grad = None
        module(x).backward(dy)
    return step


def _compute_only(step: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        with without_communication():
            step()
    return run


def time_interleaved(steps: dict[str, Callable[[], None]], cfg: BenchConfig, device: torch.device) -> dict[str, float]:
    """Median seconds per step for each implementation, timed in turn, one iteration each per round."""
    for step in steps.values():
        for _ in range(cfg.warmup):
            step()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(cfg.iters):
        for name, step in steps.items():
            samples[name] += time_iterations(step, warmup=0, iters=1, device=device).samples_s
    return {name: statistics.median(s) for name, s in samples.items()}


def bench_row(cfg: BenchConfig, mesh: DeviceMesh, device: torch.device, seq: int, d: int, sp: bool) -> dict:
    tp = TPGroup.of(mesh.get_group())
    heads = d // cfg.head_dim
    vcfg = VerifyConfig(tp=tp.size, n_heads=heads, n_kv_heads=heads, d_model=d, seq_len=seq, batch=cfg.batch,
                        dtype=cfg.dtype, sp=sp, gpu=cfg.gpu)
    ours_res = check(vcfg, mesh, device)
    dt_res = check(dataclasses.replace(vcfg, impl="dtensor"), mesh, device)

    ref = build_reference(vcfg, device)
    steps = {"ours": _step(tensor_parallel(ref, tp, sequence_parallel=sp), *_inputs(vcfg, tp, device)),
             "dtensor": _step(dtensor_parallel(ref, mesh, sequence_parallel=sp), *_inputs(vcfg, tp, device))}
    if tp.size == 1:
        steps["ref"] = _step(ref, *_inputs(vcfg, tp, device))
    else:
        steps["compute"] = _compute_only(steps["ours"])
    t = {k: v * 1e3 for k, v in time_interleaved(steps, cfg, device).items()}
    compute_ms = t.get("compute", t["ours"])  # at t = 1 there is no communication
    return {"tp": tp.size, "sp": sp, "seq_len": seq, "d_model": d, "n_heads": heads, "head_dim": cfg.head_dim,
            "batch": cfg.batch, "dtype": cfg.dtype, "ref_ms": t.get("ref"), "ours_ms": t["ours"],
            "ours_compute_ms": compute_ms, "comm_share": 1.0 - compute_ms / t["ours"], "dtensor_ms": t["dtensor"],
            "ours_over_dtensor": t["ours"] / t["dtensor"],
            "ours_over_ref": t["ours"] / t["ref"] if "ref" in t else None,
            "ours_max_rel_err": ours_res.max_err, "dtensor_max_rel_err": dt_res.max_err,
            "tolerance": ours_res.tolerance, "verified": ours_res.passed and dt_res.passed,
            "ours_fwd_collectives": _fmt_counts(ours_res.collectives.forward),
            "ours_bwd_collectives": _fmt_counts(ours_res.collectives.backward),
            "dtensor_fwd_collectives": _fmt_counts(dt_res.collectives.forward),
            "dtensor_bwd_collectives": _fmt_counts(dt_res.collectives.backward),
            "comm_bytes_ours": ours_res.comm_bytes_measured, "comm_bytes_dtensor": dt_res.comm_bytes_measured,
            "comm_bytes_analytic": ours_res.comm_bytes_analytic,
            "iters": cfg.iters, "timing": f"median of {cfg.iters}, max over {dist.get_world_size()} ranks"}


def _inputs(vcfg: VerifyConfig, tp: TPGroup, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's block input and output gradient: (B, T, d), or its (B, T/t, d) shard with SP."""
    T = vcfg.seq_len // tp.size if vcfg.sp else vcfg.seq_len
    shape, dtype = (vcfg.batch, T, vcfg.d_model), getattr(torch, vcfg.dtype)
    return torch.randn(shape, device=device, dtype=dtype), torch.randn(shape, device=device, dtype=dtype)


OPERATIONAL = ("gpu", "correctness", "require_gpu", "out_dir", "resume", "promote")
CONFIG_IGNORE = ("resume", "promote", "out_dir")


def tag_of(cfg: BenchConfig, world: int, nnodes: int = 1) -> str:
    """e.g. cpu_ws4, h100_ws8: names the CSVs and the run folder."""
    return get_preset(cfg.gpu).run_tag(world, nnodes)


def check_before_launch(cfg: BenchConfig, world: int, nnodes: int) -> None:
    """Run folder free; a --resume has a run folder whose CSVs match this sweep's columns and config."""
    tag = tag_of(cfg, world, nnodes)
    run_dir = run_dir_for(Path(cfg.out_dir), tag)
    check_free(run_dir)
    if cfg.resume:
        check_resumable(run_dir)
        saved = {k: v for k, v in config_dict(cfg).items() if k != "out_dir"}
        for name, columns in (("correctness", CORRECTNESS_COLUMNS), ("bench", BENCH_COLUMNS)):
            check_resume(run_dir / f"{name}_{tag}.csv", columns, saved, CONFIG_IGNORE)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(BenchConfig, argv, description=__doc__, prog="bench.py")
    world, _, nnodes = planned_world()
    try:
        kind = device_kind(get_preset(cfg.gpu))
        if cfg.require_gpu and kind != "cuda":
            raise ValueError("this target measures a GPU and torch sees none (CPU runs: make tp-attention)")
        changed = experiment_flags(resolve(cfg, kind, world), resolve(BenchConfig(gpu=cfg.gpu), kind, world),
                                OPERATIONAL)
        cfg = resolve(cfg, kind, world)
        if not launched_by_torchrun():
            check_before_launch(cfg, world, nnodes)
    except (ValueError, RunError) as e:
        fail(str(e), 2)
    with distributed(device=kind) as env:
        torch.set_float32_matmul_precision("highest")
        tag = tag_of(cfg, env.world_size, env.nnodes)  # e.g. cpu_ws4, h100_ws8
        prov, main_rank = provenance(env, BENCH_VERSION), env.rank == 0
        saved = {k: v for k, v in config_dict(cfg).items() if k != "out_dir"}  # no machine paths in results/
        meshes = {t: init_device_mesh(kind, (env.world_size // t, t), mesh_dim_names=("replica", "tp"))["tp"]
                  for t in cfg.tp}
        folder, error, corr, bench = None, None, None, None
        if main_rank:
            try:
                folder = RunFolder.open(run_dir_for(Path(cfg.out_dir), tag), Path(cfg.out_dir),
                                        "resume" if cfg.resume else "fresh")
                def writer(name, columns, key):
                    return folder.writer(f"{name}_{tag}.csv", columns, columns[:key], prov, config=saved,
                                         config_ignore=CONFIG_IGNORE)
                # --no-correctness: no correctness file at all (a header without rows is not a result)
                corr = writer("correctness", CORRECTNESS_COLUMNS, 5) if cfg.correctness else None
                bench = writer("bench", BENCH_COLUMNS, 4)
            except (SchemaMismatch, RunError) as e:
                error = str(e)
                if folder is not None:
                    folder.close()
        if (error := from_rank0(error)) is not None:
            fail(error, 2)
        corr, bench = corr or NoWriter(), bench or NoWriter()
        print0(f"tp-attention: {env.world_size} ranks on {env.device} ({env.backend}), t in {cfg.tp}, "
               f"{len(cfg.shapes())} shapes, {cfg.dtype}" + (f" -> {folder.path}" if folder else ""))
        try:
            n_runs = _measure(cfg, env, meshes, corr, bench, main_rank)
        except BaseException:
            if folder is not None:
                folder.finish(complete=False, changed=changed)
            raise
        print0(f"measured {n_runs} timing rows")
        if folder is not None:
            for line in folder.finish(complete=True, changed=changed, promote=cfg.promote):
                print(line, flush=True)
    return 0



def _measure(cfg: BenchConfig, env, meshes, corr, bench, main_rank: bool) -> int:
    if cfg.correctness:
        grid = [(t, case, v) for t in cfg.tp for case, v in correctness_grid(t)]
        for t, case, vcfg in tqdm(grid, desc="correctness", disable=True if not main_rank else None):
            row_key = {"case": case, "impl": vcfg.impl, "tp": t, "sp": vcfg.sp, "dtype": vcfg.dtype}
            if not from_rank0(corr.done(row_key)):
                corr.write(correctness_row(case, check(vcfg, meshes[t], env.device)))
    runs = [(t, s, d, sp) for s, d in cfg.shapes() for t in cfg.tp for sp in ((False, True) if t > 1 else (False,))]
    for t, s, d, sp in tqdm(runs, desc="timing", disable=True if not main_rank else None):
        if not from_rank0(bench.done({"tp": t, "sp": sp, "seq_len": s, "d_model": d})):
            bench.write(bench_row(cfg, meshes[t], env.device, s, d, sp))
    return len(runs)


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
