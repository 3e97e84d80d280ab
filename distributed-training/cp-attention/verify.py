"""Verify context-parallel attention against single-device attention: one JSON object per run.

Every rank draws the same whole-sequence Q, K, V and output gradient from the seed, keeps its tokens under
the load-balanced split (chunks r and 2N-1-r of 2N, ring_attention.balanced_positions), runs forward and
backward through the implementation under test, and compares with causal SDPA on the whole sequence in
one process (F.scaled_dot_product_attention, is_causal, enable_gqa), restricted to its rows:

    max_rel_err   output, dQ, dK, dV: max|CP - ref| / max|ref| over the whole tensor, max over ranks
    sent bytes    what each rank put on the wire in the forward and in the backward, counted at the
                  dispatcher (traffic.py), against the formula: ring_attention.ring_bytes for ours,
                  torch_bytes (below) for PyTorch's; they must be equal, byte for byte

Implementations: `ours` (common/ring_attention.py, --kernel math|fused), `torch-allgather` and
`torch-alltoall` (PyTorch's ring with each rotation, torch_cp.py: its ring core on CPU, the public
context_parallel on CUDA). Tolerance: fp32 1e-5, fp64 1e-12; bf16 twice the single-device bf16 SDPA's own
distance from the fp32 result on the same input (if CP is no less accurate than it, the triangle inequality
bounds their difference by that). Exit 0 when errors and bytes pass, 1 when not, 2 on bad input.

    make cp-verify CP=2                                              # CPU, 2 gloo ranks
    make cp-verify CP=4 ARGS="--n-heads 8 --n-kv-heads 2 --kernel math --dtype float64"
    make cp-verify CP=4 ARGS="--impl torch-alltoall"
    OMP_NUM_THREADS=1 PYTHONPATH=distributed-training python -m torch.distributed.run --standalone \\
        --nproc-per-node 2 distributed-training/cp-attention/verify.py --cp 2
    make cp-verify CP=1 GPU=h100                                     # 1 GPU (bf16: --dtype bfloat16)
    make cp-verify CP=8 GPU=h100 ARGS="--dtype bfloat16 --seq-len 4096 --head-dim 128"   # 8 GPUs
    make cp-verify CP=16 NNODES=2 GPU=h100 ...                       # 2 nodes: the ring crosses the network
"""

from __future__ import annotations

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
from common.ring_attention import RingBytes, balanced_positions, check_cp_shape, ring_attention, ring_bytes
from traffic import Traffic

IMPLS = ("ours", "torch-allgather", "torch-alltoall")
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


@dataclass(frozen=True)
class VerifyConfig(VerifyFlags):
    cp: int = field(default_factory=ranks_started,
                    metadata={"help": "CP degree; default: the ranks torchrun started (more ranks: replicas)"})
    head_dim: int = field(default=16, metadata={"help": "head size D"})
    dtype: Literal["float32", "float64", "bfloat16"] = field(default="float32", metadata={"help": "dtype"})
    kernel: Literal["math", "fused"] = field(default="fused", metadata={"help": "ours: block kernel "
                                                                             "(common/attention_block.py)"})
    impl: Literal["ours", "torch-allgather", "torch-alltoall"] = field(default="ours",
                                                                        metadata={"help": "implementation"})

    def __post_init__(self):
        super().__post_init__()
        if self.head_dim < 1:
            raise ValueError(f"--head-dim must be positive, got {self.head_dim}")
        check_cp_shape(self.seq_len, self.cp, self.n_heads, self.n_kv_heads)


def verify_preset() -> VerifyConfig:
    """The verify command's defaults: 8 query heads over 2 K/V heads (grouped-query attention), N = the ranks."""
    return VerifyConfig(n_heads=8, n_kv_heads=2)


def torch_bytes(batch: int, seq_len: int, n_heads: int, head_dim: int, cp: int, elem_bytes: int) -> RingBytes:
    """PyTorch's CP traffic per rank per layer: K/V repeated to n_heads; forward N-1 blocks (one all-gather, or
    N-1 all-to-all shifts); backward the same again plus N fp32 dK/dV shifts (torch_cp.py's docstring)."""
    block = 2 * batch * (seq_len // cp) * n_heads * head_dim
    kv = (cp - 1) * block * elem_bytes
    return RingBytes(kv, kv + (cp * block * 4 if cp > 1 else 0))


def expected_bytes(cfg: VerifyConfig, elem_bytes: int) -> RingBytes:
    if cfg.impl == "ours":
        return ring_bytes(cfg.batch, cfg.seq_len, cfg.n_kv_heads, cfg.head_dim, cfg.cp, elem_bytes,
                          max(4, elem_bytes))
    return torch_bytes(cfg.batch, cfg.seq_len, cfg.n_heads, cfg.head_dim, cfg.cp, elem_bytes)


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


def single_device(q, k, v, dout) -> tuple[torch.Tensor, ...]:
    """Causal SDPA over the whole sequence: output, dQ, dK, dV. K/V heads are repeated for the query heads (autograd
    sums their gradients back): with enable_gqa instead, CUDA's fp32 SDPA falls back to materialised scores."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, torch_cp.repeat_kv(k, q.shape[1]), torch_cp.repeat_kv(v, q.shape[1]),
                                         is_causal=True)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def run(cfg: VerifyConfig, mesh: DeviceMesh, full: tuple[torch.Tensor, ...]) -> tuple[tuple[torch.Tensor, ...], Sent]:
    """This rank's output, dQ, dK, dV through cfg.impl, and what it sent."""
    group, rank = mesh.get_group(), mesh.get_local_rank()
    pos = balanced_positions(cfg.seq_len, cfg.cp, rank, device=full[0].device)
    if cfg.impl != "ours" and full[0].is_cuda:
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
        if cfg.impl == "ours":
            out = ring_attention(q, k, v, group, scale=scale, kernel=cfg.kernel)
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
    expected: RingBytes

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
                "sent": self.sent._asdict(), "expected_bytes": self.expected._asdict(), "bytes_ok": self.bytes_ok,
                "pass": self.passed}


def check(cfg: VerifyConfig, mesh: DeviceMesh, device: torch.device) -> CheckResult:
    """Run the comparison on this rank (collective over the world); every rank returns the same result."""
    if mesh.size() != cfg.cp:
        raise ValueError(f"the mesh's CP size {mesh.size()} differs from --cp {cfg.cp}")
    full = whole_sequence(cfg, device)
    ref = single_device(*full)
    got, sent = run(cfg, mesh, full)
    pos = balanced_positions(cfg.seq_len, cfg.cp, mesh.get_local_rank(), device=device)
    errors = [_rel_err(g, r.index_select(2, pos)) for g, r in zip(got, ref)]
    floor = None
    if cfg.dtype == "bfloat16":  # fp32, not fp64: fp64 SDPA materialises s x s scores (no fused fp64 kernel on CUDA)
        exact = single_device(*(t.float() for t in full))
        floor = max(_rel_err(r, e) for r, e in zip(ref, exact))
    maxed = reduce_across_ranks([*errors, sent.forward_bytes, sent.backward_bytes], "max")
    return CheckResult(cfg, device.type, dist.get_world_size(), dict(zip(("output", "dq", "dk", "dv"), maxed[:4])),
                       TOLERANCE.get(cfg.dtype, 2 * (floor or 0.0)), floor,
                       sent._replace(forward_bytes=int(maxed[4]), backward_bytes=int(maxed[5])),
                       expected_bytes(cfg, full[0].element_size()))


def correctness_grid(cp: int, device_type: str) -> list[tuple[str, VerifyConfig]]:
    """The report's correctness table at CP degree cp: small shapes, every implementation, fp64/fp32/bf16."""
    shapes = {"mha": dict(n_heads=4, n_kv_heads=4, head_dim=16, seq_len=64, batch=2),
              "gqa": dict(n_heads=8, n_kv_heads=2, head_dim=16, seq_len=64, batch=2),
              # head_dim 12, 3 K/V heads of 2 queries each, batch 3, chunks of 7 tokens
              "odd": dict(n_heads=6, n_kv_heads=3, head_dim=12, seq_len=14 * cp, batch=3)}
    ours = [("ours", k) for k in ("math", "fused")] if device_type == "cpu" else [("ours", "fused")]
    impls = ours + [(i, "fused") for i in IMPLS[1:]]
    low = "float32" if device_type == "cpu" else "bfloat16"
    grid = [(case, VerifyConfig(cp=cp, impl=i, kernel=k, dtype=low, **shape))
            for case, shape in shapes.items() for i, k in impls]
    if device_type == "cpu":
        grid += [("gqa-fp64", VerifyConfig(cp=cp, kernel=k, dtype="float64", **shapes["gqa"])) for k in ("math", "fused")]
    return grid


def refuse(cfg: VerifyConfig, kind: str) -> None:
    if kind == "cuda" and cfg.impl != "ours" and cfg.dtype == "float64":
        raise ValueError("PyTorch's context_parallel on CUDA runs SDPA's fused kernels: --dtype float32 or bfloat16")


def main(argv: list[str] | None = None) -> int:
    return verify_main(VerifyConfig, verify_preset, "cp", check, argv, __doc__, refuse)


if __name__ == "__main__":
    sys.exit(entrypoint(main))
