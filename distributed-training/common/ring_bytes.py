"""The bytes ring attention sends per rank (context parallelism): one formula for the ring (ring_attention.py),
its lab (cp-attention), parallel-3d's design and the planner's CP term. Plain arithmetic, no torch, so the
planner can import it; numbers or numpy arrays alike.

Per layer and micro-batch, each of the N ranks of the ring sends N-1 K/V blocks forward and, backward, the
N-1 K/V blocks again plus N-1 fp32 dK/dV accumulators (ring_attention.py's module docstring). A block is
2 (K and V) x b x s/N x Hkv x D elements, Hkv the K/V heads this rank holds (n_kv / t under tensor
parallelism): with grouped-query attention the ring carries the K/V heads, not the query heads.
"""

from __future__ import annotations

from typing import NamedTuple


class RingBytes(NamedTuple):
    """Bytes one rank sends per layer (and per micro-batch)."""
    forward: int
    backward: int

    @property
    def total(self) -> int:
        return self.forward + self.backward


def ring_bytes(batch, seq_len, n_kv_heads, head_dim, cp, elem_bytes, grad_elem_bytes=4) -> RingBytes:
    """The ring's bytes per rank per layer: (N-1) K/V blocks forward; (N-1) K/V blocks + (N-1) dK/dV accumulators
    (grad_elem_bytes: fp32) backward. A block is 2 (K and V) x b x s/N x Hkv x D elements (Hkv: this rank's
    K/V heads, n_kv / t under tensor parallelism)."""
    block = 2 * batch * (seq_len // cp) * n_kv_heads * head_dim
    hops = cp - 1
    return RingBytes(hops * block * elem_bytes, hops * block * (elem_bytes + grad_elem_bytes))
