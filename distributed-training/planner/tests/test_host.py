"""The host's side of a step (host.py, floor.py): launches and the framework's floor counted by hand, the host's time,
and host and GPU serialised per synchronisation interval (costs.py)."""

import csv
import statistics
from pathlib import Path

import pytest

from planner.model.calibration import FITTED
from planner.model.compute import Kernels, Rates
from planner.model.costs import accumulate_s, phase_s, step_costs
from planner.model.degrees import FULL, NONE, Degrees
from planner.model.floor import (MEGATRON_FORWARD, SOFTMAX_FALLBACK_OPS, HostCosts, layer_host_s, megatron_floor,
                                 pytorch_floor)
from planner.model.host import COLLECTIVE_HOST_US, HOST_US, host_time, host_us, layer_collectives, step_launches
from planner.model.shapes import Shape
from planner.tests.test_costs import toy_cluster

SH = Shape(layers=4, hidden=1024, heads=8, kv_heads=8, vocab=1000, seq=512, ffn=4096)
R = Rates(matmul=100e12, bf16_matmul=100e12, attention=50e12, hbm=1e12, sms=132, consts=FITTED)


def test_launches_by_hand():
    # Fused stack, t = 1: a layer launches 10 kernels forward and 13 backward (test_compute's count); the embedding 2
    # (gather, scatter of its gradient), the LM head 1 + 2 GEMMs and Megatron's loss 11 (compute.LOSS_PASSES);
    # Megatron's Adam 4 and the clip 2.
    ker = Kernels()
    deg = Degrees.of(m=3)
    one = step_launches(SH, deg, ker, R, 4, 0.0)
    assert (float(one.kernels), float(one.collectives)) == (3 * (4 * 23 + 2 + 14) + 4 + 2, 0)  # 330
    # TP 2 with SP: each of the layer's 4 all-reduce-equivalents is an all-gather and a reduce-scatter, 8 calls per
    # layer, and Megatron's SP gathers the two column-parallel inputs again in the backward (regather): 10. The
    # kernels stay (TP shrinks them, it does not remove them).
    tp = Degrees.of(t=2, m=3)
    assert float(layer_collectives(tp, ker)) == 8 and float(layer_collectives(tp, ker, regather=1.0)) == 10
    two = step_launches(SH, tp, ker, R, 4, 0.0, regather=1.0)
    assert (float(two.kernels), float(two.collectives)) == (330, 3 * 4 * 10)
    # ZeRO-3: FSDP gathers each layer twice and reduce-scatters it once per micro-batch; a pipeline sends 2 per chunk.
    assert float(layer_collectives(Degrees.of(d=8, zero=3), ker)) == 3
    pp = step_launches(SH, Degrees.of(p=2, v=2, m=4), ker, R, 2, 5.0)
    assert (float(pp.kernels), float(pp.collectives)) == (4 * (2 * 23 + 14) + 6, 4 * 4 + 5)
    # The host's time: kernels x the runtime's cost per launch, collectives x c10d's cost per call (17.8 us).
    assert float(host_time(two, ker)) == pytest.approx((330 * HOST_US["eager"] + 120 * 17.8) * 1e-6)
    assert float(host_time(two, Kernels(host="graphs"))) == 0.0
    with pytest.raises(ValueError, match="unknown host runtime 'jit'"):
        host_us("jit")


def test_the_flow_shop_by_hand():
    # One phase of n segments: the GPU starts a segment once the host has issued it. Host-bound (h > g): the host's
    # time and the last segment's GPU work; GPU-bound: the first segment's host work and the GPU's time.
    assert float(phase_s(4.0, 2.0, 4)) == pytest.approx(4.0 + 2.0 / 4)
    assert float(phase_s(2.0, 4.0, 4)) == pytest.approx(2.0 / 4 + 4.0)
    assert float(phase_s(0.0, 4.0, 4)) == 4.0 and float(phase_s(3.0, 0.0, 4)) == 3.0
    # Two micro-batches, a host-bound forward and a GPU-bound backward (one segment each): the GPU idles in each
    # forward and the host cannot give it back later: hf + gb + (m-1)(gf + gb) + go vs the host's total + the
    # optimizer's GPU work, whichever is longer (Johnson's rule over every split point).
    hf, gf, hb, gb, m, ho, go = 3.0, 1.0, 1.0, 3.0, 2, 0.5, 0.5
    want = max(hf + gb + (m - 1) * (gf + gb) + go, (m - 1) * (hf + hb) + hf + gb + go, m * (hf + hb) + ho + go,
               hf + hb + (m - 1) * (gf + gb) + go, (m - 1) * (hf + hb) + hf + hb + gb + go)
    assert float(accumulate_s(hf, gf, hb, gb, 1, m, ho, go)) == pytest.approx(want)
    assert want > max(m * (hf + hb) + ho, m * (gf + gb) + go)  # more than max(host, GPU) over the step


def test_a_step_serialises_host_and_gpu_per_interval():
    cl = toy_cluster()
    # A small model at high TP: the GPU's work shrinks with t, the host's does not; the step is at least the host's
    # time and at most the sum of both.
    small = Shape(layers=4, hidden=256, heads=8, kv_heads=8, vocab=1000, seq=256, ffn=1024)
    out = step_costs(small, cl, Degrees.of(t=8, m=4))
    assert float(out.host_s) > float(out.gpu_step_s)
    assert float(out.host_s) <= float(out.step_s) <= float(out.host_s) + float(out.gpu_step_s)
    compiled = step_costs(small, cl, Degrees.of(t=8, m=4), kernels=Kernels(host="compiled"))
    assert float(compiled.host_s) < float(out.host_s)  # kernels at 4 us, not the framework's counted ops
    # A large one: the GPU paces; the host adds at most its first segment's work to the GPU's time.
    big = Shape(layers=4, hidden=8192, heads=64, kv_heads=64, vocab=1000, seq=4096, ffn=32768)
    out = step_costs(big, cl, Degrees.of(t=1, b=2, m=4))
    assert float(out.host_s) < float(out.gpu_step_s) <= float(out.step_s) < 1.01 * float(out.gpu_step_s)
    # A pipeline synchronises at every send (Megatron's batch_p2p_sync): each phase is its own interval, so a
    # host-bound pipeline's critical path runs on host time, (m + p - 1) micro-batch slots of it.
    piped = step_costs(small, cl, Degrees.of(t=1, p=4, m=8))
    per_mb = float(piped.host_s) / 8
    assert float(piped.step_s) >= (8 + 4 - 1) * per_mb * 0.99


def test_the_framework_floor_is_counted():
    # Megatron's layer, counted from its code (floor.py's table): 48 calls forward, as many backward, the forward
    # again and 8 more (the checkpoint's RNG save/restore, detach, backward) under full recompute.
    assert MEGATRON_FORWARD == 2 * 2 + 4 * 3 + 4 + 16 + 3 * 2 + 6 == 48
    fl = megatron_floor(FULL)
    assert float(fl.per_layer.ops) == 96 and float(fl.recompute.ops) == 56
    assert float(megatron_floor(FULL, fused_softmax=False).per_layer.ops) == 96 + SOFTMAX_FALLBACK_OPS
    # parallel-3d's, counted by parallel-3d/host_ops.py (its test recounts PYTORCH_OPS): a plain block's forward is 39
    # aten ops and its backward 73; FSDP2 ZeRO-3 adds its copies and two unshard events per unit and micro-batch.
    plain = pytorch_floor("fp32", 1, 0, NONE)
    assert (float(plain.per_layer.ops), float(plain.per_layer.backward)) == (112, 73)
    z3 = pytorch_floor("bf16", 1, 3, NONE)
    assert float(z3.fsdp_events) == 2 and float(pytorch_floor("bf16", 1, 2, NONE).fsdp_events) == 1
    # Priced: ops x the cost per op, the events at theirs; the backward's share of the ops by the count.
    costs = HostCosts(10e-6, 50e-6, 5e-6, 1e-3, 17.8e-6, "test")
    f, b, rec = layer_host_s(plain, costs)
    assert float(f + b) == pytest.approx(112 * 10e-6) and float(b) == pytest.approx(73 * 10e-6)
    f3, b3, _ = layer_host_s(z3, costs)
    assert float(f3 + b3) == pytest.approx(float(z3.per_layer.ops) * 10e-6 + 2e-3)
    tp = pytorch_floor("fp32", 2, 0, NONE)
    assert float(sum(layer_host_s(tp, costs)[:2])) == pytest.approx(74 * 10e-6 + 86 * 50e-6)


def test_the_collective_host_cost_is_the_measured_one():
    # allreduce-bench's overhead benchmark on one H100: back-to-back in-place all_reduce on one rank moves no byte, so
    # its bare loop's time per call is what c10d and NCCL cost the host; the constant is that CSV's median (1-32 MiB).
    path = Path(__file__).resolve().parents[2] / "allreduce-bench" / "results" / "overhead_h100_ws1.csv"
    rows = [r for r in csv.DictReader(open(path, newline=""))
            if r["collective"] == "all_reduce" and int(r["size_bytes"]) <= 32 * 2**20]
    assert len(rows) >= 5 and r"1x NVIDIA H100" in rows[0]["hardware"]
    assert COLLECTIVE_HOST_US["eager"] == pytest.approx(statistics.median(float(r["bare_us"]) for r in rows), abs=0.05)
    assert COLLECTIVE_HOST_US["graphs"] == 0.0
