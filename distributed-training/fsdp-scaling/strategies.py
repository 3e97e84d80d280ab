"""Five data-parallel strategies, each through PyTorch's own API, behind one small Trainer.

    strategy  what is replicated / sharded (ZeRO paper naming)          PyTorch API
    single    one process, the baseline                                  plain module
    ddp       params, grads, optimizer state replicated                  DistributedDataParallel
    zero1     optimizer state sharded (P_os)                             DDP + ZeroRedundancyOptimizer
    zero2     grads + optimizer state sharded; params gathered for the   fully_shard, reshard_after_forward=False
              whole forward+backward (P_os+g at peak)
    zero3     everything sharded; each block gathered for its forward    fully_shard, reshard_after_forward=True
              and again for its backward (P_os+g+p)
    hsdp      zero3 inside a shard group, replicated across groups       fully_shard on a 2-D mesh (replicate, shard)

There is no ZeRO-1 mode in FSDP: PyTorch's ZeRO-1 is ZeroRedundancyOptimizer over DDP, which
all-reduces full gradients and then broadcasts each updated parameter from the rank that owns it
(torch docs; the ZeRO paper's P_os would reduce-scatter and all-gather instead). FSDP2 keeps its
sharded parameter in fp32 and that shard is the optimizer's master copy (MixedPrecisionPolicy:
bf16 compute and all-gather, fp32 reduce-scatter, as torchtitan defaults).

Gradient accumulation: every micro-step but the last runs without gradient sync (DDP `no_sync`,
FSDP2 `set_requires_gradient_sync(False)`), so the collectives happen once per optimizer step.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Callable, ContextManager

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from common.fsdp import apply_fsdp
from common.model import GPT, GPTConfig, lm_loss

Batch = tuple[torch.Tensor, torch.Tensor]  # x, y: (b, T) token ids
Around = Callable[[], ContextManager] | None


def _passthrough_hook(state, bucket):  # noqa: ARG001 - DDP comm-hook signature
    """DDP hook for the fake process group, whose collectives return no value (the default hook
    would fail on it). The all-reduce is still issued, so it is still counted."""
    buf = bucket.buffer()
    dist.all_reduce(buf)
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(buf)
    return fut


def _optimizer(name: str, params, lr: float, zero: bool) -> torch.optim.Optimizer:
    cls, kw = (torch.optim.AdamW, {"lr": lr}) if name == "adamw" else (torch.optim.SGD, {"lr": lr})
    if zero:
        # Each rank owns whole parameters (a sorted-greedy partition) and steps only those.
        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)
    return cls(params, **kw)


class Trainer:
    """One strategy's model + optimizer, with a step that accumulates gradients over micro-batches."""

    def __init__(self, strategy: str, cfg: GPTConfig, device: torch.device, *, optimizer: str = "adamw",
                 lr: float = 3e-4, mesh_shape: tuple[int, ...] | None = None, mesh: DeviceMesh | None = None,
                 param_dtype: torch.dtype | None = None, prefetch: bool = False, seed: int = 0):
        self.strategy, self.device, self.param_dtype = strategy, device, param_dtype
        torch.manual_seed(seed)  # every rank builds the same full model before wrapping or sharding it
        model = GPT(cfg).to(device)
        self.gpt = model
        world = dist.get_world_size() if dist.is_initialized() else 1
        if strategy == "single":
            if world > 1:
                raise ValueError("strategy 'single' runs in a one-rank group only")
            self.model = model
        elif strategy in ("ddp", "zero1"):
            # gradient_as_bucket_view: grads live in DDP's all-reduce buckets, not in a second copy.
            ids = [device.index] if device.type == "cuda" else None
            self.model = DDP(model, device_ids=ids, gradient_as_bucket_view=True)
            if dist.get_backend() == "fake":
                self.model.register_comm_hook(None, _passthrough_hook)
        else:
            mesh = mesh or build_mesh(device, mesh_shape or (world,))
            self.model = apply_fsdp(model, mesh, reshard_after_forward=strategy != "zero2", param_dtype=param_dtype)
            if prefetch:
                set_explicit_prefetch(model)
        self.opt = _optimizer(optimizer, self.model.parameters(), lr, zero=strategy == "zero1")
        self.fsdp = isinstance(self.model, FSDPModule)

    def _autocast(self):
        # FSDP casts through its MixedPrecisionPolicy; the others use autocast for the same bf16 compute.
        if self.param_dtype is None or self.fsdp:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.param_dtype)

    def forward_backward(self, micro: list[Batch], around: Around = None) -> torch.Tensor:
        """Accumulate gradients over the micro-batches; sync only on the last. Returns the mean loss.

        `around()`, if given, is entered once per micro-step (a tool that must see one forward at a time)."""
        total = torch.zeros((), device=self.device)
        for i, (x, y) in enumerate(micro):
            last = i == len(micro) - 1
            if self.fsdp:
                self.model.set_requires_gradient_sync(last)
                sync = contextlib.nullcontext()
            else:
                sync = self.model.no_sync() if (not last and isinstance(self.model, DDP)) else contextlib.nullcontext()
            with sync, (around() if around else contextlib.nullcontext()), warnings.catch_warnings():
                # FSDP2 warns that the root returns a view (the logits' reshape) in case the caller edits
                # it in place and skips the pre-backward hook; lm_loss never does.
                warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
                with self._autocast():
                    loss = lm_loss(self.model(x.to(self.device)), y.to(self.device)) / len(micro)
                loss.backward()
            total += loss.detach()
        return total

    def optimizer_step(self, around: Around = None) -> None:
        with around() if around else contextlib.nullcontext():
            self.opt.step()  # ZeRO-1 broadcasts the updated parameters here
        self.opt.zero_grad(set_to_none=True)

    def step(self, micro: list[Batch], around: Around = None) -> torch.Tensor:
        loss = self.forward_backward(micro, around)
        self.optimizer_step(around)
        return loss

    def optimizer_states(self) -> torch.optim.Optimizer:
        """The optimizer that holds this rank's state (ZeroRedundancyOptimizer wraps a local one)."""
        return self.opt.optim if isinstance(self.opt, ZeroRedundancyOptimizer) else self.opt

    def full_params(self) -> dict[str, torch.Tensor]:
        """Every parameter gathered to full size (collective for FSDP), for parity checks."""
        out = {}
        for name, p in self.gpt.named_parameters():
            t = p.full_tensor() if hasattr(p, "full_tensor") else p
            out[name] = t.detach().float().cpu()
        return out


def build_mesh(device: torch.device, shape: tuple[int, ...]) -> DeviceMesh:
    """1-D (shard) or 2-D (replicate, shard) mesh; a runner builds each once and reuses it (a 2-D mesh
    creates new process groups, i.e. new NCCL communicators, every time)."""
    names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
    return init_device_mesh(device.type, shape, mesh_dim_names=names)


def set_explicit_prefetch(model: GPT, depth: int = 1) -> None:
    """Issue the next block's all-gather before the current block runs (FSDP2 explicit prefetch,
    PR #128884 / the FSDP2 tutorial); backward prefetches in reverse order."""
    blocks = list(model.layers)
    for i, block in enumerate(blocks):
        block.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + depth])
        block.set_modules_to_backward_prefetch(blocks[max(0, i - depth):i][::-1])


def micro_batches(x: torch.Tensor, y: torch.Tensor, accum: int) -> list[Batch]:
    """Split this rank's (b, T) rows into `accum` equal micro-batches."""
    return list(zip(x.chunk(accum), y.chunk(accum)))
