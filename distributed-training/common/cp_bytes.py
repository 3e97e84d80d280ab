"""The bytes one rank sends per layer for each design of context parallelism (CP): one formula per design, here
only, for the implementations' tests (common/ring_attention.py, allgather_attention.py, ulysses_attention.py), the
cp-attention lab, parallel-3d's design and the planner's CP term (planner/model/cp_kinds.py). Plain arithmetic, no torch,
so the planner can import it; numbers or numpy arrays alike.

Notation: b micro-batch, s sequence, N the CP degree, H and Hkv the query and K/V heads a rank holds (n/t under
tensor parallelism), D head size, e bytes per element of K/V and activations, g of the K/V gradients in flight.
A K/V block is 2 (K and V) x b x s/N x Hkv x D elements: with grouped-query attention the ring and the all-gather
carry K/V heads, not query heads.

    ring        forward N-1 hops of the K/V block; backward N-1 hops again plus N-1 hops of an fp32 dK/dV
                accumulator (g = 4), which reaches its owner on the last hop
    allgather   forward one all-gather of K/V (each rank sends its block to N-1 peers: N-1 blocks); backward
                the same gather again (Megatron keeps only the local K/V and re-gathers) and one reduce-scatter of
                the fp32 dK/dV of the whole sequence (each rank sends the N-1 shards it does not own): the same
                bytes as the ring by another route, in one exposed collective instead of N-1 overlapped hops
    ulysses     forward one all-to-all of q, k, v (each rank keeps 1/N of the heads for the whole sequence: it
                sends (N-1)/N of its b x s/N x (H + 2 Hkv) x D) and one of the output back ((N-1)/N of b x s/N x H x D);
                backward the same two with dO and then dQ, dK, dV (in the inputs' dtype: each is complete on one
                rank, no partial sums travel). DeepSpeed-Ulysses' 4Nh/P per link, falling as N grows where the
                ring's bytes per rank do not (Jacobs et al. 2023, arXiv 2309.14509; cp-anchors section 2)
"""

from __future__ import annotations

from typing import NamedTuple

CP_KINDS = ("ring", "allgather", "ulysses")


class CPBytes(NamedTuple):
    """Bytes one rank sends per layer (and per micro-batch)."""
    forward: int
    backward: int

    @property
    def total(self) -> int:
        return self.forward + self.backward


def kv_block(batch, seq_len, n_kv_heads, head_dim, cp):
    """Elements of one rank's K/V block: 2 x b x s/N x Hkv x D."""
    return 2 * batch * (seq_len // cp) * n_kv_heads * head_dim


def ring_bytes(batch, seq_len, n_kv_heads, head_dim, cp, elem_bytes, grad_elem_bytes=4) -> CPBytes:
    """The ring's bytes per rank per layer: (N-1) K/V blocks forward; (N-1) K/V blocks + (N-1) dK/dV accumulators
    (grad_elem_bytes: fp32) backward."""
    block, hops = kv_block(batch, seq_len, n_kv_heads, head_dim, cp), cp - 1
    return CPBytes(hops * block * elem_bytes, hops * block * (elem_bytes + grad_elem_bytes))


def allgather_bytes(batch, seq_len, n_kv_heads, head_dim, cp, elem_bytes, grad_elem_bytes=4) -> CPBytes:
    """All-gather CP per rank per layer: the gather forward (its block to N-1 peers); backward the gather again and
    the reduce-scatter of the whole sequence's fp32 dK/dV (N blocks, of which it sends the N-1 it does not own)."""
    block = kv_block(batch, seq_len, n_kv_heads, head_dim, cp)
    gather = (cp - 1) * block * elem_bytes
    reduce_scatter = (cp - 1) * block * grad_elem_bytes  # (N-1)/N of the N blocks of the whole sequence
    return CPBytes(gather, gather + reduce_scatter)


def ulysses_bytes(batch, seq_len, n_heads, n_kv_heads, head_dim, cp, elem_bytes) -> CPBytes:
    """Ulysses per rank per layer: forward the q/k/v all-to-all and the output's, (N-1)/N of each rank's buffer;
    backward dO's and dQ/dK/dV's, the same sizes (n_heads and n_kv_heads divisible by N: ulysses_attention.py)."""
    tokens = batch * (seq_len // cp) * head_dim  # elements per head of this rank's s/N tokens
    qkv, out = tokens * (n_heads + 2 * n_kv_heads), tokens * n_heads
    sent = _whole((cp - 1) * (qkv + out) * elem_bytes / cp)
    return CPBytes(sent, sent)


def _whole(x):
    """An exact count as an int (heads divisible by N make it whole); arrays and fractions as they are."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


def cp_bytes(kind: str, batch, seq_len, n_heads, n_kv_heads, head_dim, cp, elem_bytes, grad_elem_bytes=4) -> CPBytes:
    """The bytes of design `kind` (CP_KINDS) per rank per layer."""
    if kind == "ring":
        return ring_bytes(batch, seq_len, n_kv_heads, head_dim, cp, elem_bytes, grad_elem_bytes)
    if kind == "allgather":
        return allgather_bytes(batch, seq_len, n_kv_heads, head_dim, cp, elem_bytes, grad_elem_bytes)
    if kind == "ulysses":
        return ulysses_bytes(batch, seq_len, n_heads, n_kv_heads, head_dim, cp, elem_bytes)
    raise ValueError(f"the CP design must be one of {', '.join(CP_KINDS)}, got {kind!r}")
