"""Forward+backward time, bytes and memory of context-parallel causal attention: the three hand-rolled designs
(common/cp_attention.py: ring, all-gather, Ulysses) against PyTorch's context parallelism (torch_cp.py), vs CP degree,
sequence and heads.

For every CP degree N that divides the world (each group of N consecutive ranks runs one attention; the
others run copies of it, so every device is busy as in DP x CP), every sequence length and every head count, one
row per implementation:

    sdpa              single-device causal SDPA on the whole sequence (N = 1 rows only): what CP replaces
    ring              K/V blocks passed around the ring with send/recv, each hop posted before a block's attention
    allgather         one all-gather of K/V, the local block computed while it travels; dK/dV reduce-scattered
    ulysses           an all-to-all of q, k, v over heads, attention on whole sequences, an all-to-all back (only
                      where both head counts divide by N: the row is absent otherwise)
    torch-allgather   PyTorch's context parallelism, its default rotation (one all-gather of K/V)
    torch-alltoall    the same with a ring shift per step (all-to-all): a ring, not Ulysses

    time_ms           median over iterations of the max over ranks, implementations interleaved
                      iteration by iteration (drift on a shared machine hits all alike); time_min_ms and
                      time_max_ms the fastest and slowest iteration (the spread every ratio carries)
    *_sent_bytes      what one rank sent in the forward / backward, counted at the dispatcher (traffic.py),
                      beside the formula (common/cp_bytes.py; verify.torch_bytes for PyTorch's)
    saved_bytes       the tensors kept for backward (saved-tensor hooks: exact, any device)
    peak_mem_bytes    CUDA only: torch.cuda.max_memory_allocated over one step, above what was allocated
    max_rel_err       the same shape verified against single-device attention first (verify.check)
    load_1m           the machine's 1-minute load average when the row was timed (os.getloadavg): other work
                      on shared cores, beside the times it disturbs

On CPU PyTorch's public context_parallel refuses (its dispatcher has no rule for the CPU SDPA kernel;
the refusal is written to results/public_api_<tag>.csv), so the PyTorch rows there are its ring core
(_templated_ring_attention and its backward) on the same CPU kernel; on CUDA they are the public API.
Every implementation runs the same kernel (verify.one_kernel: FlashAttention-2 on CUDA, SDPA's fused CPU kernel on
CPU; ours calls them through common/attention_block.py), so the rows differ in the communication, not the kernel.

    make cp-attention                          # CPU: 2 then 4 gloo ranks (N = 1, 2 timed; N = 4 bytes), the report
    make cp-attention-gpu GPU=h100             # 1 GPU: N = 1 (wrapper overheads); N GPUs: N = 1, 2, 4, 8
    make cp-attention-run GPU=h100 NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 ARGS="--cp 8,16"  # each node
    OMP_NUM_THREADS=1 PYTHONPATH=distributed-training python -m torch.distributed.run --standalone \\
        --nproc-per-node 2 distributed-training/cp-attention/bench.py --gpu cpu

On CPU every rank is a process on a few shared cores and gloo runs over loopback TCP: the times show
per-step costs of the collectives and their kernels, not CP's speedups, and a CPU has no copy engine to overlap
a transfer with compute. With more ranks than cores they measure the scheduler and are compared with nothing
(the report's rule); bytes, correctness and saved memory are exact anywhere.

The runner is tp-attention's too (common/attention_sweep.py: checks before launch, a mesh per degree, the run folder
runs/<preset>_ws<N>/ -> results/, --resume); the presets are functions, cpu() and cuda() (--gpu picks one, every
other flag overrides it; --help shows its values).
"""

from __future__ import annotations

import contextlib
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

import torch_cp
import verify
from common.attention_block import default_scale
from common.attention_flags import SweepFlags, divisor_degrees
from common.attention_sweep import Sweep, fill, for_hardware, run_sweep, time_interleaved
from common.cp_attention import cp_attention
from common.cp_bytes import CP_KINDS
from common.cp_checks import check_cp_shape, heads_problem
from common.dist import DistInfo, from_rank0
from common.failures import entrypoint
from common.runner import Table

LAB = Path(__file__).resolve().parent
IMPLS = ("sdpa", *verify.IMPLS)
CORRECTNESS_COLUMNS = ["case", "impl", "kernel", "cp", "dtype", "n_heads", "n_kv_heads", "head_dim", "seq_len",
                       "batch", "documents", "err_output", "err_dq", "err_dk", "err_dv", "tolerance",
                       "reference_vs_exact", "err_vs_fp32", "fwd_calls", "fwd_sent_bytes", "bwd_calls",
                       "bwd_sent_bytes", "formula_fwd_bytes", "formula_bwd_bytes", "bytes_ok", "pass"]
BENCH_COLUMNS = ["impl", "cp", "seq_len", "n_heads", "n_kv_heads", "head_dim", "batch", "dtype", "kernel", "time_ms",
                 "time_min_ms", "time_max_ms", "fwd_calls", "fwd_sent_bytes", "bwd_calls", "bwd_sent_bytes",
                 "formula_fwd_bytes", "formula_bwd_bytes", "saved_bytes", "peak_mem_bytes", "max_rel_err",
                 "tolerance", "verified", "iters", "timing", "load_1m"]
BENCH_KEY = ["impl", "cp", "seq_len", "n_heads", "n_kv_heads"]
PUBLIC_COLUMNS = ["api", "device", "runs", "error"]


@dataclass(frozen=True, kw_only=True)
class BenchConfig(SweepFlags):
    DEGREE = "cp"
    cp: tuple[int, ...] = field(metadata={"help": "CP degrees (the preset's: 1, 2, 4, ... up to the ranks)"})
    heads: tuple[str, ...] = field(metadata={"help": "query/K-V heads of each case, e.g. 8/8 (MHA) or 8/2 (GQA)"})

    def __post_init__(self):
        super().__post_init__()
        for h in self.heads:
            q, _, kv = h.partition("/")
            if not (q.isdigit() and kv.isdigit() and int(q) > 0 and int(kv) > 0):
                raise ValueError(f"--heads takes QUERY/KV pairs of positive counts (e.g. 8/8,8/2), got {h!r}")
        if not self.heads:
            raise ValueError("--heads needs at least one QUERY/KV pair (e.g. 8/2)")

    @property
    def head_pairs(self) -> list[tuple[int, int]]:
        return [(int(h.split("/")[0]), int(h.split("/")[1])) for h in self.heads]


# CPU: small enough for 4 ranks on 2 cores in a few minutes; MHA and GQA (2 K/V heads: Ulysses stops at N = 2).
# GPU: Llama-3-8B's attention (32 query heads, 8 K/V heads of 128) and its MHA twin, bf16, sequences where CP is used.
def cpu(world: int) -> BenchConfig:
    return BenchConfig(gpu="cpu", cp=divisor_degrees(world), seq_lens=(256, 512, 1024), heads=("8/8", "8/2"),
                       head_dim=32, batch=1, dtype="float32", warmup=1, iters=10)


def cuda(world: int) -> BenchConfig:
    return BenchConfig(gpu="h100", cp=divisor_degrees(world), seq_lens=(8192, 16384, 32768), heads=("32/8", "32/32"),
                       head_dim=128, batch=1, dtype="bfloat16", warmup=3, iters=10)


def preset(gpu: str = "auto") -> BenchConfig:
    return for_hardware(gpu, cpu, cuda)


def check_shapes(cfg: BenchConfig, world: int) -> None:
    """Every (N, s, heads) of the sweep splits into the load-balanced chunks and groups its heads (cp_checks); Ulysses'
    rows are left out where its heads do not divide by N, not refused."""
    for c in cfg.cp:
        for s in cfg.seq_lens:
            for h, kv in cfg.head_pairs:
                check_cp_shape(s, c, h, kv)


def impls_at(cp: int, n_heads: int, n_kv_heads: int) -> list[str]:
    """The implementations of one (N, heads): SDPA at N = 1 only, Ulysses where its heads divide by N."""
    return [n for n in IMPLS if (n != "sdpa" or cp == 1)
            and not (n == "ulysses" and heads_problem(n_heads, n_kv_heads, cp, "ulysses"))]


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
        pos = vcfg.layout.positions(mesh.get_local_rank(), device=self.device)
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
        if self.name in CP_KINDS:
            return cp_attention(self.name, self.q, self.k, self.v, self.group, scale=self.scale, kernel=self.kernel)
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


def bench_rows(cfg: BenchConfig, mesh: DeviceMesh, device: torch.device, seq: int, heads: tuple[int, int]
               ) -> list[dict]:
    cp = mesh.size()
    shape = dict(cp=cp, n_heads=heads[0], n_kv_heads=heads[1], head_dim=cfg.head_dim, seq_len=seq,
                 batch=cfg.batch, dtype=cfg.dtype, kernel="fused", gpu=cfg.gpu)
    names = impls_at(cp, *heads)
    checks = {n: verify.check(verify.VerifyConfig(impl=n, **shape), mesh, device) for n in names if n != "sdpa"}
    vcfg = verify.VerifyConfig(**shape)
    full = verify.whole_sequence(vcfg, device)
    with contextlib.ExitStack() as stack:
        stack.enter_context(verify.one_kernel(device))
        public = stack.enter_context(torch_cp.PublicCP(mesh, *full)) if device.type == "cuda" else None
        impls = {n: Impl(n, vcfg, mesh, full, public) for n in names}
        memory = {n: impl.memory() for n, impl in impls.items()}
        samples = time_interleaved({n: impl.step for n, impl in impls.items()}, cfg.warmup, cfg.iters, device)
    load = round(os.getloadavg()[0], 2)
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
                     "timing": f"median of {cfg.iters}, max over {dist.get_world_size()} ranks", "load_1m": load})
    return rows


def correctness_row(case: str, res: verify.CheckResult) -> dict:
    c, s = res.config, res.sent
    return {"case": case, "impl": c.impl, "kernel": c.kernel, "cp": c.cp, "dtype": c.dtype, "n_heads": c.n_heads,
            "n_kv_heads": c.n_kv_heads, "head_dim": c.head_dim, "seq_len": c.seq_len, "batch": c.batch,
            "documents": "+".join(map(str, c.documents)), **{f"err_{k}": v for k, v in res.errors.items()},
            "tolerance": res.tolerance, "reference_vs_exact": res.reference_vs_exact, "err_vs_fp32": res.vs_fp32,
            "fwd_calls": s.forward_calls,
            "fwd_sent_bytes": s.forward_bytes, "bwd_calls": s.backward_calls, "bwd_sent_bytes": s.backward_bytes,
            "formula_fwd_bytes": res.expected.forward, "formula_bwd_bytes": res.expected.backward,
            "bytes_ok": res.bytes_ok, "pass": res.passed}


def tables(cfg: BenchConfig, tag: str) -> list[Table | None]:
    """correctness_<tag>.csv (not at N = 1 alone, nor with --no-correctness: a header without rows is not a result),
    bench_<tag>.csv, public_api_<tag>.csv (whether PyTorch's public context_parallel runs here)."""
    grid = cfg.correctness and max(cfg.cp) > 1
    return [Table(f"correctness_{tag}.csv", CORRECTNESS_COLUMNS, CORRECTNESS_COLUMNS[:5]) if grid else None,
            Table(f"bench_{tag}.csv", BENCH_COLUMNS, BENCH_KEY),
            Table(f"public_api_{tag}.csv", PUBLIC_COLUMNS, PUBLIC_COLUMNS[:2])]


def measure(cfg: BenchConfig, env: DistInfo, meshes: dict[int, DeviceMesh], writers: list) -> None:
    """Whether PyTorch's public API runs here, the correctness grid at every N > 1, then the rows of every (N, s)."""
    corr, bench, public = writers
    kind = env.device.type
    if not from_rank0(public.done({"api": "context_parallel", "device": kind})):
        # on CUDA the benchmark rows below run it (a failure stops the run); on CPU it is asked once and refuses
        refusal = torch_cp.public_refusal_on_cpu(meshes[max(cfg.cp)]) if kind == "cpu" else ""
        public.write({"api": "context_parallel", "device": kind, "runs": not refusal, "error": refusal})
    if cfg.correctness:
        fill(corr, [(c, case, v) for c in cfg.cp if c > 1 for case, v in verify.correctness_grid(c, kind)],
             "correctness", key=lambda g: {"case": g[1], "impl": g[2].impl, "kernel": g[2].kernel, "cp": g[0],
                                           "dtype": g[2].dtype},
             rows=lambda g: [correctness_row(g[1], verify.check(g[2], meshes[g[0]], env.device))])
    fill(bench, [(c, s, h) for h in cfg.head_pairs for s in cfg.seq_lens for c in cfg.cp], "timing",
         key=lambda r: {"impl": "ring", "cp": r[0], "seq_len": r[1], "n_heads": r[2][0], "n_kv_heads": r[2][1]},
         rows=lambda r: bench_rows(cfg, meshes[r[0]], env.device, r[1], r[2]))


# --no-correctness is not among the flags that change no row: published, its bench rows would sit beside an older
# run's correctness grid (common.runner.experiment).
SWEEP = Sweep("cp-attention", LAB, "cp", BenchConfig, preset, check_shapes, tables, measure,
              lambda cfg: f"CP in {cfg.cp}, s in {cfg.seq_lens}, heads {', '.join(cfg.heads)}, {cfg.dtype}")


def main(argv: list[str] | None = None) -> int:
    return run_sweep(SWEEP, argv, __doc__)


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
