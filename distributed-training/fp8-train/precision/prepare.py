"""Precision modes and the layer-wise precision map: turn one GPT into an fp32/bf16/fp16/fp8 run.

    fp32   plain fp32.
    bf16   torch.autocast(bf16) on GPU. On this repository's CPUs (no avx512_bf16/AMX) a real bf16
           GEMM is ~50x slower than fp32 (cpu-feasibility.md section 5), so on CPU bf16 is
           *emulated*: every autocast-eligible op (Linear, scaled-dot-product attention) gets its
           operands and output rounded to bf16 and multiplies in fp32. The values match bf16
           operands with fp32 accumulation (what tensor cores do); norms, softmax, loss stay fp32,
           as CUDA autocast keeps them. Reports say "bf16 (emulated)" for such runs.
    fp16   the same with fp16, plus torch.amp.GradScaler (loss scaling against fp16 underflow).
    fp8    bf16 as above, and the modules chosen by the precision map in FP8 through a backend.
    mxfp8 / mxfp4 / nvfp4   the same with block-scaled formats (TE on Blackwell, or emulated).

The precision map (--fp8-modules, --hp-modules; shell-style globs over module names) decides
which Linears go low precision. Default: the attention projections and MLP linears; the
embeddings, norms, attention scores/softmax and the LM head stay high precision, the usual
practice (TE defaults, DeepSeek-V3 section 3.3): low-precision embeddings and LM head are known to
hurt convergence and attention scores overflow FP8's range. Only nn.Linear can be mapped; asking
for anything else is an error, not a silent no-op.

Every run starts from the same fp32 weights: the GPT is built on the CPU under the run's seed
before any conversion, so modes differ only in arithmetic. The records a run is named by (the
precisions, RunSpec, PrecisionSettings) are modes.py's.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import pickle
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from common.model import GPT, GPTConfig
from precision import backends
from precision.amax_probe import BLOCK_MAX, AmaxProbe
from precision.backend import Backend
from precision.formats import E4M3
from precision.modes import LOW, PrecisionSettings, RunSpec

def select_modules(model: nn.Module, include: tuple[str, ...], exclude: tuple[str, ...] = ()) -> list[str]:
    """Names of the modules the precision map puts in low precision (ValueError if it asks the impossible)."""
    named = dict(model.named_modules())
    for pat in include:
        hits = [n for n in named if n and fnmatch.fnmatchcase(n, pat)]
        if not hits:
            raise ValueError(f"--fp8-modules pattern {pat!r} matches no module (e.g. layers.*.mlp.w1, lm_head)")
        bad = [n for n in hits if not isinstance(named[n], nn.Linear)]
        if bad:
            raise ValueError(f"--fp8-modules {pat!r} matches {bad[0]} ({type(named[bad[0]]).__name__}); only nn.Linear "
                             "modules can run in FP8 (embeddings, norms and attention scores stay high precision)")
    return [n for n, m in named.items() if isinstance(m, nn.Linear)
            and any(fnmatch.fnmatchcase(n, p) for p in include) and not any(fnmatch.fnmatchcase(n, p) for p in exclude)]


def _round(t, dtype: torch.dtype):
    return t.to(dtype).to(t.dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t


class RoundedOps(TorchFunctionMode):
    """bf16/fp16 autocast emulated on CPU: round Linear/attention operands and outputs to `dtype`.

    The casts are differentiable, so gradients flowing back through these ops are rounded too,
    as they are in a real autocast region.
    """

    OPS = (F.linear, F.scaled_dot_product_attention)

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.OPS:
            args = tuple(_round(a, self.dtype) for a in args)
            kwargs = {k: _round(v, self.dtype) for k, v in kwargs.items()}
            return _round(func(*args, **kwargs), self.dtype)
        return func(*args, **kwargs)


@dataclass
class Prepared:
    model: nn.Module  # what to call
    raw: nn.Module  # the same module (blocks compile in place): state_dict, hooks, names
    backend: Backend  # the backend that runs (backends.TORCH for fp32/bf16/fp16)
    reason: str
    context: Callable[[], ContextManager]  # enter around each forward
    scaler: torch.amp.GradScaler | None
    low_modules: list[str]
    probe: AmaxProbe | None = None
    notes: list[str] = field(default_factory=list)
    compiled: bool = False  # its blocks run under torch.compile (recorded in every timed row)


# Weights drawn for models this big are also kept on disk, for the plan's next launch: drawing the h100 preset's
# 1.6B weights on the CPU takes ~34 s (one thread's normal_), reading them back a few.
DISK_MIN_PARAMS = 100_000_000
INITIAL_PREFIX = "initial-"


def _initial_path(cfg: GPTConfig, seed: int, folder: Path) -> Path:
    """The file of one (config, seed): named by both and the torch that drew it (its RNG stream)."""
    key = hashlib.sha256(f"{cfg!r} {seed} {torch.__version__}".encode()).hexdigest()[:16]
    return folder / f"{INITIAL_PREFIX}s{seed}-{key}.pt"


@functools.lru_cache(maxsize=1)
def _initial_state(cfg: GPTConfig, seed: int, folder: Path | None = None) -> dict[str, torch.Tensor]:
    path = _initial_path(cfg, seed, folder) if folder is not None else None
    if path is not None and path.is_file():
        try:
            return torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        except (OSError, RuntimeError, pickle.UnpicklingError):
            path.unlink(missing_ok=True)  # a damaged copy is drawn again
    torch.manual_seed(seed)
    state = GPT(cfg).state_dict()
    if path is not None and sum(t.numel() for t in state.values()) >= DISK_MIN_PARAMS:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        tmp.replace(path)  # atomic: a launch killed while writing leaves no half file under the real name
    return state


def forget_initial_weights(folder: Path) -> None:
    """A fresh plan draws its weights again (its config or the model code may have changed)."""
    for path in folder.glob(f"{INITIAL_PREFIX}*.pt*"):
        path.unlink(missing_ok=True)
    _initial_state.cache_clear()


def initial_gpt(cfg: GPTConfig, seed: int, device: torch.device, folder: Path | None = None) -> GPT:
    """The GPT every run of this seed starts from, on `device`.

    The weights are drawn on the CPU (same values on every device and in every mode) once per
    (config, seed) and kept for the next run of the same seed, in memory and, for big models, in
    `folder` (the plan's checkpoint folder) for the next launch of the same plan: at hidden 4096 drawing
    1.6B weights takes longer than training a run's first steps. The model itself is built on the meta
    device and materialised on `device`, so the weights are copied once, straight to where they train.
    """
    with torch.device("meta"):
        model = GPT(cfg)
    model.to_empty(device=device)
    model.load_state_dict(_initial_state(cfg, seed, folder))
    torch.manual_seed(seed)  # the RNG state after building is the same whether the cache hit or not
    return model


def prepare(spec: RunSpec, cfg: GPTConfig, s: PrecisionSettings, device: torch.device,
            init_dir: Path | None = None) -> Prepared:
    """Build the GPT for one run: same seed -> same initial weights (kept in `init_dir` for the plan's next
    launch), then the precision conversion."""
    if s.compile:
        # Dynamo keeps 8 compiled entries per code object (torch._dynamo.config.cache_size_limit) and
        # every run shares GPT.forward: without a reset the 9th model of a process silently runs eager.
        torch._dynamo.reset()
    model = initial_gpt(cfg, spec.seed, device, init_dir)
    cpu = device.type == "cpu"
    hp = None if spec.precision == "fp32" else (torch.float16 if spec.precision == "fp16" else torch.bfloat16)
    names: list[str] = []
    backend, reason, notes = backends.TORCH, "", []
    fwd_ctx: Callable[[], ContextManager] = nullcontext
    if spec.precision in LOW:
        names = select_modules(model, s.fp8_modules, s.hp_modules)
        backend, reason = backends.resolve(spec.precision, spec.backend, device)
        fwd_ctx, names = backend.convert(model, names, spec.precision, s, hp if cpu else None)
    will_compile = s.compile and backend.compiles  # TE modules run eagerly (below)
    probe = _probe(spec, backend, s, model, names, will_compile)
    hp_ctx: Callable[[], ContextManager] = nullcontext
    if hp is not None:
        if cpu:
            hp_ctx = lambda: RoundedOps(hp)  # noqa: E731
            notes.append(f"{'bf16' if hp == torch.bfloat16 else 'fp16'} emulated on CPU: operands rounded, fp32 GEMMs")
        else:
            hp_ctx = lambda: torch.autocast(device.type, dtype=hp)  # noqa: E731

    @contextmanager
    def context():
        with hp_ctx(), fwd_ctx():
            yield

    scaler = torch.amp.GradScaler(device.type) if spec.precision == "fp16" else None
    compiled = False
    if s.compile:
        if not backend.compiles:
            notes.append(backend.eager_note)
        else:
            # Keep explicit low-precision round trips (the CPU emulation's .to(bf16).to(fp32)) inside
            # fused kernels instead of letting Inductor drop them (torchtitan sets this for float8 too).
            import torch._inductor.config as inductor_config
            inductor_config.emulate_precision_casts = True
            # Regional compilation, as torchtitan does: each block is compiled in place (same module,
            # same parameter names and hooks); identical blocks share one graph, so compile time does
            # not grow with depth. Embeddings, the final norm, the LM head and the loss run eagerly.
            for block in model.layers:
                block.compile(backend=s.compile_backend)
            compiled = True
    runnable: nn.Module = model
    return Prepared(runnable, model, backend, reason, context, scaler, names, probe, notes, compiled=compiled)


def _probe(spec: RunSpec, backend: Backend, s: PrecisionSettings, model: nn.Module, names: list[str],
           compiled: bool) -> AmaxProbe | None:
    """Amax probes for the low-precision runs whose backend keeps no scaling state we can read.

    Fp8Linear keeps its own per-step (amax, scale); TE's DelayedScaling keeps state read after
    backward (te_adapter). torchao, TE's current scaling and the block formats scale dynamically:
    hooks record their amaxes. te-fused with current scaling gets none: the tensors it casts (the
    LayerNorm and GELU outputs) are made inside TE's kernels, with no hook point.
    """
    if spec.precision not in LOW:
        return None
    if backend.keeps_scale_state(spec.precision, s.scaling) or not backend.probes or not s.probes:
        return None
    mods = [(n, model.get_submodule(n)) for n in names]
    if spec.precision == "fp8":
        return AmaxProbe(mods, E4M3.max, backend.probe_grad_max(s), "current", compiled=compiled)
    fmax = BLOCK_MAX[spec.precision]
    return AmaxProbe(mods, fmax, fmax, "derived", compiled=compiled)
