"""Bus bandwidth, exactly as NVIDIA nccl-tests defines it (doc/PERFORMANCE.md, src/*.cu `*GetBw`).

    algbw = S / t                      GB/s, GB = 1e9 bytes (the code divides by 1.0E9)
    busbw = algbw * factor(n)          n = ranks in the job

    collective      S (= size_bytes)                        count (as nccl-tests prints it)   factor(n)
    all_reduce      the buffer on each rank                 elements of that buffer           2(n-1)/n
    all_gather      the gathered output (n per-rank parts)  elements per rank                 (n-1)/n
    reduce_scatter  the input (n per-rank parts)            elements per rank (the output)    (n-1)/n
    all_to_all      each rank's buffer (n per-peer parts)   elements per peer                 (n-1)/n
    broadcast       the buffer                              elements of that buffer           1
    send_recv       the buffer each rank sends              elements of that buffer           1

(../shared/reference/allreduce-anchors.md section 1.1.) busbw re-scales algbw to the bandwidth each
rank's link needs in a bandwidth-optimal ring, so it compares with the link's per-direction rate
whatever n is: an all-reduce must move 2(n-1)/n S through every rank's link (Patarasuk & Yuan,
JPDC 69(2), 2009), an all-gather or reduce-scatter half that, a broadcast S through the root's.
With n = 1 no byte crosses a link: the factor of all_reduce and the split collectives is 0, and the
runner writes busbw 0 for every collective, with a note, instead of a misleading number.

No torch here: the report and the fit import this without paying for torch.
"""

from __future__ import annotations

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv")
PARTS = frozenset({"all_gather", "reduce_scatter", "all_to_all"})  # S is split into n per-rank/per-peer parts


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for `collective` on n ranks."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in PARTS:
        return (n - 1) / n
    if collective in ("broadcast", "send_recv"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")


def ring_latency_steps(collective: str, n: int) -> int:
    """Latency terms of the ring cost forms (Thakur, Rabenseifner & Gropp 2005): alpha = steps x per-step latency."""
    busbw_factor(collective, n)  # validates the name
    return {"all_reduce": 2 * (n - 1), "send_recv": 1}.get(collective, n - 1)


def bus_bandwidth(collective: str, size_bytes: int, time_s: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one operation on S = size_bytes bytes taking time_s seconds."""
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * busbw_factor(collective, n)
