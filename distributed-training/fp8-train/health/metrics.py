"""Training-health metrics that are cheap enough to take every step.

Definitions (each used once, everywhere in this lab):
    grad_norm     ||g||_2 over all parameters, before clipping (torchtitan/Megatron log the same)
    param_norm    ||theta||_2 after the optimizer step (Megatron `params-norm`)
    update_ratio  ||theta_t - theta_{t-1}||_2 / ||theta_{t-1}||_2: how far one step moves the weights;
                  ~1e-3 is the usual healthy order for Adam (Karpathy's nanoGPT/cs231n rule of thumb)
and the same three per layer group ("layers.0.attn", "layers.0.mlp", "layers.0.norm", "embed",
"final_norm", "lm_head"). All come from torch._foreach_norm over the parameter list (one fused
pass per metric); every value is gathered into one tensor so the host syncs once per step. With
FSDP2 each rank holds a disjoint shard of every parameter, so squared norms of the local shards
are summed over ranks with one all-reduce.
"""

from __future__ import annotations

import resource
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def layer_group(param_name: str) -> str:
    """'layers.3.attn.wq.weight' -> 'layers.3.attn'; norms of a block are one group; embeddings another."""
    parts = param_name.replace("_orig_mod.", "").split(".")
    if parts[0] == "layers" and len(parts) > 2:
        sub = "norm" if parts[2].startswith("norm") else parts[2]
        return f"layers.{parts[1]}.{sub}"
    return {"tok_emb": "embed", "pos_emb": "embed", "norm": "final_norm"}.get(parts[0], parts[0])


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t  # FSDP2 DTensor -> this rank's shard


class NormTracker:
    """Grad, param and update norms, total and per layer group, with one host sync per step."""

    def __init__(self, model: nn.Module):
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in named]
        self.groups = sorted({layer_group(n) for n, _ in named}, key=_group_order)
        idx = [self.groups.index(layer_group(n)) for n, _ in named]
        dev = self.params[0].device
        self.index = torch.tensor(idx, device=dev)
        self.sharded = any(hasattr(p, "to_local") for p in self.params)
        self.prev: list[torch.Tensor] | None = None
        self.last_sq: torch.Tensor | None = None

    def _group_sq(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """Squared norms summed per group -> (G,), reduced over ranks for sharded parameters."""
        norms = torch.stack(torch._foreach_norm([_local(t) for t in tensors])).float()
        sq = torch.zeros(len(self.groups), device=norms.device).index_add_(0, self.index, norms * norms)
        if self.sharded and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(sq)
        return sq

    def param_sq(self) -> torch.Tensor:
        self.last_sq = self._group_sq([p.detach() for p in self.params])
        return self.last_sq

    def grad_sq(self) -> torch.Tensor:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        return self._group_sq(grads)

    @torch.no_grad()
    def snapshot(self) -> None:
        """Remember the weights before the optimizer step (for the update ratio)."""
        if self.prev is None:
            self.prev = [_local(p).detach().clone() for p in self.params]
        else:
            torch._foreach_copy_(self.prev, [_local(p).detach() for p in self.params])

    @torch.no_grad()
    def param_and_update_sq(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(||theta_prev||^2, ||theta||^2, ||theta - theta_prev||^2) per group, after the step."""
        assert self.prev is not None, "snapshot() before the optimizer step"
        # ||theta_prev|| is last step's ||theta|| unless the weights were replaced since (restore() forgets it)
        prev_sq = self.last_sq if self.last_sq is not None else self._group_sq(self.prev)
        cur = [_local(p).detach() for p in self.params]
        now_sq = self._group_sq(cur)
        torch._foreach_sub_(self.prev, cur)  # prev := prev - cur = -update (reused as the next snapshot buffer)
        upd_sq = self._group_sq(self.prev)
        self.last_sq = now_sq
        return prev_sq, now_sq, upd_sq


class ActivationProbe:
    """amax of each block's attention output, MLP output and residual stream, via forward hooks.

    Eager runs attach the hooks only for the steps that measure (every --health-every), so other
    steps pay nothing. A compiled model cannot gain or lose hooks between steps without being
    recompiled, and hooks added after compilation are not seen by the compiled graph (they read
    0.0), so with `always=True` the hooks stay attached for the whole run (the attention and MLP
    hooks traced into their block's graph: a few fused reductions), and each measuring step only
    zeroes the maxima first.
    Every watched module keeps its own maximum in an `act_amax` buffer and all share one hook
    function: a per-layer index closed over by the hook is a Python constant Dynamo guards on, so
    each compiled block recompiled its own graph (past 8 blocks, eager) as Fp8Linear's slot did.
    The block's own hook runs after its compiled forward returns (Dynamo reaches it as a frame of
    its own), so it runs eagerly and the probe adds no graph: as many graphs with it as without.
    Activation outliers are what break FP8 first (Fishman et al. arXiv 2409.12517: SwiGLU outliers
    diverge FP8 runs after ~200B tokens), and they show here before they show in the loss.
    """

    def __init__(self, model: nn.Module, always: bool = False):
        n = len(model.layers)
        self.targets = [(f"layers.{i}.attn", model.layers[i].attn) for i in range(n)] + \
                       [(f"layers.{i}.mlp", model.layers[i].mlp) for i in range(n)] + \
                       [(f"layers.{i}.out", model.layers[i]) for i in range(n)]
        self.names = [t[0] for t in self.targets]
        dev = next(model.parameters()).device
        for _, m in self.targets:  # a graph input of the compiled block, not a constant of its graph
            m.register_buffer("act_amax", torch.zeros((), device=dev), persistent=False)
        self.always = always
        self.handles: list = []
        if always:
            self._attach()

    @property
    def amax(self) -> torch.Tensor:
        """(len(names),) the maxima of the current measuring step, in `names` order (read outside the graph)."""
        return torch.stack([m.act_amax for _, m in self.targets])

    def _attach(self) -> None:
        for name, m in self.targets:
            hook = _record_block_amax if name.endswith(".out") else _record_amax
            self.handles.append(m.register_forward_hook(hook))

    def __enter__(self) -> "ActivationProbe":
        torch._foreach_zero_([m.act_amax for _, m in self.targets])
        if not self.always:
            self._attach()
        return self

    def __exit__(self, *exc) -> None:
        if not self.always:
            self.remove()

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


@torch.no_grad()
def _record_amax(module: nn.Module, args, out: torch.Tensor) -> None:
    """The forward hook of every watched module: max over the step's micro-batches, in its own buffer."""
    module.act_amax.copy_(torch.maximum(module.act_amax, out.detach().abs().amax().float()))


# Module.compile compiles the block's __call__, whose own hooks Dynamo reaches as frames of their own (not
# inlined into the forward's graph): compiled, the block's hook would be one more graph (shared by the blocks).
_record_block_amax = torch.compiler.disable(_record_amax)


class GradSNR:
    """||E[g]|| / std(g) across the micro-batches of one step (only with --grad-accum > 1).

    With m micro-batch gradients G_i (each a full-batch-sized estimate), their mean is the step's
    gradient and the total variance is (sum ||G_i||^2 - m ||mean||^2) / (m - 1). SNR > 1: the
    micro-batches agree on the direction; << 1: a bigger batch would mostly average out noise
    (McCandlish et al. arXiv 1812.06162, the gradient noise scale). Costs one gradient copy.
    """

    def __init__(self, params: list[torch.Tensor], m: int, sharded: bool = False):
        self.params, self.m, self.sharded = params, m, sharded
        self.prev: list[torch.Tensor] | None = None
        self.sum_sq = torch.zeros(())

    @torch.no_grad()
    def after_micro_batch(self) -> None:
        grads = [_local(p.grad) for p in self.params]
        if self.prev is None:
            self.prev = [torch.zeros_like(g) for g in grads]
            self.sum_sq = torch.zeros((), device=grads[0].device)
        diff = torch._foreach_sub(grads, self.prev)  # this micro-batch's share: G_i / m
        self.sum_sq += torch.stack(torch._foreach_norm(diff)).float().pow(2).sum() * self.m ** 2
        torch._foreach_copy_(self.prev, grads)

    def result(self, total_grad_sq: torch.Tensor) -> torch.Tensor:
        m = self.m
        if self.sharded and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(self.sum_sq)  # FSDP2: each rank holds a disjoint shard of every gradient
        mean_sq = total_grad_sq  # the accumulated gradient is the mean of the G_i
        var = (self.sum_sq - m * mean_sq).clamp_min(0) / (m - 1)
        self.prev = None
        return mean_sq.sqrt() / var.sqrt()


def _group_order(g: str) -> tuple:
    if g.startswith("layers."):
        _, i, sub = g.split(".")
        return (1, int(i), sub)
    return ({"embed": 0, "final_norm": 2, "lm_head": 3}.get(g, 4), 0, g)


def memory_mib(device: torch.device) -> dict[str, float | None]:
    """Peak/allocated/reserved by the CUDA caching allocator; on CPU only the process's peak RSS.

    The CPU has no allocator counters: ru_maxrss is the whole process's high-water mark (all runs
    of a suite share it), so CPU memory columns are not comparable between runs and reports say so.
    """
    if device.type == "cuda":
        return {"peak_mem_MiB": torch.cuda.max_memory_allocated(device) / 2**20,
                "alloc_MiB": torch.cuda.memory_allocated(device) / 2**20,
                "reserved_MiB": torch.cuda.memory_reserved(device) / 2**20}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return {"peak_mem_MiB": None, "alloc_MiB": None, "reserved_MiB": None,
            "rss_peak_MiB": rss / (2**20 if sys.platform == "darwin" else 2**10)}


class SavedActivations:
    """Bytes of activations autograd saves for backward (where FP8's memory saving shows on any device).

    saved_tensors_hooks sees every tensor saved for backward, including Fp8Linear's FP8 copies;
    storages are counted once, and parameters (saved by reference, not copied) are excluded.
    """

    def __init__(self, model: nn.Module):
        self.param_ptrs = {_local(p).untyped_storage().data_ptr() for p in model.parameters()}
        self.seen: set[int] = set()
        self.bytes = 0

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, nn.Parameter):  # FSDP2's unsharded parameters during forward
            return t
        ptr = t.untyped_storage().data_ptr()
        if ptr not in self.seen and ptr not in self.param_ptrs:
            self.seen.add(ptr)
            self.bytes += t.untyped_storage().nbytes()
        return t

    def hooks(self):
        self.seen.clear()
        self.bytes = 0
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)
