"""Verify tensor-parallel attention against the single-device block: one JSON object per run.

For a TP degree t and a shape, every rank builds the same single-device module (the common GPT's
Block, Attention or MLP) from the same seed, slices its own TP shard out of it, runs forward and
backward on the same input, and compares with the single-device forward and backward:

    max_rel_err   output, input gradient and every parameter gradient of the single-device
                  module, each as max|TP - ref| / max|ref| over the whole tensor (a norm-wise
                  relative error: elements near zero do not blow it up; a bias is scaled by
                  its layer's whole gradient [dW db]), max over ranks
    collectives   counted at the dispatcher per forward and per backward (comm_count.py), and
                  the bytes each rank sends vs the analytic 8*b*s*h*(t-1)/t per layer (SC21)

Tolerance: fp32 1e-5. bf16: twice the distance of the single-device bf16 module from the fp32
one, measured in the same run on the same input (`reference_vs_fp32`). In bf16 the TP path
rounds differently (each rank's partial sums are rounded to bf16 before they are added, and
gloo/NCCL add them in bf16) but should be no *less* accurate than the single-device bf16 module:
if |TP - fp32| <= |ref - fp32| then |TP - ref| <= 2 |ref - fp32| (triangle inequality). At the
default shape that floor is about 4e-2, ten bf16 ulps (u = 2^-8); a slicing or scaling bug
shows as errors of order 1. The verify exits 0 when errors and counts pass, 1 when not, 2 on
bad input.

    # CPU (gloo), 2 ranks; SP=1 for sequence parallelism
    make tp-verify TP=2
    make tp-verify TP=4 SP=1 ARGS="--n-heads 8 --n-kv-heads 4 --dtype bfloat16"
    # the same without make
    OMP_NUM_THREADS=1 PYTHONPATH=distributed-training python -m torch.distributed.run --standalone \\
        --nproc-per-node 2 distributed-training/tp-attention/verify.py --sp --fused-qkv
    # 1 GPU: t = 1 (wrappers only); N GPUs: --nproc-per-node N; N nodes: make tp-verify NNODES=2 ...
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from comm_count import CommCounter, tp_bytes_per_layer
from common.attention_sweep import verify_main
from common.config import config_dict
from common.dist import reduce_across_ranks
from common.failures import entrypoint
from common.model import MLP, Attention, Block, GPTConfig
from dtensor_tp import dtensor_parallel
from layers import sync_sequence_parallel_grads
from mappings import TPGroup
from tp_block import tensor_parallel
from tp_config import VerifyConfig, verify_preset

FP32_TOLERANCE = 1e-5


def build_reference(cfg: VerifyConfig, device: torch.device) -> nn.Module:
    """The single-device module under test, fp32-initialised from cfg.seed, then cast to cfg.dtype."""
    torch.manual_seed(cfg.seed)
    gcfg = GPTConfig(seq_len=cfg.seq_len, d_model=cfg.d_model, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads,
                     d_ff=cfg.ffn, bias=cfg.bias)
    module = {"block": Block, "attn": Attention, "mlp": MLP}[cfg.module](gcfg)
    for m in module.modules():  # LayerNorms start at (1, 0); perturb them so a slip in copying them shows
        if isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight, 1.0, 0.1)
            if m.bias is not None:
                nn.init.normal_(m.bias, 0.0, 0.1)
    return module.to(device=device, dtype=getattr(torch, cfg.dtype))


def expected_collectives(cfg: VerifyConfig) -> dict[str, dict[str, int]]:
    """Megatron: 1 all-reduce forward and 1 backward per region; SP: 1 all-gather + 1 reduce-scatter each way."""
    if cfg.tp == 1:
        return {"forward": {}, "backward": {}}
    n = 2 if cfg.module == "block" else 1  # a block is two regions: attention and MLP
    per_pass = {"all_gather": n, "reduce_scatter": n} if cfg.sp else {"all_reduce": n}
    return {"forward": per_pass, "backward": dict(per_pass)}


def _rel_err(got: torch.Tensor, want: torch.Tensor, scale: float) -> float:
    return (got.double() - want.double()).abs().max().item() / max(scale, 1e-30)


def _grad_scale(name: str, grads: dict[str, torch.Tensor]) -> float:
    """max|grad|; for a bias, of its layer's whole gradient [dW db] (y = [W b] [x; 1] is one matrix).

    The key projection's bias has a gradient that is zero in exact arithmetic (softmax ignores a
    shift shared by all keys), so relative to itself its error would be roundoff over roundoff.
    """
    scale = grads[name].abs().max().item()
    weight = name.removesuffix("bias") + "weight"
    if name.endswith(".bias") and weight in grads:
        scale = max(scale, grads[weight].abs().max().item())
    return scale


def _uncovered(ref: nn.Module, module: nn.Module, tp: TPGroup) -> list[str]:
    """Master parameters (or parts of them) that no rank's shard holds: a slicing bug the errors would miss."""
    seen = {name: torch.zeros(p.shape, dtype=torch.int32, device=p.device) for name, p in ref.named_parameters()}
    for p in module.parameters():
        for s in p.master_slices:
            s.of_master(seen[s.name]).fill_(1)
    flat = torch.cat([m.reshape(-1) for m in seen.values()])
    dist.all_reduce(flat, group=tp.group)
    counts = flat.split([m.numel() for m in seen.values()])
    return [name for name, c in zip(seen, counts) if c.numel() and c.min().item() == 0]


def _run(module: nn.Module, x: torch.Tensor, dy: torch.Tensor, tp: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Forward and backward once, counting collectives in each; returns output, input grad, counters."""
    x = x.clone().requires_grad_(True)
    with CommCounter(tp) as fwd:
        y = module(x)
    with CommCounter(tp) as bwd:
        y.backward(dy)
    return y.detach(), x.grad, {"forward": fwd, "backward": bwd}


class Collectives(NamedTuple):
    """Collectives counted by kind at the dispatcher, in one forward, one backward, and the per-step sync."""
    forward: dict[str, int]
    backward: dict[str, int]
    grad_sync: dict[str, int]  # the SP-replicated parameters' gradients, once per step


@dataclass(frozen=True)
class CheckResult:
    """One comparison of a TP module with its single-device reference; every rank holds the same."""
    config: VerifyConfig
    device: str
    world_size: int
    errors: dict[str, float]  # max relative error per tensor: output, input_grad, then every parameter gradient
    tolerance: float
    reference_vs_fp32: float | None  # the single-device module's own distance from fp32 (low precision only)
    uncovered_params: list[str]  # master parameters no rank's shard holds
    collectives: Collectives
    expected: dict[str, dict[str, int]] | None  # Megatron's counts; None where no rule applies (dtensor-naive)
    comm_bytes_measured: float  # bytes each rank sends per step, ring model, counted at the dispatcher
    comm_bytes_analytic: float  # SC21's 8bsh(t-1)/t per layer, for this module's regions

    @property
    def max_err(self) -> float:
        return max(self.errors.values())

    @property
    def worst_param(self) -> tuple[str, float]:
        """The parameter gradient with the largest error, and that error."""
        params = {k: v for k, v in self.errors.items() if k not in ("output", "input_grad")}
        name = max(params, key=params.get)
        return name, params[name]

    @property
    def errors_ok(self) -> bool:
        return self.max_err <= self.tolerance and not self.uncovered_params

    @property
    def counts_ok(self) -> bool:
        return self.expected is None or {"forward": self.collectives.forward,
                                         "backward": self.collectives.backward} == self.expected

    @property
    def passed(self) -> bool:
        return self.errors_ok and self.counts_ok

    def as_json(self) -> dict:
        """What `verify.py` prints: one JSON object."""
        return {"config": config_dict(self.config), "device": self.device, "world_size": self.world_size,
                "max_rel_err": self.errors, "tolerance": self.tolerance, "reference_vs_fp32": self.reference_vs_fp32,
                "uncovered_params": self.uncovered_params, "errors_ok": self.errors_ok,
                "collectives": self.collectives._asdict(), "expected_collectives": self.expected,
                "counts_ok": self.counts_ok, "comm_bytes_per_rank": {"measured_ring": self.comm_bytes_measured,
                                                                     "analytic": self.comm_bytes_analytic},
                "pass": self.passed}


def check(cfg: VerifyConfig, tp_mesh: DeviceMesh, device: torch.device) -> CheckResult:
    """Run the comparison on this rank (a collective over the world); every rank returns the same result."""
    tp = TPGroup.of(tp_mesh.get_group())
    if tp.size != cfg.tp:
        raise ValueError(f"the mesh's TP size {tp.size} differs from --tp {cfg.tp}")
    ref = build_reference(cfg, device)
    if cfg.impl == "ours":
        module = tensor_parallel(ref, tp, sequence_parallel=cfg.sp, fused_qkv=cfg.fused_qkv)
    else:  # built before the reference's backward: deepcopy would copy its .grad too
        module = dtensor_parallel(ref, tp_mesh, sequence_parallel=cfg.sp, prepare_input=cfg.impl == "dtensor")
    x = torch.randn(cfg.batch, cfg.seq_len, cfg.d_model, device=device, dtype=getattr(torch, cfg.dtype))
    dy = torch.randn_like(x)

    def local(t: torch.Tensor) -> torch.Tensor:  # with SP, this rank's slice of the sequence
        n = cfg.seq_len // tp.size
        return t.narrow(1, tp.rank * n, n) if cfg.sp else t

    y_ref, dx_ref, _ = _run(ref, x, dy, 1)
    y_tp, dx_tp, counters = _run(module, local(x), local(dy), tp.size)
    with CommCounter(tp.size) as sync:  # once per step, not per block: the SP-replicated parameters
        if cfg.impl == "ours":
            sync_sequence_parallel_grads(module.parameters(), tp)

    errors = {"output": _rel_err(y_tp, local(y_ref), y_ref.abs().max().item()),
              "input_grad": _rel_err(dx_tp, local(dx_ref), dx_ref.abs().max().item())}
    errors.update(_param_errors(ref, module, sliced=cfg.impl == "ours"))
    errors = dict(zip(errors, reduce_across_ranks(list(errors.values()), "max")))
    uncovered = _uncovered(ref, module, tp) if cfg.impl == "ours" else []
    floor = None
    if cfg.dtype != "float32":  # the yardstick for low precision: the single-device module's own distance from fp32
        ref32 = build_reference(dataclasses.replace(cfg, dtype="float32"), device)
        y32, dx32, _ = _run(ref32, x.float(), dy.float(), 1)
        floor = max([_rel_err(y_ref, y32, y32.abs().max().item()), _rel_err(dx_ref, dx32, dx32.abs().max().item()),
                     *_param_errors(ref32, ref, sliced=False).values()])
    regions = 2 if cfg.module == "block" else 1
    analytic = tp_bytes_per_layer(cfg.batch, cfg.seq_len, cfg.d_model, tp.size, x.element_size()) * regions / 2
    return CheckResult(
        config=cfg, device=device.type, world_size=dist.get_world_size(), errors=errors,
        tolerance=FP32_TOLERANCE if floor is None else 2 * floor, reference_vs_fp32=floor, uncovered_params=uncovered,
        collectives=Collectives(dict(counters["forward"].counts), dict(counters["backward"].counts),
                                dict(sync.counts)),
        expected=expected_collectives(cfg) if cfg.impl != "dtensor-naive" else None,
        comm_bytes_measured=sum(c.wire_bytes for c in counters.values()), comm_bytes_analytic=analytic)


def _param_errors(ref: nn.Module, module: nn.Module, sliced: bool) -> dict[str, float]:
    """This rank's error for every parameter gradient of `ref`: per master slice (ours) or of whole tensors."""
    ref_grads = {name: p.grad for name, p in ref.named_parameters()}
    errors: dict[str, float] = {}
    if sliced:
        for p in module.parameters():
            for s in p.master_slices:
                err = _rel_err(s.of_local(p.grad), s.of_master(ref_grads[s.name]), _grad_scale(s.name, ref_grads))
                errors[s.name] = max(errors.get(s.name, 0.0), err)
        return errors
    for name, p in module.named_parameters():  # DTensor grads are reassembled (Partial ones summed) to full
        full = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad  # norms stay plain without SP
        errors[name] = _rel_err(full, ref_grads[name], _grad_scale(name, ref_grads))
    return errors


def correctness_grid(tp: int) -> list[tuple[str, VerifyConfig]]:
    """The report's correctness table at TP degree tp: small shapes, both implementations, SP off/on, bf16."""
    shapes = {"mha": dict(n_heads=8, n_kv_heads=8, d_model=64, seq_len=16, batch=2),
              "gqa": dict(n_heads=16, n_kv_heads=8, d_model=128, seq_len=16, batch=2),
              "gqa-fused": dict(n_heads=16, n_kv_heads=8, d_model=128, seq_len=16, batch=2, fused_qkv=True),
              # head_dim 7, d_ff not 4*d, batch 3, seq 13 (13*t with SP), biases on
              "odd-bias": dict(n_heads=8, n_kv_heads=8, d_model=56, d_ff=104, seq_len=13, batch=3, bias=True)}
    grid = []
    for case, shape in shapes.items():
        for sp in ((False, True) if tp > 1 else (False,)):
            if sp and case == "odd-bias":
                shape = {**shape, "seq_len": 13 * tp}
            for impl in ("ours", "dtensor"):
                if not (impl == "dtensor" and shape.get("fused_qkv")):
                    grid.append((case, VerifyConfig(tp=tp, sp=sp, impl=impl, **shape)))
    for impl in ("ours", "dtensor"):
        grid.append(("gqa-bf16", VerifyConfig(tp=tp, impl=impl, dtype="bfloat16", **shapes["gqa"])))
    if tp > 1:
        grid.append(("mha", VerifyConfig(tp=tp, impl="dtensor-naive", **shapes["mha"])))
    return grid


def main(argv: list[str] | None = None) -> int:
    return verify_main(VerifyConfig, verify_preset, "tp", check, argv, __doc__)


if __name__ == "__main__":
    sys.exit(entrypoint(main))
