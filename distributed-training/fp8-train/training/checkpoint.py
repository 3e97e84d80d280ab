"""Crash-safe checkpoints: atomic writes, everything a bit-identical resume needs, clear errors.

A checkpoint holds the model (FP8 scaling state included: Fp8Linear's amax histories and scales
are buffers, TransformerEngine keeps its fp8_meta in each module's `_extra_state`), the optimizer,
the GradScaler, the run's counters and learning-rate factor, the alert detectors' state (the
"health history"), the RNG states (torch CPU and CUDA, Python's random) and the data position
(the next step; batches are a pure function of seed and step). It is written to `<name>.tmp`,
flushed and fsync'ed, then renamed over `<name>` (os.replace is atomic on POSIX): a crash leaves
either the old checkpoint or the new one, never half of one. Loading uses
torch.load(weights_only=True): tensors and plain containers only, no code execution.

A file that cannot be read, is not an fp8-train checkpoint, or was written by another configuration
(any setting that changes the result: Trainer.fingerprint) raises CheckpointError with one line
saying which; resuming never silently starts from scratch. Checkpoints live in their run folder
(runs/<tag>/checkpoints/), so two run folders never share one.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Any

import torch

FORMAT = "fp8-train-checkpoint"
VERSION = 1


class CheckpointError(RuntimeError):
    pass


def rng_state() -> dict[str, Any]:
    st: dict[str, Any] = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(st: dict[str, Any]) -> None:
    torch.set_rng_state(st["torch"])
    random.setstate((3, tuple(st["python"]), None))
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


def save(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: temporary file in the same folder, fsync, rename, fsync the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save({"format": FORMAT, "version": VERSION, **state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path: Path, fingerprint: dict[str, Any], allow_pickle: bool = False) -> dict[str, Any]:
    """Read and validate a checkpoint; CheckpointError with one clear line otherwise."""
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path.name} in {path.parent.name}/")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - zip/pickle/EOF errors all mean "unreadable"
        if allow_pickle and "weights_only" in str(e):
            # TransformerEngine versions that pickle Python objects into _extra_state need this.
            state = torch.load(path, map_location="cpu", weights_only=False)
        else:
            first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
            raise CheckpointError(f"checkpoint {path.name} is unreadable (truncated or corrupt: {first}); delete it "
                                  "to start that run over, or restore a good copy") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path.name} is not an fp8-train checkpoint")
    if state.get("version") != VERSION:
        raise CheckpointError(f"{path.name} has checkpoint version {state.get('version')}, this code reads {VERSION}")
    old = state.get("fingerprint", {})
    diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
    if diff:
        what = ", ".join(f"{k}: {old.get(k)!r} -> {fingerprint.get(k)!r}" for k in diff[:4])
        more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
        raise CheckpointError(f"checkpoint {path.name} belongs to another configuration ({what}{more}); resume with "
                              "the settings it was written with, or delete it")
    return state


def model_and_optimizer_state(model: torch.nn.Module, opt: torch.optim.Optimizer, world_size: int):
    """Full (unsharded) state dicts; with FSDP2 gathered on every rank and kept on the CPU."""
    if world_size > 1:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
        return get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return model.state_dict(), opt.state_dict()


def load_model_and_optimizer(model: torch.nn.Module, opt: torch.optim.Optimizer, model_sd, opt_sd,
                             world_size: int) -> None:
    if world_size > 1:  # FSDP2: every rank holds the full state and keeps its own shard of it
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict
        set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=opt_sd,
                       options=StateDictOptions(full_state_dict=True))
        return
    model.load_state_dict(model_sd)
    opt.load_state_dict(opt_sd)


class GracefulStop:
    """SIGTERM (a preempting scheduler) sets a flag; the training loop checkpoints and exits cleanly."""

    def __init__(self) -> None:
        self.requested = False
        self._old = None

    def __enter__(self) -> "GracefulStop":
        self._old = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGTERM, self._old)
