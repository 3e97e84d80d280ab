"""Verify context-parallel attention against single-device attention: one JSON object per run.

Every rank draws the same whole-sequence Q, K, V and output gradient from the seed, keeps its tokens under the
layout (chunks r and 2N-1-r of every document, common/cp_layout.py), runs forward and backward through the
implementation under test, and compares with SDPA on the whole sequence in one process (F.scaled_dot_product_attention:
is_causal, or the documents' block-diagonal causal mask), restricted to its rows:

    max_rel_err   output, dQ, dK, dV: max|CP - ref| / max|ref| over the whole tensor, max over ranks
    err_vs_fp32   bf16 only: the same against the fp32 result, the implementation's own accuracy (the reference's
                  own distance from fp32 is reference_vs_exact)
    sent bytes    what each rank put on the wire in the forward and in the backward, counted at the
                  dispatcher (traffic.py), against the formula: common/cp_bytes.py's ring_bytes, allgather_bytes,
                  ulysses_bytes for ours, torch_bytes (below) for PyTorch's; they must be equal, byte for byte

Implementations: `ring`, `allgather`, `ulysses` (common/cp_attention.py, --kernel math|fused), `torch-allgather` and
`torch-alltoall` (PyTorch's ring with each rotation, torch_cp.py: its ring core on CPU, the public context_parallel
on CUDA; causal only: it takes no attention mask). Tolerance: fp32 1e-5, fp64 1e-12; bf16 twice the single-device
bf16 SDPA's own distance from the fp32 result on the same input (if CP is no less accurate than it, the triangle
inequality bounds their difference by that). On CUDA a causal check holds the reference and PyTorch's CP to
FlashAttention-2, the kernel ours calls (one_kernel): left alone, SDPA prefers cuDNN attention on sm90/sm100 with the
cuDNN of torch >= 2.11, and a bf16 comparison then measures two kernels' rounding, not CP. Exit 0 when errors and
bytes pass, 1 when not, 2 on bad input.

    make cp-verify CP=2                                              # CPU, 2 gloo ranks, the ring
    make cp-verify CP=4 ARGS="--impl ulysses --n-heads 8 --n-kv-heads 4 --kernel math --dtype float64"
    make cp-verify CP=4 ARGS="--impl allgather --seq-len 128 --documents 64,24,40"   # three packed documents
    make cp-verify CP=4 ARGS="--impl torch-alltoall"
    OMP_NUM_THREADS=1 PYTHONPATH=distributed-training python -m torch.distributed.run --standalone \\
        --nproc-per-node 2 distributed-training/cp-attention/verify.py --cp 2
    make cp-verify CP=1 GPU=h100                                     # 1 GPU (bf16: --dtype bfloat16)
    make cp-verify CP=8 GPU=h100 ARGS="--dtype bfloat16 --seq-len 4096 --head-dim 128"   # 8 GPUs
    make cp-verify CP=16 NNODES=2 GPU=h100 ...                       # 2 nodes: the ring crosses the network
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh

import torch_cp
from common.attention_block import default_scale
from common.attention_flags import VerifyFlags, ranks_started
from common.attention_sweep import verify_main
from common.config import config_dict
from common.dist import reduce_across_ranks
from common.failures import entrypoint
from common.cp_attention import cp_attention
from common.cp_bytes import CP_KINDS, CPBytes, cp_bytes
from common.cp_checks import check_cp_shape
from common.cp_layout import CPLayout
from traffic import Traffic

TORCH = ("torch-allgather", "torch-alltoall")
IMPLS = (*CP_KINDS, *TORCH)
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


@dataclass(frozen=True)
class VerifyConfig(VerifyFlags):
    cp: int = field(default_factory=ranks_started,
                    metadata={"help": "CP degree; default: the ranks torchrun started (more ranks: replicas)"})
    head_dim: int = field(default=16, metadata={"help": "head size D"})
    dtype: Literal["float32", "float64", "bfloat16"] = field(default="float32", metadata={"help": "dtype"})
    kernel: Literal["math", "fused"] = field(default="fused", metadata={"help": "ours: block kernel "
                                                                             "(common/attention_block.py)"})
    impl: Literal["ring", "allgather", "ulysses", "torch-allgather", "torch-alltoall"] = field(
        default="ring", metadata={"help": "implementation: ours (ring, allgather, ulysses) or PyTorch's"})
    documents: tuple[int, ...] = field(default=(), metadata={"help": "packed document lengths summing to --seq-len, "
                                                                     "each a multiple of 2 x CP; empty: one causal "
                                                                     "sequence"})

    def __post_init__(self):
        super().__post_init__()
        if self.head_dim < 1:
            raise ValueError(f"--head-dim must be positive, got {self.head_dim}")
        if self.documents and self.impl in TORCH:
            raise ValueError(f"--impl {self.impl}: PyTorch's context parallelism takes no attention mask (causal only); "
                             "drop --documents or pick ring, allgather or ulysses")
        check_cp_shape(self.seq_len, self.cp, self.n_heads, self.n_kv_heads, self.documents,
                       self.impl if self.impl in CP_KINDS else "ring")

    @property
    def layout(self) -> CPLayout:
        return CPLayout.of(self.seq_len, self.cp, self.documents)


def verify_preset() -> VerifyConfig:
    """The verify command's defaults: 8 query heads over 2 K/V heads (grouped-query attention), N = the ranks."""
    return VerifyConfig(n_heads=8, n_kv_heads=2)


def torch_bytes(batch: int, seq_len: int, n_heads: int, head_dim: int, cp: int, elem_bytes: int) -> CPBytes:
    """PyTorch's CP traffic per rank per layer: K/V repeated to n_heads; forward N-1 blocks (one all-gather, or
    N-1 all-to-all shifts); backward the same again plus N fp32 dK/dV shifts (torch_cp.py's docstring)."""
    block = 2 * batch * (seq_len // cp) * n_heads * head_dim
    kv = (cp - 1) * block * elem_bytes
    return CPBytes(kv, kv + (cp * block * 4 if cp > 1 else 0))


def expected_bytes(cfg: VerifyConfig, elem_bytes: int) -> CPBytes:
    """The formula of cfg.impl (common/cp_bytes.py for ours: gradients in flight in fp32, or fp64 for fp64)."""
    if cfg.impl in CP_KINDS:
        return cp_bytes(cfg.impl, cfg.batch, cfg.seq_len, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.cp,
                        elem_bytes, max(4, elem_bytes))
    return torch_bytes(cfg.batch, cfg.seq_len, cfg.n_heads, cfg.head_dim, cfg.cp, elem_bytes)


def one_kernel(device: torch.device):
    """On CUDA, SDPA held to FlashAttention-2, the kernel ours calls through common/attention_block.py (left alone,
    SDPA prefers cuDNN attention on sm90/sm100 with recent cuDNN: the rows would compare kernels, not CP); on CPU
    SDPA's one fused kernel, nothing to hold."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(SDPBackend.FLASH_ATTENTION)


class Sent(NamedTuple):
    """Calls and bytes sent by this rank, forward and backward (traffic.Traffic)."""
    forward_calls: str
    forward_bytes: int
    backward_calls: str
    backward_bytes: int


def whole_sequence(cfg: VerifyConfig, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Q, K, V, dO over the whole sequence, (B, H or Hkv, s, D), from the seed: the same on every rank (drawn on the
    device, in fp32: a GPU draws 32K-token tensors in microseconds)."""
    g = torch.Generator(device=device).manual_seed(cfg.seed)
    shapes = [(cfg.batch, h, cfg.seq_len, cfg.head_dim) for h in (cfg.n_heads, cfg.n_kv_heads, cfg.n_kv_heads,
                                                                    cfg.n_heads)]
    return tuple(torch.randn(s, generator=g, device=device).to(getattr(torch, cfg.dtype)) for s in shapes)


def single_device(q, k, v, dout, layout: CPLayout) -> tuple[torch.Tensor, ...]:
    """SDPA over the whole sequence, causal (or causal within the layout's documents: its mask): output, dQ, dK, dV.
    K/V heads are repeated for the query heads (autograd sums their gradients back): with enable_gqa instead, CUDA's
    fp32 SDPA falls back to materialised scores."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    mask = dict(is_causal=True) if layout.is_causal else dict(attn_mask=layout.allowed(q.device))
    out = F.scaled_dot_product_attention(q, torch_cp.repeat_kv(k, q.shape[1]), torch_cp.repeat_kv(v, q.shape[1]),
                                         **mask)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def run(cfg: VerifyConfig, mesh: DeviceMesh, full: tuple[torch.Tensor, ...]) -> tuple[tuple[torch.Tensor, ...], Sent]:
    """This rank's output, dQ, dK, dV through cfg.impl, and what it sent."""
    group, rank = mesh.get_group(), mesh.get_local_rank()
    pos = cfg.layout.positions(rank, device=full[0].device)
    if cfg.impl in TORCH and full[0].is_cuda:
        with torch_cp.PublicCP(mesh, *full, rotate=cfg.impl.removeprefix("torch-")) as cp:
            with Traffic() as fwd:
                out = cp.forward()
            with Traffic() as bwd:
                cp.backward()
        groups = (cfg.batch, cfg.n_kv_heads, -1, *cp.k.shape[2:])  # K/V were repeated to H heads: sum them back
        return ((out.detach(), cp.q.grad, cp.k.grad.reshape(groups).sum(2), cp.v.grad.reshape(groups).sum(2)),
                Sent(fwd.describe(), fwd.sent_bytes, bwd.describe(), bwd.sent_bytes))
    q, k, v = (t.index_select(2, pos).detach().requires_grad_(True) for t in full[:3])
    scale = default_scale(cfg.head_dim)
    with Traffic() as fwd:
        if cfg.impl in CP_KINDS:
            out = cp_attention(cfg.impl, q, k, v, group, layout=cfg.layout, scale=scale, kernel=cfg.kernel)
        else:
            out = torch_cp.torch_ring(q, k, v, group, scale=scale, rotate=cfg.impl.removeprefix("torch-"))
    with Traffic() as bwd:
        out.backward(full[3].index_select(2, pos))
    return (out.detach(), q.grad, k.grad, v.grad), Sent(fwd.describe(), fwd.sent_bytes, bwd.describe(),
                                                         bwd.sent_bytes)


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got.double() - want.double()).abs().max().item() / max(want.double().abs().max().item(), 1e-300)


@dataclass(frozen=True)
class CheckResult:
    """One comparison with single-device attention; every rank of the world holds the same."""
    config: VerifyConfig
    device: str
    world_size: int
    errors: dict[str, float]  # output, dq, dk, dv: max relative error, max over ranks
    tolerance: float
    reference_vs_exact: float | None  # bf16: the single-device bf16 SDPA's distance from fp32
    sent: Sent  # max over ranks of the bytes (every rank sends the same under the balanced split)
    expected: CPBytes
    vs_fp32: float | None = None  # bf16: this implementation's own distance from fp32 (max over out, dq, dk, dv)

    @property
    def max_err(self) -> float:
        return max(self.errors.values())

    @property
    def bytes_ok(self) -> bool:
        return (self.sent.forward_bytes, self.sent.backward_bytes) == tuple(self.expected)

    @property
    def passed(self) -> bool:
        return self.max_err <= self.tolerance and self.bytes_ok

    def as_json(self) -> dict:
        return {"config": config_dict(self.config), "device": self.device, "world_size": self.world_size,
                "max_rel_err": self.errors, "tolerance": self.tolerance, "reference_vs_exact": self.reference_vs_exact,
                "err_vs_fp32": self.vs_fp32,
                "sent": self.sent._asdict(), "expected_bytes": self.expected._asdict(), "bytes_ok": self.bytes_ok,
                "pass": self.passed}


def check(cfg: VerifyConfig, mesh: DeviceMesh, device: torch.device) -> CheckResult:
    """Run the comparison on this rank (collective over the world); every rank returns the same result."""
    if mesh.size() != cfg.cp:
        raise ValueError(f"the mesh's CP size {mesh.size()} differs from --cp {cfg.cp}")
    full, layout = whole_sequence(cfg, device), cfg.layout
    with one_kernel(device) if layout.is_causal else contextlib.nullcontext():  # flash takes no mask
        ref = single_device(*full, layout)
        got, sent = run(cfg, mesh, full)
    pos = layout.positions(mesh.get_local_rank(), device=device)
    errors = [_rel_err(g, r.index_select(2, pos)) for g, r in zip(got, ref)]
    floor, vs_fp32 = None, -1.0
    if cfg.dtype == "bfloat16":  # fp32, not fp64: fp64 SDPA materialises s x s scores (no fused fp64 kernel on CUDA)
        exact = single_device(*(t.float() for t in full), layout)
        floor = max(_rel_err(r, e) for r, e in zip(ref, exact))
        vs_fp32 = max(_rel_err(g, e.index_select(2, pos)) for g, e in zip(got, exact))
    maxed = reduce_across_ranks([*errors, vs_fp32, sent.forward_bytes, sent.backward_bytes], "max")
    return CheckResult(cfg, device.type, dist.get_world_size(), dict(zip(("output", "dq", "dk", "dv"), maxed[:4])),
                       TOLERANCE.get(cfg.dtype, 2 * (floor or 0.0)), floor,
                       sent._replace(forward_bytes=int(maxed[5]), backward_bytes=int(maxed[6])),
                       expected_bytes(cfg, full[0].element_size()), maxed[4] if floor is not None else None)


class Case(NamedTuple):
    """A correctness case: heads, K/V heads, head size, tokens per CP rank, batch, and packed documents as counts of
    2N-token units (empty: one causal sequence)."""
    heads: int
    kv_heads: int
    head_dim: int
    per_rank: int
    batch: int
    documents: tuple[int, ...] = ()


# gqa keeps Ulysses possible up to N = 4 (4 K/V heads), gqa2 is where it stops (2 K/V heads at N = 4), odd has head
# size 12, 3 K/V heads of 2 queries, batch 3 and chunks of 7 tokens, docs packs three documents of 3, 1 and 4 units
# of 2N tokens (uneven, one shorter than the others).
CASES = {"mha": Case(4, 4, 16, 32, 2), "gqa": Case(8, 4, 16, 32, 2), "gqa2": Case(8, 2, 16, 32, 2),
         "odd": Case(6, 3, 12, 14, 3), "docs": Case(8, 4, 16, 16, 2, (3, 1, 4))}


def case_config(case: str, cp: int, **kw) -> VerifyConfig:
    c = CASES[case]
    documents = tuple(2 * cp * n for n in c.documents)
    return VerifyConfig(cp=cp, n_heads=c.heads, n_kv_heads=c.kv_heads, head_dim=c.head_dim, batch=c.batch,
                        seq_len=sum(documents) or c.per_rank * cp, documents=documents, **kw)


def runs_here(case: str, impl: str, cp: int) -> bool:
    """Ulysses needs both head counts divisible by N; PyTorch's CP takes no mask (no document case)."""
    c = CASES[case]
    return not (impl == "ulysses" and (c.heads % cp or c.kv_heads % cp)) and not (impl in TORCH and c.documents)


def correctness_grid(cp: int, device_type: str) -> list[tuple[str, VerifyConfig]]:
    """The report's correctness table at CP degree cp: small shapes, every implementation that runs the case, fp32
    (bf16 on CUDA) with every kernel, then fp64 (CPU: the exactness check) and bf16 (CPU: accuracy against fp32)."""
    kernels = ("math", "fused") if device_type == "cpu" else ("fused",)
    low = "float32" if device_type == "cpu" else "bfloat16"
    grid = [(case, case_config(case, cp, impl=i, kernel=k, dtype=low)) for case in CASES for i in IMPLS
            if runs_here(case, i, cp) for k in (kernels if i in CP_KINDS else ("fused",))]
    if device_type == "cpu":
        grid += [(f"{case}-fp64", case_config(case, cp, impl=i, kernel=k, dtype="float64"))
                 for case in ("gqa", "docs") for i in CP_KINDS for k in kernels]
        grid += [("gqa-bf16", case_config("gqa", cp, impl=i, kernel="fused", dtype="bfloat16")) for i in IMPLS]
    return grid


def refuse(cfg: VerifyConfig, kind: str) -> None:
    if kind == "cuda" and cfg.impl in TORCH and cfg.dtype == "float64":
        raise ValueError("PyTorch's context_parallel on CUDA runs SDPA's fused kernels: --dtype float32 or bfloat16")


def main(argv: list[str] | None = None) -> int:
    return verify_main(VerifyConfig, verify_preset, "cp", check, argv, __doc__, refuse)


if __name__ == "__main__":
    sys.exit(entrypoint(main))
