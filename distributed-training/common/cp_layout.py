"""Which tokens each context-parallel (CP) rank holds, and which query/key chunk pairs attend: one layout for the
ring, the all-gather and Ulysses (common/ring_attention.py, allgather_attention.py, ulysses_attention.py), with or
without document boundaries.

    layout = CPLayout.causal(seq_len=64, cp=4)                # one document: plain causal attention
    layout = CPLayout.of(64, 4, documents=(16, 48))            # two packed documents, attention never crosses one
    pos = layout.positions(rank)                               # the global token positions rank `rank` holds
    for p in layout.pairs(rank, j):                            # rank's queries against rank j's keys
        out_p = attention(q[:, :, p.q], k[:, :, p.k], causal=p.causal)

Load balance (Llama 3, Dubey et al. 2024, arXiv 2407.21783, section 3.3.2; Megatron's "zigzag"; PyTorch's
_HeadTailLoadBalancer). Cut a document into 2N chunks; rank r holds chunks r and 2N-1-r. Causal work grows along a
document, so pairing an early chunk with a late one gives every rank the same number of unmasked query-key pairs,
where a contiguous split leaves the last rank N times the first's work.

Packed documents (long-context training packs several into one sequence; attention must not cross a boundary).
Cutting the whole *sequence* into 2N chunks no longer balances: the unmasked pairs are per document, and a short
document sitting in one rank's chunk gives it all of that document's work. So each document is split on its own
(PyTorch's _PerDocumentHeadTailLoadBalancer, per document rather than document-major: pytorch PR #189902's fix;
TransformerEngine's THD layout): rank r holds chunks r and 2N-1-r *of every document*, so it holds 1/N of every
document's causal work and the ranks stay equal whatever the document lengths. Each document must then split into 2N
equal chunks (TransformerEngine pads each sequence to a multiple of 2N, cu_seqlens_padded, for the same reason);
pad the packer's documents to such lengths. One document is the plain causal layout.

Which pairs attend. A rank's tokens are chunks, each a contiguous run of one document, held in ascending position
order. Query chunk a and key chunk b attend only within one document: fully if b lies before a, causally if they are
the same chunk, not at all if b lies after a. So every block is either a full rectangle, a causal square or nothing,
and no kernel ever needs a mask tensor: the pairs are the mask. On a rank's own tokens every document's chunks form
one causal square (its positions ascend); full pairs that share their queries or their keys and touch are merged
into one kernel call (so the one-document ring does exactly one call per step: all queries against the first half
of an earlier rank's keys, or the second half of its queries against a later rank's keys).
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

import torch


class Chunk(NamedTuple):
    """A contiguous run of one document: global positions [start, start + length)."""
    doc: int
    start: int
    length: int


class Pair(NamedTuple):
    """Local query rows q attend local key rows k of a block: fully, or causally (a square on the same tokens)."""
    q: slice
    k: slice
    causal: bool


def _touch(a: slice, b: slice) -> slice | None:
    """a and b as one slice if they are adjacent (a first or b first), else None."""
    if a.stop == b.start:
        return slice(a.start, b.stop)
    if b.stop == a.start:
        return slice(b.start, a.stop)
    return None


def _coalesce(pairs: list[Pair]) -> list[Pair]:
    """Merge full pairs that share their query rows and touch in keys, or share their keys and touch in queries."""
    out = list(pairs)
    merged = True
    while merged:
        merged = False
        for i in range(len(out)):
            for j in range(i + 1, len(out)):
                a, b = out[i], out[j]
                if a.causal or b.causal:
                    continue
                joined = (Pair(a.q, _touch(a.k, b.k), False) if a.q == b.q and _touch(a.k, b.k) else
                          Pair(_touch(a.q, b.q), a.k, False) if a.k == b.k and _touch(a.q, b.q) else None)
                if joined is not None:
                    out[i] = joined
                    del out[j]
                    merged = True
                    break
            if merged:
                break
    return sorted(out, key=lambda p: (p.q.start, p.k.start))


class CPLayout(NamedTuple):
    """The whole sequence's documents and the CP degree; every rank derives the same layout from them."""
    seq_len: int
    cp: int
    documents: tuple[int, ...]  # document lengths in order, summing to seq_len; (seq_len,): one causal sequence

    @classmethod
    def of(cls, seq_len: int, cp: int, documents: tuple[int, ...] | list[int] = ()) -> "CPLayout":
        """A checked layout (ValueError, one line, otherwise); no documents: one document of the whole sequence."""
        layout = cls(int(seq_len), int(cp), tuple(int(d) for d in documents) or (int(seq_len),))
        layout.check()
        return layout

    @classmethod
    def causal(cls, seq_len: int, cp: int) -> "CPLayout":
        return cls.of(seq_len, cp)

    def check(self) -> None:
        """ValueError (what is wrong, what is allowed) unless every document splits into 2 x CP equal chunks."""
        if self.cp < 1:
            raise ValueError(f"the CP degree must be >= 1, got {self.cp}")
        if self.seq_len < 1 or min(self.documents) < 1 or sum(self.documents) != self.seq_len:
            raise ValueError(f"the documents {list(self.documents)} must be positive lengths summing to the sequence "
                             f"({self.seq_len})")
        if self.cp == 1:
            return
        n = 2 * self.cp
        if len(self.documents) == 1 and self.seq_len % n:
            raise ValueError(f"the sequence ({self.seq_len}) must divide into 2 x CP = {n} equal chunks for the "
                             f"load-balanced split; use a multiple of {n}")
        bad = [d for d in self.documents if d % n]
        if bad:
            raise ValueError(f"every document must divide into 2 x CP = {n} equal chunks (each rank holds chunks r and "
                             f"{n}-1-r of every document); {bad[0]} does not: pad documents to multiples of {n}")

    @property
    def local_len(self) -> int:
        """Tokens each rank holds: s/N."""
        return self.seq_len // self.cp

    @property
    def is_causal(self) -> bool:
        """One document: plain causal attention over the whole sequence."""
        return len(self.documents) == 1

    def chunks(self, rank: int) -> tuple[Chunk, ...]:
        """The chunks rank `rank` holds, in ascending position order: chunks r and 2N-1-r of every document."""
        out, start = [], 0
        for d, length in enumerate(self.documents):
            if self.cp == 1:
                out.append(Chunk(d, start, length))
            else:
                c = length // (2 * self.cp)
                out += [Chunk(d, start + rank * c, c), Chunk(d, start + (2 * self.cp - 1 - rank) * c, c)]
            start += length
        return tuple(out)

    def positions(self, rank: int, device=None) -> torch.Tensor:
        """The global positions rank `rank` holds, in its local order (long, s/N)."""
        return torch.cat([torch.arange(c.start, c.start + c.length, device=device) for c in self.chunks(rank)])

    def doc_ids(self, device=None) -> torch.Tensor:
        """The document of every global position (long, s)."""
        return torch.repeat_interleave(torch.arange(len(self.documents), device=device),
                                       torch.tensor(self.documents, device=device))

    def allowed(self, device=None) -> torch.Tensor:
        """(s, s) bool: query i may attend key j (j <= i, same document); the single-device reference's mask."""
        doc = self.doc_ids(device)
        pos = torch.arange(self.seq_len, device=device)
        return (pos.unsqueeze(1) >= pos) & (doc.unsqueeze(1) == doc)

    def _local(self, rank: int) -> list[tuple[Chunk, slice]]:
        out, off = [], 0
        for c in self.chunks(rank):
            out.append((c, slice(off, off + c.length)))
            off += c.length
        return out

    def pairs(self, q_rank: int, k_rank: int) -> list[Pair]:
        """The blocks rank q_rank's queries attend of rank k_rank's keys, in local rows (module docstring)."""
        if q_rank == k_rank:  # per document one causal square: its chunks ascend in position
            spans: dict[int, slice] = {}
            for c, rows in self._local(q_rank):
                spans[c.doc] = slice(spans[c.doc].start, rows.stop) if c.doc in spans else rows
            return [Pair(s, s, True) for s in spans.values()]
        full = [Pair(qs, ks, False) for qc, qs in self._local(q_rank) for kc, ks in self._local(k_rank)
                if qc.doc == kc.doc and kc.start < qc.start]
        return _coalesce(full)

    def work(self, rank: int) -> int:
        """Unmasked query-key pairs of rank `rank`'s queries over the whole sequence (its share of the FLOPs)."""
        total = 0
        for j in range(self.cp):
            for p in self.pairs(rank, j):
                nq, nk = p.q.stop - p.q.start, p.k.stop - p.k.start
                total += nq * (nq + 1) // 2 if p.causal else nq * nk
        return total

    def signature(self) -> int:
        """A number every rank computes alike from the same layout (the ranks' agreement check, cp_checks.py)."""
        return zlib.crc32(repr((self.seq_len, self.cp, self.documents)).encode()) & 0x7FFFFFFF


def unmasked_pairs(positions: torch.Tensor, layout: CPLayout) -> int:
    """The unmasked query-key pairs of queries at `positions` under the layout's mask (any token assignment: what
    a rank would compute under another split, for comparing balance)."""
    return int(layout.allowed()[positions].sum())


def balanced_positions(seq_len: int, cp: int, rank: int, device=None) -> torch.Tensor:
    """The token positions rank `rank` of `cp` holds of one causal sequence: chunk rank, then chunk 2cp-1-rank (long).
    ValueError if the sequence does not split into 2cp chunks (no token is ever dropped)."""
    return CPLayout.causal(seq_len, cp).positions(rank, device)
