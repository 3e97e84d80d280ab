"""The search: enumerate degrees that fit the GPU count, evaluate them all at once, keep the fastest that fits.

Degrees (TP t, PP p, CP c, DP d, micro-batch b, interleave v) are enumerated from the divisors of
the GPU count, and a configuration is kept only if it can run: t divides heads and kv-heads and
tiles the NVLink domain (t | domain or domain | t), p <= L (stages.py chooses how many layers each
stage gets, so p need not divide L), c leaves an even sequence chunk of at least MIN_CP_TOKENS
tokens (ring attention balances causal work with 2c chunks), t·p·c·d = GPUs, b divides the
per-replica batch (b <= MAX_MICROBATCH), and interleaving v > 1 needs p > 1, a split whose middle
stages hold a multiple of v layers (stages.py: fewer on the first and last stage, as Megatron places
them) and m a multiple of p (Megatron's interleaved schedule). When d does not divide the
global batch, the replica batch is the nearest whole number of sequences, if that batch is within
BATCH_TOLERANCE of the one asked for (992 GPUs as TP 8 x DP 124 run 992 of 1,024 sequences), and
the plan says which global batch it runs (`global_batch`); plans are ranked by throughput, not
step time, since their batches may differ. A pipeline with fewer micro-batches than stages is priced,
not refused: Megatron's 1F1B and PyTorch's GPipe run it, every stage holding all m micro-batches, with a
bubble of (p-1)/(m+p-1) of the step (costs.py); only interleaving needs m to be a multiple of p.

Each structure is evaluated with every ZeRO stage and recompute setting allowed (vectorised over
numpy arrays: thousands of configurations in milliseconds), and the fastest setting that fits in
memory represents it; ties go to the smaller memory. A TP group spanning NVLink domains is never chosen
when a plan with TP inside one fits (unless --tp pins it), nor context parallelism below 32K tokens per
sequence when a plan without it fits (unless --cp pins it). The workload's stack (stacks.py) says which
ZeRO stages and recompute modes exist, and prices memory and data-parallel traffic as that stack runs them. With FlashAttention, selective recompute is
skipped unless pinned (it saves nothing that FlashAttention stores and costs time); without it the
per-op mode is (it is torchtitan's, built around SDPA). Among the plans within the model's own
error of the fastest, choose.py picks by the rules practitioners follow and names the runners-up.
A pin (--tp 8 ...) restricts its dimension to one value; rejected configurations are reported with
the reason, memory first.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from planner.model.cluster import Cluster
from planner.model.compute import Kernels
from planner.model.costs import StepCosts, step_costs
from planner.model.cp_kinds import CP_KINDS, ulysses_fits
from planner.model.degrees import FULL, NONE, OP, SELECTIVE, Degrees
from planner.model.memory import MEMORY_HEADROOM, RECOMPUTE, Memory, usable_bytes
from planner.model.shapes import Shape, hardware_flops_per_token, model_flops_per_token
from planner.model.stacks import MEGATRON, Stack
from planner.model.stages import interleave_fits

from .choose import CP_MIN_SEQ, decide
from .records import Plan, Rejection, Result, fewest_degrees_first

MAX_MICROBATCH = 16
MAX_INTERLEAVE = 8
MIN_CP_TOKENS = 1024
BATCH_TOLERANCE = 0.05  # a DP degree that does not divide the batch may run the nearest batch within 5% of it
GB = 1e9


@dataclass(frozen=True)
class Pins:
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cp: int | None = None
    zero: int | None = None
    microbatch: int | None = None
    interleave: int | None = None
    recompute: str | None = None


@dataclass(frozen=True)
class Workload:
    shape: Shape
    global_batch: int  # sequences per step (the plan may run the nearest batch its DP degree divides)
    precision: str = "bf16"
    grad_bytes: float = 2.0
    sequence_parallel: bool = True
    flash_attention: bool = True
    dropout: bool = False
    fused_kernels: bool = True  # fused norm/activation kernels (Megatron, TE, torch.compile); False = eager
    rope: bool = False  # rotary embeddings (Llama) instead of learned positions
    attention_kernel: str = "best"  # FlashAttention family: "best" of the GPU generation, or "fa2"
    tp_overlap: bool = True  # backward TP collectives overlap weight-gradient GEMMs (Megatron-Core)
    dp_overlap: bool = True  # DP/ZeRO collectives overlap compute (bucketed reduction, prefetched gathers)
    tp_layout_copies: bool = False  # SP collectives on a batch-first layout copy their buffer (DTensor)
    fsdp_copies: bool = False  # FSDP2's copy-in/copy-out around its all-gathers and reduce-scatters
    fp8_backend: str = "te-fused"  # how FP8 linears run (fp8_cost.BACKENDS)
    fp8_recipe: str = "delayed"  # FP8 scaling: delayed, current, tensorwise
    qkv_fused: bool = True  # q, k, v as one GEMM (Megatron, TE) or three Linears (torchtitan)
    host: str = "eager"  # what launches the kernels (host.HOST_US): eager (PyTorch, Megatron), compiled, graphs
    tp_comm_overlap: bool = False  # Megatron-Core's --tp-comm-overlap: forward TP collectives hidden too
    optimizer: str = "megatron"  # the Adam step's implementation (compute.OPTIMIZER_KERNELS)
    cp_kind: str = "ring"  # the context-parallel design (model/cp_kinds.py): ring, allgather, ulysses, or auto
    even_stages: bool = False  # L/p layers on every stage (the Megatron of 2021-22), not the balanced split (stages.py)
    memory_headroom: float = MEMORY_HEADROOM  # the share of the allocator's capacity a plan may fill (memory.py)
    stack: Stack = MEGATRON  # whose memory and data-parallel schedule (stacks.py); the flags above are its software

    @classmethod
    def of(cls, stack: Stack, shape: Shape, global_batch: int, precision: str = "bf16", **flags) -> "Workload":
        """A workload with `stack`'s software (its kernels, overlap, optimizer), `flags` overriding them."""
        own = dict(fused_kernels=stack.fused_kernels, attention_kernel=stack.attention_kernel,
                   tp_overlap=stack.tp_overlap, dp_overlap=stack.dp_overlap, qkv_fused=stack.qkv_fused,
                   optimizer=stack.optimizer, tp_layout_copies=stack.tp_layout_copies, grad_bytes=stack.grad_bytes)
        return cls(shape, global_batch, precision, stack=stack, **{**own, **flags})

    @property
    def fp8(self) -> bool:
        return self.precision == "fp8"

    @property
    def kernels(self) -> Kernels:
        return Kernels(self.flash_attention, self.fused_kernels, self.sequence_parallel, self.dropout, self.fp8,
                       self.rope, self.attention_kernel, self.fp8_backend, self.fp8_recipe, self.qkv_fused,
                       optimizer=self.optimizer, host=self.host, tp_comm_overlap=self.tp_comm_overlap)


class Structures(NamedTuple):
    """Every layout the search prices, one array element each: the degrees t, p, c, d, micro-batch b, interleave v,
    micro-batches per step m, and the global batch B it runs."""
    t: np.ndarray
    p: np.ndarray
    c: np.ndarray
    d: np.ndarray
    b: np.ndarray
    v: np.ndarray
    m: np.ndarray
    B: np.ndarray

    def degrees(self, zero, recompute) -> Degrees:
        return Degrees(self.t, self.p, self.c, self.d, self.b, self.v, self.m, zero, recompute)


class Enumerated(NamedTuple):
    """What enumerate_structures found: the layouts to price, and those refused before pricing."""
    structures: Structures
    rejected: list[Rejection]


class Priced(NamedTuple):
    """Memory per GPU (bytes) and the step's time terms (seconds) of priced configurations (arrays)."""
    memory: Memory
    costs: StepCosts


@lru_cache(maxsize=None)
def _divisors(n: int) -> tuple[int, ...]:
    small = [k for k in range(1, int(n**0.5) + 1) if n % k == 0]
    return tuple(sorted(set(small + [n // k for k in small])))


def _interleaves(layers: int, p: int, even: bool = False) -> list[int]:
    """Interleaving degrees a p-stage pipeline of `layers` allows (stages.interleave_fits: equal middle stages of
    a multiple of v layers, fewer on the first and last; with even stages, L/p a multiple of v)."""
    if p == 1:
        return [1]
    return [1] + [v for v in range(2, MAX_INTERLEAVE + 1) if _interleave_fits(layers, p, v, even)]


def _interleave_fits(layers: int, p: int, v: int, even: bool) -> bool:
    return (layers % p == 0 and (layers // p) % v == 0) if even else interleave_fits(layers, p, v)


def default_batch(gpus: int, seq: int) -> int:
    """The guide's batch rule, in sequences: 1M tokens, or 1K tokens per GPU on clusters of more than 1024 GPUs
    (4M tokens at 4096 GPUs, 16M at 16,384): the CLI's default and the guide's tables."""
    return max(1, max(2**20, 2**10 * gpus) // seq)


def replica_batch(batch: int, d: int) -> int:
    """Sequences per data-parallel replica: batch / d, or the nearest whole number (at least 1)."""
    return max(1, int(batch / d + 0.5))


def enumerate_structures(w: Workload, cl: Cluster, pins: Pins) -> Enumerated:
    """Every layout the GPU count and the pins allow (Structures), and the refused ones with their reasons."""
    sh, n, batch = w.shape, cl.gpus, w.global_batch
    rejected: list[Rejection] = []

    def refuse(reason: str, **degrees) -> None:
        rejected.append(Rejection(reason, tuple(degrees.items())))
    rows = []
    for t in [pins.tp] if pins.tp else _divisors(n):
        why = (f"tp={t} does not divide heads {sh.heads}" if sh.heads % t else
               f"tp={t} does not divide kv-heads {sh.kv_heads}" if sh.kv_heads % t else
               f"tp={t} does not tile the {cl.domain}-GPU NVLink domain"
               if cl.domain > 1 and t % cl.domain and cl.domain % t else None)
        if why:
            refuse(why, tp=t)
            continue
        for p in [pins.pp] if pins.pp else _divisors(n // t if n % t == 0 else 1):
            if p > sh.layers:
                refuse(f"pp={p} is more stages than the {sh.layers} layers", tp=t, pp=p)
                continue
            if w.even_stages and sh.layers % p:
                refuse(f"pp={p} does not divide the {sh.layers} layers (--pipeline-split even)", tp=t, pp=p)
                continue
            for c in [pins.cp] if pins.cp else [c for c in _divisors(n) if c == 1 or sh.seq // c >= MIN_CP_TOKENS]:
                if c > 1 and not w.flash_attention:
                    refuse(f"cp={c} needs fused (flash) attention", tp=t, pp=p, cp=c)
                    continue
                if sh.seq % (2 * c) and c > 1:
                    refuse(f"cp={c}: seq {sh.seq} is not 2·cp chunks", tp=t, pp=p, cp=c)
                    continue
                if w.cp_kind == "ulysses" and c > 1 and not ulysses_fits(sh.heads, sh.kv_heads, t, c):
                    refuse(f"cp={c}: Ulysses needs heads/tp and kv-heads/tp ({sh.heads}/{t}, {sh.kv_heads}/{t}) "
                           "divisible by cp", tp=t, pp=p, cp=c)
                    continue
                if n % (t * p * c):
                    refuse(f"tp·pp·cp = {t * p * c} does not divide {n} GPUs", tp=t, pp=p, cp=c)
                    continue
                d = n // (t * p * c)
                if pins.dp and d != pins.dp:
                    refuse(f"dp would be {d}, not {pins.dp}", tp=t, pp=p, cp=c, dp=d)
                    continue
                per_replica = replica_batch(batch, d)
                if abs(per_replica * d - batch) > BATCH_TOLERANCE * batch:
                    refuse(f"dp={d} does not divide the global batch {batch} and the nearest batch it divides, "
                           f"{per_replica * d}, is more than {BATCH_TOLERANCE:.0%} away", tp=t, pp=p, cp=c, dp=d)
                    continue
                mbs = [pins.microbatch] if pins.microbatch else [b for b in _divisors(per_replica)
                                                                 if b <= MAX_MICROBATCH]
                for b in mbs:
                    if per_replica % b:
                        refuse(f"micro-batch {b} does not divide the {per_replica} sequences per replica",
                               tp=t, pp=p, cp=c, dp=d, microbatch=b)
                        continue
                    m = per_replica // b  # m < p runs, with a bubble of (p-1)/(m+p-1) (costs.py)
                    for v in [pins.interleave] if pins.interleave else _interleaves(sh.layers, p, w.even_stages):
                        why = (f"interleave {v} needs pp > 1" if v > 1 and p == 1 else
                               f"interleave {v}: no split of {sh.layers} layers on {p} stages puts a multiple "
                               f"of {v} on every middle stage" if v > 1 and not _interleave_fits(sh.layers, p, v,
                                                                                                 w.even_stages) else
                               f"interleave {v} needs the {m} micro-batches to be a multiple of pp={p}"
                               if v > 1 and m % p else None)
                        if why:
                            refuse(why, tp=t, pp=p, cp=c, dp=d, microbatch=b, interleave=v)
                            continue
                        rows.append((t, p, c, d, b, v, m, per_replica * d))
    arr = np.array(rows, dtype=np.int64).reshape(-1, 8)
    return Enumerated(Structures._make(arr[:, i] for i in range(8)), rejected)


def evaluate(w: Workload, cl: Cluster, s: Structures, zero, recompute) -> Priced:
    """Times (s) and memory (bytes) for structures `s` crossed with the given zero/recompute arrays."""
    deg = s.degrees(zero, recompute)
    times = step_costs(w.shape, cl, deg, grad_bytes=w.grad_bytes, kernels=w.kernels, tp_overlap=w.tp_overlap,
                       dp_overlap=w.dp_overlap, even_stages=w.even_stages, tp_layout_copies=w.tp_layout_copies,
                       fsdp_copies=w.fsdp_copies, dp_schedule=w.stack.dp_schedule, cp_kind=w.cp_kind)
    mem = w.stack.memory(w.shape, deg, grad_bytes=w.grad_bytes, sequence_parallel=w.sequence_parallel,
                         flash=w.flash_attention, fp8=w.fp8, dropout=w.dropout, split=times.split)
    return Priced(mem, times)


def _recompute_modes(w: Workload, pins: Pins) -> list[int]:
    if pins.recompute:
        return [RECOMPUTE.index(pins.recompute)]
    # With FlashAttention, Korthikanti's selective recompute saves nothing and costs time: dominated.
    modes = [NONE, FULL, OP] if w.flash_attention else [NONE, SELECTIVE, FULL]
    return [r for r in modes if RECOMPUTE[r] in w.stack.recompute]


def search(w: Workload, cl: Cluster, pins: Pins = Pins(), top: int = 10, max_rejected: int = 50,
           rules: bool = True, enumerated: Enumerated | None = None) -> Result:
    """Rank every configuration that fits; see the module docstring.

    rules=False skips choose.py: the fastest plan comes first (published.py prices a published run that
    way, taking its unstated knobs, e.g. micro-batch and interleaving, as tuned for speed). enumerated: the
    layouts of enumerate_structures(w, cl, pins) when the caller has them already (plan.py checks them first).
    """
    s, rejected = enumerated or enumerate_structures(w, cl, pins)
    n_struct = len(s.t)
    zeros = [pins.zero] if pins.zero is not None else list(w.stack.zero_stages)
    combos = [(z, r) for z in zeros for r in _recompute_modes(w, pins)]
    k = len(combos)
    sid = np.repeat(np.arange(n_struct), k)
    g = Structures._make(a[sid] for a in s)
    zero = np.tile(np.array([z for z, _ in combos]), n_struct)
    rec = np.tile(np.array([r for _, r in combos]), n_struct)
    ev = evaluate(w, cl, g, zero, rec)
    total = ev.memory.total
    per_token = ev.costs.step_s / g.B  # plans may run different global batches: rank by throughput
    usable = usable_bytes(cl.memory_gb, w.memory_headroom)
    fits = (total <= usable) & w.stack.runs(g, zero, rec)
    # Fastest fitting (zero, recompute) per structure, ties to less memory; then rank the structures.
    idx = np.flatnonzero(fits)
    idx = idx[np.lexsort((total[idx], per_token[idx], sid[idx]))]
    _, first = np.unique(sid[idx], return_index=True)
    chosen = idx[first]
    order = np.lexsort((g.v[chosen], g.b[chosen], g.c[chosen], g.p[chosen], g.t[chosen], total[chosen],
                        per_token[chosen]))
    ranked = chosen[order]
    if rules and pins.tp is None and cl.domain > 1 and (g.t[ranked] <= cl.domain).any():
        # TP inside the NVLink domain whenever a plan with it fits (choose.py's rule 2, made absolute): the model
        # does not price NICs shared with DP/PP traffic or jitter, which practitioners keep TP off the network for.
        ranked = ranked[g.t[ranked] <= cl.domain]
    if rules and pins.cp is None and w.shape.seq < CP_MIN_SEQ and (g.c[ranked] == 1).any():
        # No context parallelism below CP_MIN_SEQ tokens whenever a plan without it fits (choose.py's rule 4, made
        # absolute): the model does not price the ring's load imbalance and small per-step kernels.
        ranked = ranked[g.c[ranked] == 1]
    fastest = [describe(w, cl, g, zero, rec, ev, i) for i in ranked[:max(top, 50)]]
    candidates, near = decide(fastest, w, cl, top) if rules else (fastest[:top], [])
    # Structures with no fitting setting: report the least memory any setting needed.
    lost = np.setdiff1d(np.arange(n_struct), sid[chosen]) if n_struct else np.array([], dtype=int)
    mem_rej = []
    if len(lost):
        rows = np.arange(len(sid)).reshape(n_struct, k)[lost]
        least = rows[np.arange(len(lost)), np.argmin(total[rows], axis=1)]
        for i in least[np.argsort(total[least], kind="stable")][:max_rejected]:
            mem_rej.append(Rejection(f"does not fit: needs {total[i] / GB:.1f} GB at best (ZeRO-{zero[i]}, "
                                     f"{RECOMPUTE[rec[i]]} recompute), {usable / GB:.1f} GB usable of "
                                     f"{cl.memory_gb:g} GB", tuple(_degrees(g, zero, rec, i).items())))
    # Memory first, then the most fundamental divisibility reasons (those naming the fewest degrees).
    rejected = fewest_degrees_first(rejected)
    all_rejected = mem_rej + rejected[:max(0, max_rejected - len(mem_rej))]
    return Result(candidates, all_rejected, len(lost) + len(rejected), len(sid), near)


def _degrees(g: Structures, zero, rec, i: int) -> dict:
    """The i-th configuration's degrees as Plan's fields name them (and the JSON, in that order)."""
    return {"tp": int(g.t[i]), "pp": int(g.p[i]), "dp": int(g.d[i]), "cp": int(g.c[i]), "zero": int(zero[i]),
            "microbatch": int(g.b[i]), "interleave": int(g.v[i]), "recompute": RECOMPUTE[rec[i]],
            "num_microbatches": int(g.m[i])}


def describe(w: Workload, cl: Cluster, g: Structures, zero, rec, ev: Priced, i: int) -> Plan:
    """One configuration as plain numbers: degrees, memory (GB), times (s), throughput, MFU and HFU."""
    degrees = _degrees(g, zero, rec, i)
    times = ev.costs
    batch = int(g.B[i])
    tokens = batch * w.shape.seq
    step = float(times.step_s[i])
    model_tf = model_flops_per_token(w.shape) * tokens / step / cl.gpus / 1e12
    hw_tf = hardware_flops_per_token(w.shape, degrees["recompute"]) * tokens / step / cl.gpus / 1e12
    seconds = {f: round(float(getattr(times, f)[i]), 6) for f in StepCosts._fields if f not in ("split", "cp_kind")}
    return Plan(**degrees, global_batch=batch, layers_per_stage=times.split.describe(i, degrees["pp"]),
                memory_gb=Memory._make(round(float(v[i]) / GB, 3) for v in ev.memory), **seconds,
                tokens_per_s=round(tokens / step, 1), tokens_per_s_per_gpu=round(tokens / step / cl.gpus, 1),
                model_tflops_per_gpu=round(model_tf, 2), mfu=round(model_tf / cl.peak_tflops, 4),
                hardware_tflops_per_gpu=round(hw_tf, 2), hfu=round(hw_tf / cl.peak_tflops, 4),
                cp_kind=CP_KINDS[int(times.cp_kind[i])] if degrees["cp"] > 1 else "none")
