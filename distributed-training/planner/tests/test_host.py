"""The host-paced step (host.py): launches counted by hand, the host's time, and the step as the larger of the two."""

import csv
import statistics
from pathlib import Path

import pytest

from planner.model.calibration import FITTED
from planner.model.compute import Kernels, Rates
from planner.model.costs import step_costs
from planner.model.degrees import Degrees
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


def test_a_step_is_the_larger_of_the_gpu_and_the_host():
    cl = toy_cluster()
    # A small model at high TP: the GPU's work shrinks with t, the host's does not.
    small = Shape(layers=4, hidden=256, heads=8, kv_heads=8, vocab=1000, seq=256, ffn=1024)
    out = step_costs(small, cl, Degrees.of(t=8, m=4))
    assert float(out.host_s) > float(out.gpu_step_s) and float(out.step_s) == float(out.host_s)
    compiled = step_costs(small, cl, Degrees.of(t=8, m=4), kernels=Kernels(host="compiled"))
    assert float(compiled.host_s) < float(out.host_s)  # kernels at 4 us, collectives still through c10d
    # A large one: the GPU paces, the host's time is hidden in the queue.
    big = Shape(layers=4, hidden=8192, heads=64, kv_heads=64, vocab=1000, seq=4096, ffn=32768)
    out = step_costs(big, cl, Degrees.of(t=1, b=2, m=4))
    assert float(out.host_s) < float(out.gpu_step_s) == float(out.step_s)


def test_the_collective_host_cost_is_the_measured_one():
    # allreduce-bench's overhead benchmark on one H100: back-to-back in-place all_reduce on one rank moves no byte, so
    # its bare loop's time per call is what c10d and NCCL cost the host; the constant is that CSV's median (1-32 MiB).
    path = Path(__file__).resolve().parents[2] / "allreduce-bench" / "results" / "overhead_h100_ws1.csv"
    rows = [r for r in csv.DictReader(open(path, newline=""))
            if r["collective"] == "all_reduce" and int(r["size_bytes"]) <= 32 * 2**20]
    assert len(rows) >= 5 and r"1x NVIDIA H100" in rows[0]["hardware"]
    assert COLLECTIVE_HOST_US["eager"] == pytest.approx(statistics.median(float(r["bare_us"]) for r in rows), abs=0.05)
    assert COLLECTIVE_HOST_US["graphs"] == 0.0
