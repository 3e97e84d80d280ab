"""The pytorch stack's memory (torch_memory.py) by hand: PyTorch's terms per block, the micro-batches PyTorch's
schedules hold, and the peak's parts. parallel-3d's activation study holds the block terms to measured bytes and
its at-scale study the peak (parallel-3d/tests)."""

import numpy as np
import pytest

from planner.model import torch_memory as tm
from planner.model.degrees import FULL, NONE, OP, Degrees
from planner.model.memory import CONTEXT_BYTES
from planner.model.shapes import Shape

SH = Shape(layers=8, hidden=1024, heads=8, kv_heads=2, vocab=1000, seq=512, ffn=4096)  # GQA: K/V 256 wide


def test_block_terms_by_hand():
    b, s, h, f, kv = 2, 512, 1024, 4096, 256
    sbh = b * s * h
    stats, lse = 2 * 2 * 4 * b * s, 4 * b * 8 * s
    # t = 1, no recompute: LayerNorm inputs (2 x 2 B) and outputs (2 x 2 B), q/k/v, the attention output, GELU in
    # and out: Korthikanti's 32 bytes/sbh without dropout, less what GQA saves, plus fp32 statistics and the LSE
    want = 4 * sbh + 4 * sbh + 2 * b * s * (h + 2 * kv) + 2 * sbh + 2 * 2 * b * s * f + stats + lse
    assert tm.torch_layer_bytes(SH, 1, 1, b, NONE) == want
    # t = 4 with sequence parallelism: everything / t except the two gathered projection inputs (2 x 2 sbh)
    t = 4
    want = 4 * sbh + (4 * sbh + 2 * b * s * (h + 2 * kv) + 2 * sbh + 2 * 2 * b * s * f + stats + lse) / t
    assert tm.torch_layer_bytes(SH, t, 1, b, NONE) == pytest.approx(want)
    assert tm.torch_layer_bytes(SH, t, 1, b, FULL) == 2 * sbh / t  # the block input, sequence-sharded
    # the selective policy (op): block input, q/k/v, wo's and w2's full-length outputs and their reduce-scattered
    # shards, the gathered inputs, one MLP-wide tensor
    want = 2 * sbh / t + 2 * b * s * (h + 2 * kv) / t + 4 * sbh + 4 * sbh / t + 4 * sbh + 2 * b * s * f / t
    assert tm.torch_layer_bytes(SH, t, 1, b, OP) == pytest.approx(want)
    # CP 2: half the tokens, and the ring's output kept twice (its own copy and wo's contiguous input)
    half = Shape(8, 1024, 8, 2, 1000, 256, 4096)
    assert tm.torch_layer_bytes(SH, 1, 2, b, NONE) == tm.torch_layer_bytes(half, 1, 1, b, NONE) + 2 * b * 256 * h


@pytest.mark.parametrize("p, v, m, i, held, forwards_remain", [
    (1, 1, 8, 0, 1, False),  # gradient accumulation: one micro-batch at a time
    (4, 1, 8, 0, 4, True), (4, 1, 8, 3, 1, True),  # 1F1B: min(m, p - i)
    (4, 1, 2, 3, 2, False),  # m < p: GPipe, every stage holds all m
    (8, 8, 8, 0, 64, False),  # interleaved, m = p: warm-up (v-1)·p + 2(p-1) = 70 > m·v = 64, all forwards first
    (8, 8, 8, 7, 57, True),  # the last rank: 56 warm-up forwards, then one before each backward
    (4, 2, 16, 0, 11, True),  # (v-1)·R + 2(p-1) = 4 + 6 = 10 warm-up, R = m / (m // p) = 4 per round
])
def test_in_flight_follows_pytorchs_schedules(p, v, m, i, held, forwards_remain):
    got, steady = tm.in_flight(p, v, m, i)
    assert (float(got), bool(steady)) == (held, forwards_remain)


def test_the_peak_is_its_parts():
    deg = Degrees.of(t=2, p=4, d=4, b=1, v=1, m=8, zero=2, recompute=NONE)
    mem = tm.memory_breakdown(SH, deg)
    parts = sum(float(part) for part in (mem.params, mem.grads, mem.optimizer, mem.activations, mem.buffers))
    assert float(mem.total) == pytest.approx(parts)
    # ZeRO-2 under 1F1B: the stage's bf16 weights gathered, its fp32 gradients unsharded, 16 B/param of state over dp
    # the busiest rank is the first (its embeddings, its 4 micro-batches in flight); its parameters per TP rank:
    psi = (2 * SH.layer_params + SH.embedding_params) / 2
    first = mem
    assert float(first.params) == pytest.approx(4 * psi / 4 + 2 * psi)
    assert float(first.optimizer) == pytest.approx(8 * psi / 4) and float(first.grads) == pytest.approx(4 * psi)
    # the pipeline's receive buffers: one per micro-batch for the output's gradient (the first stage receives no input)
    assert float(first.buffers) == pytest.approx(CONTEXT_BYTES + 8 * 2 * 1 * 512 / 2 * 1024)
    # more micro-batches in flight never hold less
    fewer = tm.memory_breakdown(SH, Degrees.of(t=2, p=4, d=4, b=1, v=1, m=2, zero=2, recompute=NONE))
    assert float(fewer.activations) < float(first.activations)
    assert np.all(tm.memory_breakdown(SH, Degrees.of(t=2, p=4, d=4, b=1, v=1, m=8, zero=2, recompute=FULL)).activations
                  < first.activations)
