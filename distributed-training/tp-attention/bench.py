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
then the timings to results/bench_<tag>.csv, row by row (--resume continues a killed sweep). The
runner is cp-attention's too (common/attention_sweep.py); the presets are functions, cpu() and cuda()
(--gpu picks one, every other flag overrides it; --help shows its values).

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
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh

from common.attention_flags import SweepFlags, divisor_degrees
from common.attention_sweep import Sweep, fill, for_hardware, run_sweep, time_interleaved
from common.collective_calls import describe
from common.dist import DistInfo
from common.failures import entrypoint
from common.runner import Table
from dtensor_tp import dtensor_parallel
from mappings import TPGroup, without_communication
from tp_block import tensor_parallel
from tp_config import VerifyConfig, check_tp_shape
from verify import CheckResult, build_reference, check, correctness_grid

LAB = Path(__file__).resolve().parent

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


@dataclass(frozen=True, kw_only=True)
class BenchConfig(SweepFlags):
    DEGREE = "tp"
    tp: tuple[int, ...] = field(metadata={"help": "TP degrees (the preset's: 1, 2, 4, ... up to the ranks)"})
    d_models: tuple[int, ...] = field(metadata={"help": "hidden sizes swept at --seq-len"})
    seq_len: int = field(metadata={"help": "sequence length held while d_model varies (--seq-lens: at --d-model)"})
    d_model: int = field(metadata={"help": "hidden size held while seq_len varies"})

    def __post_init__(self):
        super().__post_init__()
        if self.seq_len < 1 or self.d_model < 1 or not self.d_models or min(self.d_models) < 1:
            raise ValueError("--seq-len, --d-model and --d-models must be positive")
        for d in (*self.d_models, self.d_model):
            if d % self.head_dim:
                raise ValueError(f"every d_model must be a multiple of --head-dim {self.head_dim} (n_heads = d_model / "
                                 f"head_dim, MHA), got {d}")

    def shapes(self) -> list[tuple[int, int]]:
        """(seq_len, d_model) pairs: the sequence sweep at d_model, then the hidden sweep at seq_len."""
        pairs = [(s, self.d_model) for s in self.seq_lens] + [(self.seq_len, d) for d in self.d_models]
        return list(dict.fromkeys(pairs))


# CPU shapes are small enough for 4 ranks on 2 cores; GPU shapes are Llama-like (head_dim 128, d = 2048..8192).
def cpu(world: int) -> BenchConfig:
    return BenchConfig(gpu="cpu", tp=divisor_degrees(world), seq_lens=(64, 128, 256), d_models=(128, 256, 384),
                       seq_len=128, d_model=256, head_dim=32, batch=4, dtype="float32", warmup=2, iters=5)


def cuda(world: int) -> BenchConfig:
    return BenchConfig(gpu="h100", tp=divisor_degrees(world), seq_lens=(1024, 2048, 4096),
                       d_models=(2048, 4096, 8192), seq_len=2048, d_model=4096, head_dim=128, batch=4, dtype="bfloat16",
                       warmup=5, iters=20)


def preset(gpu: str = "auto") -> BenchConfig:
    return for_hardware(gpu, cpu, cuda)


def check_shapes(cfg: BenchConfig, world: int) -> None:
    """Every (t, shape) of the sweep splits t ways (tp_config.check_tp_shape); ValueError on bad input."""
    for t in cfg.tp:
        for s, d in cfg.shapes():
            h = d // cfg.head_dim
            check_tp_shape(tp=t, n_heads=h, n_kv_heads=h, d_model=d, d_ff=4 * d, seq_len=s, sequence_parallel=t > 1)


def correctness_row(case: str, res: CheckResult) -> dict:
    c = res.config
    worst, worst_err = res.worst_param
    return {"case": case, "impl": c.impl, "tp": c.tp, "sp": c.sp, "dtype": c.dtype, "n_heads": c.n_heads,
            "n_kv_heads": c.n_kv_heads, "d_model": c.d_model, "seq_len": c.seq_len, "batch": c.batch, "bias": c.bias,
            "fused_qkv": c.fused_qkv, "err_output": res.errors["output"], "err_input_grad": res.errors["input_grad"],
            "err_params_max": worst_err, "worst_param": worst, "tolerance": res.tolerance,
            "reference_vs_fp32": res.reference_vs_fp32, "fwd_collectives": describe(res.collectives.forward),
            "bwd_collectives": describe(res.collectives.backward),
            "grad_sync_collectives": describe(res.collectives.grad_sync),
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
    t = {k: statistics.median(v) * 1e3 for k, v in time_interleaved(steps, cfg.warmup, cfg.iters, device).items()}
    compute_ms = t.get("compute", t["ours"])  # at t = 1 there is no communication
    return {"tp": tp.size, "sp": sp, "seq_len": seq, "d_model": d, "n_heads": heads, "head_dim": cfg.head_dim,
            "batch": cfg.batch, "dtype": cfg.dtype, "ref_ms": t.get("ref"), "ours_ms": t["ours"],
            "ours_compute_ms": compute_ms, "comm_share": 1.0 - compute_ms / t["ours"], "dtensor_ms": t["dtensor"],
            "ours_over_dtensor": t["ours"] / t["dtensor"],
            "ours_over_ref": t["ours"] / t["ref"] if "ref" in t else None,
            "ours_max_rel_err": ours_res.max_err, "dtensor_max_rel_err": dt_res.max_err,
            "tolerance": ours_res.tolerance, "verified": ours_res.passed and dt_res.passed,
            "ours_fwd_collectives": describe(ours_res.collectives.forward),
            "ours_bwd_collectives": describe(ours_res.collectives.backward),
            "dtensor_fwd_collectives": describe(dt_res.collectives.forward),
            "dtensor_bwd_collectives": describe(dt_res.collectives.backward),
            "comm_bytes_ours": ours_res.comm_bytes_measured, "comm_bytes_dtensor": dt_res.comm_bytes_measured,
            "comm_bytes_analytic": ours_res.comm_bytes_analytic,
            "iters": cfg.iters, "timing": f"median of {cfg.iters}, max over {dist.get_world_size()} ranks"}


def _inputs(vcfg: VerifyConfig, tp: TPGroup, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's block input and output gradient: (B, T, d), or its (B, T/t, d) shard with SP."""
    T = vcfg.seq_len // tp.size if vcfg.sp else vcfg.seq_len
    shape, dtype = (vcfg.batch, T, vcfg.d_model), getattr(torch, vcfg.dtype)
    return torch.randn(shape, device=device, dtype=dtype), torch.randn(shape, device=device, dtype=dtype)


def tables(cfg: BenchConfig, tag: str) -> list[Table | None]:
    """correctness_<tag>.csv (none with --no-correctness: a header without rows is not a result), bench_<tag>.csv."""
    return [Table(f"correctness_{tag}.csv", CORRECTNESS_COLUMNS, CORRECTNESS_COLUMNS[:5]) if cfg.correctness else None,
            Table(f"bench_{tag}.csv", BENCH_COLUMNS, BENCH_COLUMNS[:4])]


def measure(cfg: BenchConfig, env: DistInfo, meshes: dict[int, DeviceMesh], writers: list) -> None:
    """The correctness grid at every t, then a timing row per (t, shape, SP off/on)."""
    corr, bench = writers
    if cfg.correctness:
        fill(corr, [(t, case, v) for t in cfg.tp for case, v in correctness_grid(t)], "correctness",
             key=lambda g: {"case": g[1], "impl": g[2].impl, "tp": g[0], "sp": g[2].sp, "dtype": g[2].dtype},
             rows=lambda g: [correctness_row(g[1], check(g[2], meshes[g[0]], env.device))])
    fill(bench, [(t, s, d, sp) for s, d in cfg.shapes() for t in cfg.tp for sp in ((False, True) if t > 1 else (False,))],
         "timing", key=lambda r: {"tp": r[0], "sp": r[3], "seq_len": r[1], "d_model": r[2]},
         rows=lambda r: [bench_row(cfg, meshes[r[0]], env.device, r[1], r[2], r[3])])


# Flags that change no row (with the run flags and --require-gpu: common.runner.experiment).
SWEEP = Sweep("tp-attention", LAB, "tp", BenchConfig, preset, check_shapes, tables, measure,
              lambda cfg: f"t in {cfg.tp}, {len(cfg.shapes())} shapes, {cfg.dtype}", operational=("correctness",))


def main(argv: list[str] | None = None) -> int:
    return run_sweep(SWEEP, argv, __doc__)


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
