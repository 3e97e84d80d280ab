"""Pipeline stages: how many layers each stage gets, and the step time of a pipeline of unequal stages.

Large runs do not cut layers evenly: the first stage also runs the embedding and holds the most
micro-batches in flight, the last stage runs the LM head and the loss, and the layer count need
not be a multiple of the stage count. Llama 3 405B ran 126 layers on 16 stages with one layer
fewer on the first and the last (Llama 3 paper, arXiv 2407.21783 §3.3.2); BLOOM ran 70 layers on
12 (arXiv 2211.05100 §3.4.1). The planner therefore chooses the split itself:

    first stage a layers (+ embedding), last stage z layers (+ LM head and loss),
    the p - 2 middle stages share the rest as evenly as possible (the busiest has ceil of it),

over a window of a and z around L/p, keeping the split whose slowest stage is fastest, and among
equally fast ones the fewest layers on the first stage (it holds p micro-batches' activations).
With p | L and a head cheaper than a layer this is the even split.

Interleaved schedules (v model chunks per GPU) need every middle stage's layers to split into v equal
chunks, and no longer need L/p to: Megatron places fewer layers on the first and the last stage
(`--decoder-first/last-pipeline-num-layers`, or NeMo's account_for_embedding/loss_in_pipeline_split,
which count the embedding and the loss as layers), as NVIDIA's Llama 3.1 405B recipes run 126 layers
on 8 stages with 8 chunks: 15 + 16 x 6 + 15. So with v > 1 the middle stages take the same multiple of
v, and the first and the last at most that many, a multiple of v or one layer short of one (that
stage's first or last chunk holds the embedding or the loss in place of a layer); `interleave_fits`
says whether any split in the window allows it.

Step time of a pipeline whose stage i takes t_i per micro-batch (forward + backward), 1F1B with
v interleaved chunks: the slowest stage sets the pace for m micro-batches and the others' fill
and drain add the rest,

    step = m · max_i t_i + (Σ_i t_i - max_i t_i) / v,

which is SC21's (m + (p-1)/v) · t for equal stages (§2.2; the bubble is (p-1)/(v·m) of the ideal).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

WINDOW = (-2, -1, 0, 1)  # first/last stage layers tried: floor(L/p) + these


class StageSplit(NamedTuple):
    """Layers per stage (arrays over configurations). With p = 1 the one stage is first and last."""

    first: np.ndarray
    middle: np.ndarray  # the busiest middle stage (0 when p <= 2)
    last: np.ndarray

    def describe(self, i: int, p: int) -> str:
        f, mid, last = int(self.first[i]), int(self.middle[i]), int(self.last[i])
        if p == 1:
            return f"{f}"
        if p == 2:
            return f"{f}+{last}"
        return f"{f}+{mid}x{p - 2}+{last}" if f != mid or last != mid else f"{mid}x{p}"


def even_split(layers: int, p) -> StageSplit:
    """L/p layers per stage (p must divide L): the split every stage shares."""
    p = np.asarray(p, float)
    per = layers / p
    ends = np.where(p == 1, float(layers), per)
    return StageSplit(ends, np.where(p > 2, per, 0.0), ends)


def _split_ok(p, a, z, rest):
    """Which first/last stage sizes (a, z) leaving `rest` layers are a valid split on p stages (one chunk each)."""
    return (a >= 1) & (z >= 1) & np.where(p > 2, rest >= p - 2, rest == 0)


def _chunks_ok(p, v, a, z, rest, inner):
    """Which of those splits also allow v chunks per stage (True where v = 1; worked out only where v > 1)."""
    p, v, a, z, rest, inner = np.broadcast_arrays(p, v, a, z, rest, inner)
    out = np.ones(p.shape, bool)
    sel = v > 1
    p, v, a, z, rest, inner = p[sel], v[sel], a[sel], z[sel], rest[sel], inner[sel]
    # Interleaving: every middle stage the same multiple of v; the first and the last a multiple of v or one
    # layer short of it (its first or last chunk holds the embedding or the loss instead), at most a middle's.
    mid = rest / inner
    even_mid = (np.mod(rest, inner) == 0) & (np.mod(mid, v) == 0)
    ends = ((a >= v - 1) & (z >= v - 1) & (np.mod(a + 1, v) <= 1) & (np.mod(z + 1, v) <= 1)
            & np.where(p > 2, (a <= mid) & (z <= mid), True))
    out[sel] = np.where(p > 2, even_mid, True) & ends
    return out


@lru_cache(maxsize=None)
def interleave_fits(layers: int, p: int, v: int) -> bool:
    """True if some split in the window runs v chunks per stage (module docstring; integers, cached)."""
    if v == 1:
        return True
    if p == 1:
        return False
    base = layers // p
    for a in (base + d for d in WINDOW):
        for z in (base + d for d in WINDOW):
            rest = layers - a - z
            if a < max(1, v - 1) or z < max(1, v - 1) or (a + 1) % v > 1 or (z + 1) % v > 1:
                continue
            if p == 2 and rest == 0:
                return True
            if p > 2 and rest >= p - 2 and rest % (p - 2) == 0 and (rest // (p - 2)) % v == 0 \
                    and max(a, z) <= rest // (p - 2):
                return True
    return False


def window_centers(layers: int, p, v, layer_s, e, hd) -> tuple:
    """Where the window of first and last stage sizes is centred: floor(L/p) for both, unless the embedding or the
    LM head is worth more than a layer (a small model with a large vocabulary: at hidden 2048 and vocab 131,072 the
    head and its loss cost about five layers). Then the balanced sizes are a* = m - e/l and z* = m - hd/l with
    m = (L + (e + hd)/l)/p, every stage then taking the same time, and the window is centred on them, as a framework
    that places layers by their cost does (nanotron's get_block_compute_costs). Interleaved splits keep floor(L/p):
    Megatron's interleaved placement (module docstring) allows only a layer short of a chunk at either end."""
    base = np.floor(layers / np.maximum(p, 1))
    l = np.maximum(layer_s, 1e-30)
    m = (layers + (e + hd) / l) / np.maximum(p, 1)
    keep = (v > 1) | (layer_s <= 0)
    a0 = np.where(keep, base, np.floor(m - e / l + 0.5))
    z0 = np.where(keep, base, np.floor(m - hd / l + 0.5))
    return a0, z0


def balanced_split(layers: int, p, layer_s, first_extra_s, last_extra_s, v=1) -> StageSplit:
    """The split minimising the slowest stage's time (see the module docstring); arrays over configurations.

    layer_s: time of one layer per micro-batch; first_extra_s / last_extra_s: the embedding's and the
    LM head's time on the first and last stage; v: interleaved chunks per stage (the split must allow them).
    """
    p, v = np.asarray(p, float), np.asarray(v, float)
    layer_s, e, hd = np.broadcast_arrays(*(np.asarray(x, float) for x in (layer_s, first_extra_s, last_extra_s)))
    base_a, base_z = window_centers(layers, p, v, layer_s, e, hd)
    inner = np.maximum(p - 2, 1)
    interleaved = bool(np.any(v > 1))  # else every split that is valid allows its one chunk per stage
    best_key = best_bad = best = None
    for da in WINDOW:
        for dz in WINDOW:
            a, z = base_a + da, base_z + dz
            rest = layers - a - z
            mid = np.where(p > 2, np.ceil(rest / inner), 0.0)
            ok = _split_ok(p, a, z, rest)
            slowest = np.maximum(np.maximum(a * layer_s + e, z * layer_s + hd), mid * layer_s)
            key = np.where(ok, slowest, np.inf)
            # Splits that do not allow v chunks rank after every split that does (a configuration the search
            # rejects, priced directly, still gets a split).
            bad = ~(ok & _chunks_ok(p, v, a, z, rest, inner)) if interleaved else ~ok
            if best_key is None:
                best_key, best_bad, best = key, bad, (a, mid, z)
                continue
            # Allowed first; then faster, or as fast (to 1e-9 relative) with fewer layers on the first stage.
            faster = (key < best_key * (1 - 1e-9)) | ((key <= best_key * (1 + 1e-9)) & (a < best[0]))
            better = (best_bad & ~bad) | ((bad == best_bad) & faster)
            best_key, best_bad = np.where(better, key, best_key), np.where(better, bad, best_bad)
            best = tuple(np.where(better, new, old) for new, old in zip((a, mid, z), best))
    single = p == 1
    first, mid, last = best
    return StageSplit(np.where(single, float(layers), first), np.where(single, 0.0, mid),
                      np.where(single, float(layers), last))


def stage_times(split: StageSplit, layers: int, p, layer_s, first_extra_s, last_extra_s) -> tuple:
    """(slowest stage, sum over stages) of the per-micro-batch time of a split."""
    p = np.asarray(p, float)
    single = p == 1
    first = split.first * layer_s + first_extra_s + np.where(single, last_extra_s, 0.0)
    last = split.last * layer_s + last_extra_s
    slowest = np.where(single, first, np.maximum(np.maximum(first, last), split.middle * layer_s))
    return slowest, layers * layer_s + first_extra_s + last_extra_s


def pipeline_step(m, v, slowest, total) -> np.ndarray:
    """m · max_i t_i + (Σ_i t_i - max_i t_i) / v: the 1F1B (interleaved) step of unequal stages."""
    return m * slowest + (total - slowest) / v
