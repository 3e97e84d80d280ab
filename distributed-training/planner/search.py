"""The search: enumerate degrees that divide, evaluate them all at once, keep the fastest that fits.

Degrees (TP t, PP p, CP c, DP d, micro-batch b, interleave v) are enumerated from the divisors of
the GPU count, and a configuration is kept only if it divides: t divides heads and kv-heads and tiles
the NVLink domain (t | domain or domain | t), p divides layers, c leaves an even sequence chunk of at
least MIN_CP_TOKENS tokens (ring attention balances causal work with 2c chunks), t·p·c·d = GPUs, d
divides the global batch, b divides the per-replica batch (b <= MAX_MICROBATCH), and interleaving
v > 1 needs p > 1, v | L/p and m a multiple of p (Megatron's interleaved schedule). Each structure is
then evaluated with every ZeRO stage and recompute setting allowed (vectorised over numpy arrays:
thousands of configurations in milliseconds), and the fastest setting that fits in memory represents
it; ties go to the smaller memory. With FlashAttention, selective recompute is skipped unless pinned:
it saves nothing that FlashAttention stores and costs time. A pin (--tp 8 ...) restricts its
dimension to one value; rejected configurations are reported with the reason, memory first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from cluster import Cluster
from costs import step_costs
from degrees import Degrees
from memory import MEMORY_HEADROOM, RECOMPUTE, memory_breakdown
from shapes import Shape, hardware_flops_per_token, model_flops_per_token

MAX_MICROBATCH = 16
MAX_INTERLEAVE = 8
MIN_CP_TOKENS = 1024
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
    global_batch: int  # sequences per step
    precision: str = "bf16"
    grad_bytes: float = 2.0
    sequence_parallel: bool = True
    flash_attention: bool = True
    dropout: bool = False

    @property
    def fp8(self) -> bool:
        return self.precision == "fp8"


@dataclass
class Result:
    candidates: list[dict]  # ranked, fastest first
    rejected: list[dict] = field(default_factory=list)
    rejected_total: int = 0
    evaluated: int = 0

    @property
    def best(self) -> dict | None:
        return self.candidates[0] if self.candidates else None


@lru_cache(maxsize=None)
def _divisors(n: int) -> tuple[int, ...]:
    small = [k for k in range(1, int(n**0.5) + 1) if n % k == 0]
    return tuple(sorted(set(small + [n // k for k in small])))


def enumerate_structures(w: Workload, cl: Cluster, pins: Pins) -> tuple[dict, list[dict]]:
    """Arrays t, p, c, d, b, v, m of every dividing structure, and the rejected ones with a reason."""
    sh, n, batch = w.shape, cl.gpus, w.global_batch
    rejected: list[dict] = []
    rows = []
    for t in [pins.tp] if pins.tp else _divisors(n):
        why = (f"tp={t} does not divide heads {sh.heads}" if sh.heads % t else
               f"tp={t} does not divide kv-heads {sh.kv_heads}" if sh.kv_heads % t else
               f"tp={t} does not tile the {cl.domain}-GPU NVLink domain"
               if cl.domain > 1 and t % cl.domain and cl.domain % t else None)
        if why:
            rejected.append({"tp": t, "reason": why})
            continue
        for p in [pins.pp] if pins.pp else _divisors(n // t if n % t == 0 else 1):
            if sh.layers % p:
                rejected.append({"tp": t, "pp": p, "reason": f"pp={p} does not divide layers {sh.layers}"})
                continue
            for c in [pins.cp] if pins.cp else [c for c in _divisors(n) if c == 1 or sh.seq // c >= MIN_CP_TOKENS]:
                if sh.seq % (2 * c) and c > 1:
                    rejected.append({"tp": t, "pp": p, "cp": c, "reason": f"cp={c}: seq {sh.seq} is not 2·cp chunks"})
                    continue
                if n % (t * p * c):
                    rejected.append({"tp": t, "pp": p, "cp": c,
                                     "reason": f"tp·pp·cp = {t * p * c} does not divide {n} GPUs"})
                    continue
                d = n // (t * p * c)
                if pins.dp and d != pins.dp:
                    rejected.append({"tp": t, "pp": p, "cp": c, "dp": d, "reason": f"dp would be {d}, not {pins.dp}"})
                    continue
                if batch % d:
                    rejected.append({"tp": t, "pp": p, "cp": c, "dp": d,
                                     "reason": f"dp={d} does not divide the global batch {batch}"})
                    continue
                per_replica = batch // d
                mbs = [pins.microbatch] if pins.microbatch else [b for b in _divisors(per_replica)
                                                                 if b <= MAX_MICROBATCH]
                for b in mbs:
                    if per_replica % b:
                        rejected.append({"tp": t, "pp": p, "cp": c, "dp": d, "microbatch": b,
                                         "reason": f"micro-batch {b} does not divide the {per_replica} "
                                                   "sequences per replica"})
                        continue
                    m = per_replica // b
                    vs = [pins.interleave] if pins.interleave else [1] + [v for v in _divisors(sh.layers // p)
                                                                        if 1 < v <= MAX_INTERLEAVE and p > 1]
                    for v in vs:
                        why = (f"interleave {v} needs pp > 1" if v > 1 and p == 1 else
                               f"interleave {v} does not divide {sh.layers // p} layers per stage"
                               if (sh.layers // p) % v else
                               f"interleave {v} needs the {m} micro-batches to be a multiple of pp={p}"
                               if v > 1 and m % p else None)
                        if why:
                            rejected.append({"tp": t, "pp": p, "cp": c, "dp": d, "microbatch": b, "interleave": v,
                                             "reason": why})
                            continue
                        rows.append((t, p, c, d, b, v, m))
    arr = np.array(rows, dtype=np.int64).reshape(-1, 7)
    return {k: arr[:, i] for i, k in enumerate("tpcdbvm")}, rejected


def evaluate(w: Workload, cl: Cluster, s: dict, zero, recompute) -> dict:
    """Memory (bytes) and times (s) for structures `s` crossed with the given zero/recompute arrays."""
    kw = dict(grad_bytes=w.grad_bytes, fp8=w.fp8, dropout=w.dropout, flash=w.flash_attention)
    deg = Degrees(**{k: s[k] for k in "tpcdbvm"}, zero=zero, recompute=recompute)
    mem = memory_breakdown(w.shape, deg, sequence_parallel=w.sequence_parallel, **kw)
    times = step_costs(w.shape, cl, deg, sp=w.sequence_parallel, **kw)
    return {"memory": mem, **times}


def search(w: Workload, cl: Cluster, pins: Pins = Pins(), top: int = 10, max_rejected: int = 50) -> Result:
    """Rank every dividing configuration that fits; see the module docstring."""
    s, rejected = enumerate_structures(w, cl, pins)
    n_struct = len(s["t"])
    zeros = [pins.zero] if pins.zero is not None else [0, 1, 2, 3]
    # With FlashAttention, selective recompute saves no memory over none and costs time: dominated.
    recs = [RECOMPUTE.index(pins.recompute)] if pins.recompute else [0, 2] if w.flash_attention else [0, 1, 2]
    combos = [(z, r) for z in zeros for r in recs]
    k = len(combos)
    sid = np.repeat(np.arange(n_struct), k)
    grid = {key: a[sid] for key, a in s.items()}
    zero = np.tile(np.array([z for z, _ in combos]), n_struct)
    rec = np.tile(np.array([r for _, r in combos]), n_struct)
    ev = evaluate(w, cl, grid, zero, rec)
    total, step = ev["memory"]["total"], ev["step_s"]
    usable = MEMORY_HEADROOM * cl.memory_gb * GB
    fits = total <= usable
    # Fastest fitting (zero, recompute) per structure, ties to less memory; then rank the structures.
    idx = np.flatnonzero(fits)
    idx = idx[np.lexsort((total[idx], step[idx], sid[idx]))]
    _, first = np.unique(sid[idx], return_index=True)
    chosen = idx[first]
    g = grid
    order = np.lexsort((g["v"][chosen], g["b"][chosen], g["c"][chosen], g["p"][chosen], g["t"][chosen],
                        total[chosen], step[chosen]))
    ranked = chosen[order]
    candidates = [describe(w, cl, g, zero, rec, ev, i) for i in ranked[:top]]
    # Structures with no fitting setting: report the least memory any setting needed.
    lost = np.setdiff1d(np.arange(n_struct), sid[chosen]) if n_struct else np.array([], dtype=int)
    mem_rej = []
    if len(lost):
        rows = np.arange(len(sid)).reshape(n_struct, k)[lost]
        least = rows[np.arange(len(lost)), np.argmin(total[rows], axis=1)]
        for i in least[np.argsort(total[least], kind="stable")][:max_rejected]:
            entry = _degrees(g, zero, rec, i)
            entry["reason"] = (f"does not fit: needs {total[i] / GB:.1f} GB at best (ZeRO-{zero[i]}, "
                               f"{RECOMPUTE[rec[i]]} recompute), {usable / GB:.1f} GB usable of {cl.memory_gb:g} GB")
            mem_rej.append(entry)
    # Memory first, then the most fundamental divisibility reasons (those naming the fewest degrees).
    rejected = sorted(rejected, key=len)
    all_rejected = mem_rej + rejected[:max(0, max_rejected - len(mem_rej))]
    return Result(candidates, all_rejected, len(lost) + len(rejected), len(sid))


def _degrees(g: dict, zero, rec, i: int) -> dict:
    return {"tp": int(g["t"][i]), "pp": int(g["p"][i]), "dp": int(g["d"][i]), "cp": int(g["c"][i]),
            "zero": int(zero[i]), "microbatch": int(g["b"][i]), "interleave": int(g["v"][i]),
            "recompute": RECOMPUTE[rec[i]], "num_microbatches": int(g["m"][i])}


def describe(w: Workload, cl: Cluster, g: dict, zero, rec, ev: dict, i: int) -> dict:
    """One configuration as plain numbers: degrees, memory (GB), times (s), throughput, MFU and HFU."""
    out = _degrees(g, zero, rec, i)
    out["memory_gb"] = {k: round(float(v[i]) / GB, 3) for k, v in ev["memory"].items()}
    for key in ("compute_s", "tp_comm_s", "tp_hidden_s", "pp_comm_s", "pp_hidden_s", "dp_comm_s", "dp_hidden_s",
                "cp_comm_s", "cp_hidden_s", "bubble_fraction", "bubble_s", "optimizer_s", "step_s"):
        out[key] = round(float(ev[key][i]), 6)
    tokens = w.global_batch * w.shape.seq
    step = float(ev["step_s"][i])
    model_tf = model_flops_per_token(w.shape) * tokens / step / cl.gpus / 1e12
    hw_tf = hardware_flops_per_token(w.shape, out["recompute"]) * tokens / step / cl.gpus / 1e12
    out.update({"tokens_per_s": round(tokens / step, 1), "tokens_per_s_per_gpu": round(tokens / step / cl.gpus, 1),
                "model_tflops_per_gpu": round(model_tf, 2), "mfu": round(model_tf / cl.peak_tflops, 4),
                "hardware_tflops_per_gpu": round(hw_tf, 2), "hfu": round(hw_tf / cl.peak_tflops, 4)})
    return out
