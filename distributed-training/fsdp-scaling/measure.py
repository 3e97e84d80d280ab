"""What one rank holds and what one step sends, measured with PyTorch's own tools.

- `state_bytes`: the exact bytes of this rank's parameters, gradients and optimizer state, counted
  once per storage (DDP's gradients are views into its buckets, FSDP2's into its reduce-scatter
  output, so summing tensor sizes would double-count).
- `instrumented_step`: one optimizer step under torch's memory trackers (`FSDPMemTracker` for FSDP2
  modules, `MemTracker` otherwise; private APIs in torch.distributed._tools) for the peak by
  category, with the collectives logged and the state bytes taken after backward. On CPU the
  tracker's peak is the measured per-rank figure; on GPU the runner also records
  torch.cuda.max_memory_allocated.
- `CollectiveLog`: CommDebugMode (torch.distributed.tensor.debug) counts every c10d collective of a
  step; this subclass also records each one's payload and group size. Bytes follow nccl-tests'
  conventions (doc/PERFORMANCE.md): payload S = the full buffer (all-gather output, reduce-scatter
  input, the all-reduced or broadcast tensor), and bus bytes per rank = S x factor with factor
  2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter, 1 for broadcast, so that
  bus bytes / busbw is the time a bandwidth-bound ring takes.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter

import torch
import torch.distributed as dist
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.tensor.debug import CommDebugMode

from common.collective_cost import busbw_factor
from strategies import Batch, Trainer

_c10d = torch.ops.c10d
KIND = {
    _c10d._allgather_base_: "all_gather", _c10d.allgather_: "all_gather",
    _c10d.allgather_into_tensor_coalesced_: "all_gather",
    _c10d._reduce_scatter_base_: "reduce_scatter", _c10d.reduce_scatter_: "reduce_scatter",
    _c10d.reduce_scatter_tensor_coalesced_: "reduce_scatter",
    _c10d.allreduce_: "all_reduce", _c10d.allreduce_coalesced_: "all_reduce",
    _c10d.broadcast_: "broadcast",
}
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast")


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(t) for t in obj)
    return 0


class CollectiveLog(CommDebugMode):
    """CommDebugMode that also keeps (kind, payload bytes, group size) for every c10d collective.

    Enter it once per micro-step (Trainer's `around`): CommDebugMode's module tracker registers a
    forward hook per call and breaks when one context sees a module run twice (torch 2.13).
    Calls accumulate across entries."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        kind = KIND.get(getattr(func, "_overloadpacket", None))
        if kind is not None:
            pg = next(dist.ProcessGroup.unbox(a) for a in args if isinstance(a, torch.ScriptObject))
            # all_gather: (output, input, ...); reduce_scatter: (output, input, ...); the others: (tensors, ...)
            payload = _nbytes(args[1] if kind == "reduce_scatter" else args[0])
            self.calls.append((kind, payload, pg.size()))
        return out

    def summary(self) -> dict[str, float]:
        """Counts per kind, total payload and bus bytes per rank, for one logged step."""
        counts = Counter(kind for kind, _, _ in self.calls)
        out: dict[str, float] = {f"{k}s": counts.get(k, 0) for k in KINDS}
        out["payload_bytes"] = sum(p for _, p, _ in self.calls)
        out["bus_bytes_per_rank"] = sum(p * busbw_factor(k, n) for k, p, n in self.calls)
        return out

    def per_kind(self) -> list[dict]:
        """One dict per (kind, group size): count, payload and bus bytes (the comms CSV rows)."""
        rows: dict[tuple[str, int], dict] = {}
        for kind, payload, n in self.calls:
            r = rows.setdefault((kind, n), {"collective": kind, "group_size": n, "count": 0, "payload_bytes": 0,
                                            "bus_bytes_per_rank": 0.0})
            r["count"] += 1
            r["payload_bytes"] += payload
            r["bus_bytes_per_rank"] += payload * busbw_factor(kind, n)
        return list(rows.values())


def _storage_bytes(tensors) -> int:
    seen: dict[tuple, int] = {}
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if hasattr(t, "to_local") else t
        st = t.untyped_storage()
        seen[(st.device.type, st.data_ptr())] = st.nbytes()
    return sum(seen.values())


def state_bytes(trainer: Trainer, grads: bool = True) -> dict[str, int]:
    """Bytes of this rank's params, grads (call after backward) and optimizer state, per storage."""
    params = list(trainer.model.parameters())
    states = trainer.optimizer_states().state.values()
    opt = [v for s in states for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    out = {"param_bytes": _storage_bytes(params), "opt_bytes": _storage_bytes(opt)}
    if grads:
        out["grad_bytes"] = _storage_bytes(p.grad for p in params)
    return out


def instrumented_step(trainer: Trainer, micro: list[Batch], comms: bool = True, memory: bool = True
                      ) -> tuple[dict[str, int], dict[str, int], CollectiveLog]:
    """One optimizer step with every collective logged (comms), under torch's memory tracker (memory),
    and the state bytes taken after backward, while the gradients are alive.

    Returns (state bytes, memory, the collective log). memory (empty without the tracker) holds the
    bytes per category at the moment of the step's peak ('total' is that peak), and 'max_<category>':
    the most each category reached in any of the tracker's per-module snapshots (the peak of gathered
    parameters, 'max_unsharded_param', can come at another moment than the overall peak)."""
    tracker: MemTracker | None = None
    if memory and trainer.fsdp:
        tracker = FSDPMemTracker(trainer.model, trainer.opt)
    elif memory:
        tracker = MemTracker()
        tracker.track_external(trainer.model, trainer.optimizer_states())
    log = CollectiveLog()
    maxima: dict[str, int] = {}

    def keep_maxima() -> None:
        for stats in tracker.memory_tracking.values():  # snapshots: state -> [{device: {category: bytes}}]
            for snaps in stats.snapshots.values():
                for per_device in (snap[trainer.device] for snap in snaps if trainer.device in snap):
                    for k, v in per_device.items():
                        maxima[f"max_{_name(k)}"] = max(maxima.get(f"max_{_name(k)}", 0), int(v))

    @contextlib.contextmanager
    def around():
        with log if comms else contextlib.nullcontext():
            yield
        # The trackers refuse a module that runs twice in one context (gradient accumulation): their
        # per-module stats are reset between micro-steps (after keeping their maxima); the peak is kept.
        if tracker is not None:
            keep_maxima()
            tracker.reset_mod_stats()

    with tracker if tracker is not None else contextlib.nullcontext(), warnings.catch_warnings():
        # The tools' full backward hooks fire on the embedding output, which needs no input grad; harmless.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        trainer.forward_backward(micro, around)
        held = state_bytes(trainer)
        trainer.optimizer_step(around)
    if tracker is None:
        return held, {}, log
    # The snapshot is per device; on GPU the CPU side (input batches) has its own entry.
    peak = tracker.get_tracker_snapshot("peak").get(trainer.device, {})
    return held, {**{_name(k): int(v) for k, v in peak.items()}, **maxima}, log


def _name(key) -> str:
    """Tracker keys are enum members such as _FSDPRefType.UNSHARDED_PARAM: the bare name, lower case."""
    return str(getattr(key, "name", key)).lower()
