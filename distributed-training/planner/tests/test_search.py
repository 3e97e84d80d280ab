"""The search never returns a configuration that does not fit or does not divide; pins hold; calibration."""

import re
from pathlib import Path

import numpy as np
import pytest

from common.hardware import get_preset
from planner.calibrate.network import calibrate_from_sweeps
from planner.model.cluster import make_cluster
from planner.model.memory import usable_bytes
from planner.model.shapes import Shape, standard_shape
from planner.search.choose import NEAR_TIE
from planner.search.records import Plan
from planner.search.search import BATCH_TOLERANCE, Pins, Structures, Workload, evaluate, search

FIXTURE = Path(__file__).parent / "fixtures" / "sweep_fixture.csv"
SHAPES = {"gqa-odd": Shape(layers=12, hidden=1536, heads=12, kv_heads=4, vocab=32000, seq=2048, ffn=6144),
          "13B": standard_shape(13e9, 51200, 4096), "70B": standard_shape(70e9, 51200, 4096)}
GRID = [("gqa-odd", "a100-40gb", 24, 48, 8, Pins()), ("gqa-odd", "h100", 64, 256, 8, Pins(tp=4)),
        ("13B", "a100", 96, 192, 8, Pins()), ("13B", "h200", 64, 64, 1, Pins(zero=3)),
        ("70B", "h100", 512, 256, 8, Pins()), ("70B", "gb200", 576, 576, 72, Pins(pp=4, recompute="full")),
        ("70B", "b200", 128, 128, 8, Pins(cp=2, microbatch=1)), ("70B", "h100", 32, 32, 8, Pins())]


def check_divides_and_fits(w: Workload, cl, c: Plan, pins: Pins) -> None:
    sh = w.shape
    t, p, d, cp, b, v, m = c.tp, c.pp, c.dp, c.cp, c.microbatch, c.interleave, c.num_microbatches
    assert sh.heads % t == 0 and sh.kv_heads % t == 0 and p <= sh.layers
    assert t * p * d * cp == cl.gpus and c.global_batch == d * b * m
    assert abs(c.global_batch - w.global_batch) <= BATCH_TOLERANCE * w.global_batch
    assert v == 1 or (p > 1 and m % p == 0)
    assert cp == 1 or sh.seq % (2 * cp) == 0
    layers = [int(x) for x in re.split(r"[+x]", c.layers_per_stage)]
    if p == 1:
        assert layers == [sh.layers]
    elif p == 2:
        assert sum(layers) == sh.layers
    elif "x" in c.layers_per_stage and len(layers) == 2:  # "8x16": every stage equal
        assert layers[0] * layers[1] == sh.layers
    else:  # first + busiest middle x (p-2) + last: the middle stages hold the rest, the busiest ceil of it
        first, mid, _, last = layers
        assert (p - 2) * (mid - 1) < sh.layers - first - last <= (p - 2) * mid
    if v > 1:  # interleaved: equal middle stages of a multiple of v, the ends one short of a multiple at most
        ends = (layers[0], layers[-1]) if p > 1 and len(layers) != 2 or p == 2 else (layers[0], layers[0])
        middle = layers[0] if "x" in c.layers_per_stage and len(layers) == 2 else layers[1] if p > 2 else None
        assert middle is None or middle % v == 0
        assert all(n >= v - 1 and (n + 1) % v <= 1 for n in ends)
    assert c.memory_gb.total <= usable_bytes(cl.memory_gb) / 1e9 + 1e-6
    mem = c.memory_gb
    parts = mem.params + mem.grads + mem.optimizer + mem.activations + mem.buffers
    assert parts == pytest.approx(mem.total, abs=0.01)
    assert (c.bubble_s == 0) == (p == 1) and c.bubble_fraction >= 0 and c.bubble_s < c.step_s
    for dim in ("tp", "pp", "dp", "cp", "zero", "microbatch", "interleave", "recompute"):
        pinned = getattr(pins, dim)
        assert pinned is None or getattr(c, dim) == pinned
    assert 0 < c.mfu <= c.hfu < 1


@pytest.mark.parametrize("name, gpu, gpus, batch, domain, pins", GRID)
def test_every_candidate_divides_and_fits(name, gpu, gpus, batch, domain, pins):
    w = Workload(SHAPES[name], batch)
    cl = make_cluster(get_preset(gpu), gpus, gpus_per_node=domain)
    res = search(w, cl, pins, top=1000, max_rejected=1000)
    assert res.candidates, "every grid point has a plan"
    # The chosen plan first, within NEAR_TIE of the fastest; the rest by throughput.
    rates = [c.tokens_per_s for c in res.candidates[1:]]
    assert rates == sorted(rates, reverse=True) and res.best is res.candidates[0]
    assert res.best.tokens_per_s >= (1 - NEAR_TIE) * max(rates + [res.best.tokens_per_s])
    for c in res.candidates:
        check_divides_and_fits(w, cl, c, pins)
    for r in res.rejected:
        assert r.reason
    # The best plan priced on its own (every dimension pinned) costs exactly what the search said.
    b = res.best
    alone = search(w, cl, Pins(b.tp, b.pp, b.dp, b.cp, b.zero, b.microbatch, b.interleave,
                               b.recompute), top=1).best
    assert alone.step_s == b.step_s and alone.memory_gb == b.memory_gb


def test_nothing_fits_is_reported_with_reasons():
    w = Workload(standard_shape(405e9, 51200, 4096), 64)
    res = search(w, make_cluster(get_preset("a100-40gb"), 16), top=5)
    assert res.best is None and res.candidates == []
    assert res.rejected and all("does not fit" in r.reason for r in res.rejected[:3])
    need = [float(r.reason.split("needs ")[1].split(" GB")[0]) for r in res.rejected if "needs" in r.reason]
    assert need == sorted(need) and need[0] > 0.9 * 40


def test_evaluate_is_elementwise():
    # Vectorised evaluation of many configurations equals evaluating each on its own.
    w = Workload(SHAPES["13B"], 128)
    cl = make_cluster(get_preset("h100"), 64)
    s = Structures(t=np.array([1, 2, 4, 8]), p=np.array([1, 2, 4, 1]), c=np.array([1, 1, 2, 1]),
                   d=np.array([64, 16, 2, 8]), b=np.array([2, 1, 4, 2]), v=np.array([1, 2, 1, 1]),
                   m=np.array([1, 8, 16, 8]), B=np.array([128, 128, 128, 128]))
    zero, rec = np.array([3, 1, 0, 2]), np.array([0, 2, 1, 0])
    many = evaluate(w, cl, s, zero, rec)
    for i in range(4):
        one = evaluate(w, cl, Structures._make(a[i:i + 1] for a in s), zero[i:i + 1], rec[i:i + 1])
        assert one.costs.step_s[0] == many.costs.step_s[i]
        assert one.memory.total[0] == many.memory.total[i]


def test_calibration_from_an_allreduce_bench_csv():
    # The fixture's 8-rank and 16-rank (2 nodes) all_reduce rows are exactly alpha-beta: 8 ranks at 20 us +
    # 1.75 S / 350 GB/s, 16 ranks at 100 us + 1.875 S / 320 GB/s. The one rule (common/collective_fit.py)
    # fits them: in-domain B 350, alpha / 14 steps; across, B / 8 per NIC and (100 - 14 x alpha_step) / 2.
    cl = calibrate_from_sweeps(make_cluster(get_preset("h100"), 64), [str(FIXTURE)])
    assert cl.net.intra_GBps == pytest.approx(350.0) and cl.net.alpha_step_us == pytest.approx(20 / 14)
    assert cl.net.nic_GBps == pytest.approx(320.0 / 8) and cl.net.alpha_level_us == pytest.approx(40.0)
    assert len(cl.notes) == 2 and cl.net.source == "allreduce-bench sweeps"
    with pytest.raises(ValueError, match="no such file"):
        calibrate_from_sweeps(cl, ["missing.csv"])


@pytest.mark.parametrize("stack", ["megatron", "pytorch"])
def test_fewer_micro_batches_than_stages_are_planned(stack):
    """Issue 29 part 5: a pipeline with m < p is priced, not refused: bubble (p-1)/(m+p-1) of the pipeline's time,
    the first stage holding all m micro-batches; a larger batch (more micro-batches) is faster per token."""
    from planner.model.stacks import STACKS

    sh, cl = SHAPES["13B"], make_cluster(get_preset("h100"), 64)
    pins = Pins(tp=8, pp=4, microbatch=1, interleave=1, zero=3, recompute="full")
    few = search(Workload.of(STACKS[stack], sh, 4), cl, pins).best  # dp 2: 2 micro-batches on 4 stages
    many = search(Workload.of(STACKS[stack], sh, 32), cl, pins).best  # 16 micro-batches
    assert few.num_microbatches == 2 < few.pp == 4 and many.num_microbatches == 16
    assert few.bubble_fraction == pytest.approx(3 / 5, rel=0.1)
    assert many.bubble_fraction == pytest.approx(3 / 19, rel=0.1)
    assert few.tokens_per_s_per_gpu < many.tokens_per_s_per_gpu


@pytest.mark.parametrize("name, gpus, batch, pins", [("70B", 512, 512, Pins()), ("gqa-odd", 64, 256, Pins(cp=2))])
def test_the_pytorch_stack_plans_only_what_parallel_3d_runs(name, gpus, batch, pins):
    """Every candidate of the pytorch stack divides and fits, with an FSDP2 mode (ZeRO-2/3) and a recompute setting
    parallel-3d has (its selective policy is the planner's `op`; none or full with CP)."""
    from planner.model.stacks import PYTORCH

    w = Workload.of(PYTORCH, SHAPES[name], batch)
    cl = make_cluster(get_preset("h100"), gpus)
    res = search(w, cl, pins, top=200, max_rejected=10)
    assert res.candidates
    for c in res.candidates:
        check_divides_and_fits(w, cl, c, pins)
        assert c.zero in (2, 3) and c.recompute in PYTORCH.recompute
        assert c.cp == 1 or c.recompute in PYTORCH.cp_recompute
