"""Forward+backward time, bytes and memory of context-parallel causal attention: the hand-rolled ring
(common/ring_attention.py) against PyTorch's context parallelism (torch_cp.py), vs CP degree and sequence.

For every CP degree N that divides the world (each group of N consecutive ranks runs one attention; the
others run copies of it, so every device is busy as in DP x CP) and every sequence length, one row per
implementation:

    sdpa              single-device causal SDPA on the whole sequence (N = 1 rows only): what CP replaces
    ours              the ring, passing K/V blocks with send/recv overlapped with each block's attention
    torch-allgather   PyTorch's context parallelism, its default rotation (one all-gather of K/V)
    torch-alltoall    the same with a ring shift per step (all-to-all)

    time_ms           median over iterations of the max over ranks, implementations interleaved
                      iteration by iteration (drift on a shared machine hits all alike)
    *_sent_bytes      what one rank sent in the forward / backward, counted at the dispatcher (traffic.py),
                      beside the formula (ring_attention.ring_bytes; verify.torch_bytes for PyTorch's)
    saved_bytes       the tensors kept for backward (saved-tensor hooks: exact, any device)
    peak_mem_bytes    CUDA only: torch.cuda.max_memory_allocated over one step, above what was allocated
    max_rel_err       the same shape verified against single-device attention first (verify.check)

On CPU PyTorch's public context_parallel refuses (its dispatcher has no rule for the CPU SDPA kernel;
the refusal is written to results/public_api_<tag>.csv), so the PyTorch rows there are its ring core
(_templated_ring_attention and its backward) on the same CPU kernel; on CUDA they are the public API.
Every implementation runs the same kernel (one_kernel: FlashAttention-2 on CUDA, SDPA's fused CPU kernel on
CPU; ours calls them through common/attention_block.py), so the rows differ in the ring, not the kernel.

    make cp-attention                          # CPU: 4 gloo ranks, N = 1, 2, 4, then the report (~1 min)
    make cp-attention-gpu GPU=h100             # 1 GPU: N = 1 (wrapper overheads); N GPUs: N = 1, 2, 4, 8
    make cp-attention-run GPU=h100 NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 ARGS="--cp 8,16"  # each node
    OMP_NUM_THREADS=1 PYTHONPATH=distributed-training python -m torch.distributed.run --standalone \\
        --nproc-per-node 4 distributed-training/cp-attention/bench.py --gpu cpu

On CPU every rank is a process on a few shared cores and gloo runs over loopback TCP: the timings show
contention and the shape of the curves, not CP's speedups or its overlap (that needs a GPU and its own
copy engine). Bytes, correctness and saved memory are exact anywhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from tqdm import tqdm

import torch_cp
import verify
from common.attention_block import default_scale
from common.config import config_dict, parse_config
from common.dist import distributed, fail, from_rank0, launched_by_torchrun, planned_world, print0
from common.failures import entrypoint
from common.hardware import device_kind, get_preset
from common.results import NoWriter, SchemaMismatch, check_resume, provenance
from common.ring_attention import balanced_positions, check_cp_shape, ring_attention
from common.runs import (PROMOTE_CHOICES, RunError, RunFolder, check_free, check_resumable, experiment_flags,
                         run_dir_for)
from common.timing import time_iterations

BENCH_VERSION = "1"
RESULTS = Path(__file__).resolve().parent / "results"
IMPLS = ("sdpa", "ours", "torch-allgather", "torch-alltoall")
# CPU: small enough for 4 ranks on 2 cores in well under a minute. GPU: Llama-3-8B's attention (32 query heads,
# 8 K/V heads of 128), bf16, sequences where CP is used.
PRESETS = {
    "cpu": dict(seq_lens=(256, 512, 1024), n_heads=8, n_kv_heads=2, head_dim=32, batch=1, dtype="float32",
                warmup=1, iters=5),
    "cuda": dict(seq_lens=(8192, 16384, 32768), n_heads=32, n_kv_heads=8, head_dim=128, batch=1, dtype="bfloat16",
                 warmup=3, iters=10),
}
CORRECTNESS_COLUMNS = ["case", "impl", "kernel", "cp", "dtype", "n_heads", "n_kv_heads", "head_dim", "seq_len",
                       "batch", "err_output", "err_dq", "err_dk", "err_dv", "tolerance", "reference_vs_exact",
                       "fwd_calls", "fwd_sent_bytes", "bwd_calls", "bwd_sent_bytes", "formula_fwd_bytes",
                       "formula_bwd_bytes", "bytes_ok", "pass"]
BENCH_COLUMNS = ["impl", "cp", "seq_len", "n_heads", "n_kv_heads", "head_dim", "batch", "dtype", "kernel", "time_ms",
                 "time_min_ms", "time_max_ms", "fwd_calls", "fwd_sent_bytes", "bwd_calls", "bwd_sent_bytes",
                 "formula_fwd_bytes", "formula_bwd_bytes", "saved_bytes", "peak_mem_bytes", "max_rel_err",
                 "tolerance", "verified", "iters", "timing"]
PUBLIC_COLUMNS = ["api", "device", "runs", "error"]


@dataclass(frozen=True)
class BenchConfig:
    gpu: str = field(default="auto", metadata={"help": "preset (common/hardware.py); cpu = CPU + gloo"})
    cp: tuple[int, ...] = field(default=(), metadata={"help": "CP degrees (default: 1, 2, 4, ... up to the ranks)"})
    seq_lens: tuple[int, ...] = field(default=(), metadata={"help": "whole-sequence lengths s"})
    n_heads: int | None = field(default=None, metadata={"help": "query heads"})
    n_kv_heads: int | None = field(default=None, metadata={"help": "key/value heads (GQA when fewer)"})
    head_dim: int | None = field(default=None, metadata={"help": "head size"})
    batch: int | None = field(default=None, metadata={"help": "batch size b"})
    dtype: Literal["float32", "bfloat16"] | None = field(default=None, metadata={"help": "dtype"})
    warmup: int | None = field(default=None, metadata={"help": "untimed iterations per implementation"})
    iters: int | None = field(default=None, metadata={"help": "timed iterations per implementation"})
    correctness: bool = field(default=True, metadata={"help": "write the correctness grid first"})
    require_gpu: bool = field(default=False, metadata={"help": "refuse to run without CUDA (make cp-attention-gpu)"})
    out_dir: str = field(default="", metadata={"help": "where finished CSVs go (default: results/ in this lab; the "
                                                      "run writes into ../runs/<preset>_ws<ranks>/ first)"})
    resume: bool = field(default=False, metadata={"help": "continue the run folder's sweep: done rows are skipped"})
    promote: str = field(default="auto", metadata={"help": "when complete: auto (replace results/ for a preset run, "
                                                           "keep an experiment in runs/), replace, merge, no",
                                                   "choices": PROMOTE_CHOICES})

    def __post_init__(self):
        for name in ("n_heads", "n_kv_heads", "head_dim", "batch", "iters"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if any(s < 1 for s in self.seq_lens) or any(c < 1 for c in self.cp):
            raise ValueError("--seq-lens and --cp take positive integers")
        if self.warmup is not None and self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")


def resolve(cfg: BenchConfig, kind: str, world: int) -> BenchConfig:
    """Fill the preset's defaults and check every (N, s) of the sweep; ValueError on bad input."""
    preset = PRESETS[kind]
    filled = {k: (v if getattr(cfg, k) in (None, ()) else getattr(cfg, k)) for k, v in preset.items()}
    cps = cfg.cp or tuple(c for c in (1, 2, 4, 8, 16, 32, 64) if world % c == 0)
    cfg = dataclasses.replace(cfg, cp=cps, gpu=get_preset(cfg.gpu).name, out_dir=cfg.out_dir or str(RESULTS), **filled)
    for c in cfg.cp:
        if world % c:
            raise ValueError(f"--cp {c} must divide the number of ranks ({world}; NPROC x NNODES)")
        for s in cfg.seq_lens:
            check_cp_shape(s, c, cfg.n_heads, cfg.n_kv_heads)
    return cfg


class Saved:
    """Bytes of the distinct storages autograd saves for backward while active (a DTensor's: its local shard)."""

    def __init__(self):
        self.storages: dict[int, int] = {}

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        local = t._local_tensor if hasattr(t, "_local_tensor") else t
        st = local.untyped_storage()
        self.storages[st._cdata] = st.nbytes()
        return t

    def __enter__(self) -> "Saved":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


class Impl:
    """One implementation's forward and backward on this rank's shard, and how much it saves and peaks at."""

    def __init__(self, name: str, vcfg: verify.VerifyConfig, mesh: DeviceMesh, full: tuple[torch.Tensor, ...],
                 public: torch_cp.PublicCP | None):
        self.name, self.device = name, full[0].device
        pos = balanced_positions(vcfg.seq_len, vcfg.cp, mesh.get_local_rank(), device=self.device)
        local = [t.index_select(2, pos) for t in full] if name != "sdpa" else list(full)
        self.q, self.k, self.v = (t.detach().clone().requires_grad_(True) for t in local[:3])
        self.dout, self.scale, self.group = local[3], default_scale(vcfg.head_dim), mesh.get_group()
        self.public = public if name.startswith("torch-") else None  # CUDA: PyTorch's public API, one context
        self.kernel = vcfg.kernel

    def forward(self) -> torch.Tensor:
        if self.public is not None:
            return self.public.forward(self.name.removeprefix("torch-"))
        for t in (self.q, self.k, self.v):
            t.grad = None
        if self.name == "sdpa":  # K/V repeated, as PyTorch's CP does: the same kernel on the same shapes
            n = self.q.shape[1]
            return F.scaled_dot_product_attention(self.q, torch_cp.repeat_kv(self.k, n), torch_cp.repeat_kv(self.v, n),
                                                  is_causal=True)
        if self.name == "ours":
            return ring_attention(self.q, self.k, self.v, self.group, scale=self.scale, kernel=self.kernel)
        return torch_cp.torch_ring(self.q, self.k, self.v, self.group, scale=self.scale,
                                   rotate=self.name.removeprefix("torch-"))

    def step(self) -> None:
        out = self.forward()
        if self.public is not None:
            self.public.backward()
        else:
            out.backward(self.dout)

    def memory(self) -> tuple[int, int | None]:
        """(bytes saved for backward, CUDA peak above the allocated baseline over one step)."""
        with Saved() as saved:
            out = self.forward()
        del out
        if self.device.type != "cuda":
            return saved.bytes, None
        torch.cuda.synchronize(self.device)
        base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.step()
        torch.cuda.synchronize(self.device)
        return saved.bytes, torch.cuda.max_memory_allocated(self.device) - base


def time_interleaved(steps: dict[str, Callable[[], None]], cfg: BenchConfig, device: torch.device):
    """Timing samples per implementation, timed in turn, one iteration each per round."""
    for step in steps.values():
        for _ in range(cfg.warmup):
            step()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(cfg.iters):
        for name, step in steps.items():
            samples[name] += time_iterations(step, warmup=0, iters=1, device=device).samples_s
    return samples


def one_kernel(device: torch.device):
    """The timed and measured steps of every implementation on the same attention kernel: on CUDA, SDPA held to
    FlashAttention-2 (what ours calls; left alone SDPA may pick cuDNN's on Hopper, and the rows would compare kernels,
    not rings); on CPU SDPA's one fused kernel. The correctness checks before them leave SDPA its own choice."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(SDPBackend.FLASH_ATTENTION)


def bench_rows(cfg: BenchConfig, mesh: DeviceMesh, device: torch.device, seq: int) -> list[dict]:
    cp = mesh.size()
    shape = dict(cp=cp, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim, seq_len=seq,
                 batch=cfg.batch, dtype=cfg.dtype, kernel="fused", gpu=cfg.gpu)
    names = [n for n in IMPLS if n != "sdpa" or cp == 1]
    checks = {n: verify.check(verify.VerifyConfig(impl=n, **shape), mesh, device) for n in names if n != "sdpa"}
    vcfg = verify.VerifyConfig(**shape)
    full = verify.whole_sequence(vcfg, device)
    with contextlib.ExitStack() as stack:
        stack.enter_context(one_kernel(device))
        public = stack.enter_context(torch_cp.PublicCP(mesh, *full)) if device.type == "cuda" else None
        impls = {n: Impl(n, vcfg, mesh, full, public) for n in names}
        memory = {n: impl.memory() for n, impl in impls.items()}
        samples = time_interleaved({n: impl.step for n, impl in impls.items()}, cfg, device)
    rows = []
    for n in names:
        res, ms = checks.get(n), [s * 1e3 for s in samples[n]]
        rows.append({"impl": n, **{k: shape[k] for k in ("cp", "n_heads", "n_kv_heads", "head_dim", "batch", "dtype")},
                     "kernel": "flash (cuda)" if device.type == "cuda" else "flash (cpu)", "seq_len": seq,
                     "time_ms": statistics.median(ms), "time_min_ms": min(ms), "time_max_ms": max(ms),
                     "fwd_calls": res.sent.forward_calls if res else "none",
                     "fwd_sent_bytes": res.sent.forward_bytes if res else 0,
                     "bwd_calls": res.sent.backward_calls if res else "none",
                     "bwd_sent_bytes": res.sent.backward_bytes if res else 0,
                     "formula_fwd_bytes": res.expected.forward if res else 0,
                     "formula_bwd_bytes": res.expected.backward if res else 0,
                     "saved_bytes": memory[n][0], "peak_mem_bytes": memory[n][1],
                     "max_rel_err": res.max_err if res else None, "tolerance": res.tolerance if res else None,
                     "verified": res.passed if res else None, "iters": cfg.iters,
                     "timing": f"median of {cfg.iters}, max over {dist.get_world_size()} ranks"})
    return rows


def correctness_row(case: str, res: verify.CheckResult) -> dict:
    c, s = res.config, res.sent
    return {"case": case, "impl": c.impl, "kernel": c.kernel, "cp": c.cp, "dtype": c.dtype, "n_heads": c.n_heads,
            "n_kv_heads": c.n_kv_heads, "head_dim": c.head_dim, "seq_len": c.seq_len, "batch": c.batch,
            **{f"err_{k}": v for k, v in res.errors.items()}, "tolerance": res.tolerance,
            "reference_vs_exact": res.reference_vs_exact, "fwd_calls": s.forward_calls,
            "fwd_sent_bytes": s.forward_bytes, "bwd_calls": s.backward_calls, "bwd_sent_bytes": s.backward_bytes,
            "formula_fwd_bytes": res.expected.forward, "formula_bwd_bytes": res.expected.backward,
            "bytes_ok": res.bytes_ok, "pass": res.passed}


# Flags that change no row (common.runs.experiment_flags): any other makes the run an experiment, kept in runs/.
# --no-correctness is not one of them: published, its bench rows would sit beside an older run's correctness grid.
OPERATIONAL = ("gpu", "require_gpu", "out_dir", "resume", "promote")
CONFIG_IGNORE = ("resume", "promote", "out_dir")


def tag_of(cfg: BenchConfig, world: int, nnodes: int = 1) -> str:
    return get_preset(cfg.gpu).run_tag(world, nnodes)


def check_before_launch(cfg: BenchConfig, world: int, nnodes: int) -> None:
    """Run folder free; a --resume has a run folder whose CSVs match this sweep's columns and config."""
    tag = tag_of(cfg, world, nnodes)
    run_dir = run_dir_for(Path(cfg.out_dir), tag)
    check_free(run_dir)
    if cfg.resume:
        check_resumable(run_dir)
        saved = {k: v for k, v in config_dict(cfg).items() if k != "out_dir"}
        for name, columns in (("correctness", CORRECTNESS_COLUMNS), ("bench", BENCH_COLUMNS),
                              ("public_api", PUBLIC_COLUMNS)):
            check_resume(run_dir / f"{name}_{tag}.csv", columns, saved, CONFIG_IGNORE)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(BenchConfig, argv, description=__doc__, prog="bench.py")
    world, _, nnodes = planned_world()
    try:
        kind = device_kind(get_preset(cfg.gpu))
        if cfg.require_gpu and kind != "cuda":
            raise ValueError("this target measures a GPU and torch sees none (CPU runs: make cp-attention)")
        changed = experiment_flags(resolve(cfg, kind, world), resolve(BenchConfig(gpu=cfg.gpu), kind, world),
                                   OPERATIONAL)
        cfg = resolve(cfg, kind, world)
        if not launched_by_torchrun():
            check_before_launch(cfg, world, nnodes)
    except (ValueError, RunError) as e:
        fail(str(e), 2)
    with distributed(device=kind) as env:
        torch.set_float32_matmul_precision("highest")
        tag = tag_of(cfg, env.world_size, env.nnodes)
        prov, main_rank = provenance(env, BENCH_VERSION), env.rank == 0
        saved = {k: v for k, v in config_dict(cfg).items() if k != "out_dir"}
        meshes = {c: init_device_mesh(kind, (env.world_size // c, c), mesh_dim_names=("replica", "cp"))["cp"]
                  for c in cfg.cp}
        folder, error, writers = None, None, {}
        if main_rank:
            try:
                folder = RunFolder.open(run_dir_for(Path(cfg.out_dir), tag), Path(cfg.out_dir),
                                        "resume" if cfg.resume else "fresh")
                for name, columns, key in (("correctness", CORRECTNESS_COLUMNS, 5), ("bench", BENCH_COLUMNS, 3),
                                           ("public_api", PUBLIC_COLUMNS, 2)):
                    if name != "correctness" or (cfg.correctness and max(cfg.cp) > 1):  # N = 1: no grid
                        writers[name] = folder.writer(f"{name}_{tag}.csv", columns, columns[:key], prov, config=saved,
                                                      config_ignore=CONFIG_IGNORE)
            except (SchemaMismatch, RunError) as e:
                error = str(e)
                if folder is not None:
                    folder.close()
        if (error := from_rank0(error)) is not None:
            fail(error, 2)
        print0(f"cp-attention: {env.world_size} ranks on {env.device} ({env.backend}), CP in {cfg.cp}, "
               f"s in {cfg.seq_lens}, {cfg.dtype}" + (f" -> {folder.path}" if folder else ""))
        try:
            _measure(cfg, env, meshes, {n: writers.get(n, NoWriter()) for n in ("correctness", "bench", "public_api")},
                     main_rank)
        except BaseException:
            if folder is not None:
                folder.finish(complete=False, changed=changed)
            raise
        if folder is not None:
            for line in folder.finish(complete=True, changed=changed, promote=cfg.promote):
                print(line, flush=True)
    return 0


def _measure(cfg: BenchConfig, env, meshes: dict[int, DeviceMesh], out: dict, main_rank: bool) -> None:
    quiet = True if not main_rank else None
    kind = env.device.type
    if not from_rank0(out["public_api"].done({"api": "context_parallel", "device": kind})):
        # on CUDA the benchmark rows below run it (a failure stops the run); on CPU it is asked once and refuses
        refusal = torch_cp.public_refusal_on_cpu(meshes[max(cfg.cp)]) if kind == "cpu" else ""
        out["public_api"].write({"api": "context_parallel", "device": kind, "runs": not refusal, "error": refusal})
    if cfg.correctness:
        grid = [(c, case, v) for c in cfg.cp if c > 1 for case, v in verify.correctness_grid(c, env.device.type)]
        for c, case, vcfg in tqdm(grid, desc="correctness", disable=quiet):
            key = {"case": case, "impl": vcfg.impl, "kernel": vcfg.kernel, "cp": c, "dtype": vcfg.dtype}
            if not from_rank0(out["correctness"].done(key)):
                out["correctness"].write(correctness_row(case, verify.check(vcfg, meshes[c], env.device)))
    runs = [(c, s) for s in cfg.seq_lens for c in cfg.cp]
    for c, s in tqdm(runs, desc="timing", disable=quiet):
        if not from_rank0(out["bench"].done({"impl": "ours", "cp": c, "seq_len": s})):
            out["bench"].write_many(bench_rows(cfg, meshes[c], env.device, s))


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
