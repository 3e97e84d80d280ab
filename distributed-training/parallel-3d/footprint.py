"""What one rank holds: exact state bytes, and the peak of everything a step allocates.

state_bytes: the bytes of this rank's parameters, gradients and optimizer state, counted once per
storage (FSDP2's gradients are views into one reduce-scatter output; DTensors count their local shard).

PeakTracker: the CPU stand-in for torch.cuda.max_memory_allocated (which the runner uses on GPU). While
active it adds up the storages that ops create (a TorchDispatchMode sees every op's output, plain and
inside DTensor) and subtracts them when they are freed (a weakref finalizer on the storage), so
`peak_bytes` is the most the step had alive at once beyond what existed before it. FSDP2 grows and
frees its gathered parameters by resizing storages (UntypedStorage.resize_, which no dispatch mode
sees); as torch's own MemTracker does (torch/distributed/_tools/mem_tracker.py), the tracker wraps that
method while active. It works the same under FakeTensorMode (the at-scale study), where nothing is
really allocated. One thing only the fake world shows: DTensor derives each op's output shape by running
the op on global-shape fake tensors (ShardingPropagator._propagate_tensor_meta_non_cached). On a real
device that runs under a FakeTensorMode of its own, which the tracker skips; inside the at-scale study's
FakeTensorMode it reuses that mode, so its global-shape tensors (a whole TP-unsharded weight, in fp32 and
bf16) would be counted as if a rank held them. The tracker wraps that method too and counts nothing it
allocates.

    with PeakTracker() as mem:
        loss = step()
    mem.peak_bytes, mem.live_bytes
"""

from __future__ import annotations

import weakref
from functools import wraps

import torch
from torch._guards import active_fake_mode
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._sharding_prop import ShardingPropagator  # private: see the module docstring
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten


def _storage(t: torch.Tensor):
    if isinstance(t, DTensor):
        t = t._local_tensor
    return t.untyped_storage()


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (None skipped; DTensor: the local shard's)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        st = _storage(t)
        seen[st._cdata] = st.nbytes()
    return sum(seen.values())


def optimizer_tensors(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's per-parameter state tensors (AdamW's moments; not its scalar step counters)."""
    return [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0]


def state_bytes(params: list[torch.nn.Parameter], opt: torch.optim.Optimizer) -> dict[str, int]:
    """{"param_bytes", "grad_bytes", "opt_bytes"} of this rank; call after backward for the gradients."""
    return {"param_bytes": storage_bytes(params), "grad_bytes": storage_bytes(p.grad for p in params),
            "opt_bytes": storage_bytes(optimizer_tensors(opt))}


def _owns_storage(t) -> bool:
    # Wrappers (DTensor, async collective tensors) own no storage; their inner tensors are seen on their own.
    return isinstance(t, torch.Tensor) and not is_traceable_wrapper_subclass(t)


class PeakTracker(TorchDispatchMode):
    """Live and peak bytes of the storages created (or grown) while active; see the module docstring."""

    def __init__(self):
        super().__init__()
        self.live_bytes = 0
        self.peak_bytes = 0
        self._sizes: dict[int, int] = {}  # storage id -> bytes we count for it
        self._propagating = 0  # > 0 inside DTensor's sharding propagation (module docstring): nothing counts

    def _set(self, st, nbytes: int) -> None:
        key = st._cdata
        if key not in self._sizes:
            if nbytes == 0:
                return
            weakref.finalize(st, self._free, key)
            self._sizes[key] = 0
        self.live_bytes += nbytes - self._sizes[key]
        self._sizes[key] = nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def _free(self, key: int) -> None:
        self.live_bytes -= self._sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # As torch's MemTracker does: let DTensor desugar into local ops first (the mode sees those), and skip
        # the ops of DTensor's sharding propagation, which runs under a FakeTensorMode of its own.
        if any(t is DTensor for t in types):
            return NotImplemented
        if func is torch.ops._c10d_functional.wait_tensor.default and active_fake_mode():
            return args[0]  # the fake kernel returns a new tensor where eager waits in place
        out = func(*args, **(kwargs or {}))
        if self._propagating or active_fake_mode() is not self._fake_on_entry:
            return out
        # A view or an in-place op returns an input's storage: nothing new (a weight's transpose is the weight).
        inputs = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if _owns_storage(t)}
        for t in tree_flatten(out)[0]:
            if _owns_storage(t):
                st = t.untyped_storage()
                if st._cdata not in self._sizes and st._cdata not in inputs:
                    self._set(st, st.nbytes())
        return out

    def __enter__(self):
        self._orig_resize = torch.UntypedStorage.resize_
        tracker, orig = self, self._orig_resize

        @wraps(orig)
        def resize_(st, size):
            out = orig(st, size)
            if st._cdata in tracker._sizes or size > 0:
                tracker._set(st, st.nbytes())
            return out

        torch.UntypedStorage.resize_ = resize_
        self._orig_propagate = ShardingPropagator._propagate_tensor_meta_non_cached

        @wraps(self._orig_propagate)
        def propagate(prop, *args, **kwargs):
            tracker._propagating += 1
            try:
                return tracker._orig_propagate(prop, *args, **kwargs)
            finally:
                tracker._propagating -= 1

        ShardingPropagator._propagate_tensor_meta_non_cached = propagate
        self._fake_on_entry = active_fake_mode()
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._orig_resize
        ShardingPropagator._propagate_tensor_meta_non_cached = self._orig_propagate
        return super().__exit__(*exc)
