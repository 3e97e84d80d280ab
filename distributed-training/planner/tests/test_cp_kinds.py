"""The three context-parallel designs priced (cp_kinds.py): their bytes as collectives by hand, what hides, the choice
and its reasons, and `make plan`'s --cp-kind down to the command it prints."""

import json

import numpy as np
import pytest

from common.collective_cost import Network, collective_time_s
from planner import plan
from planner.model.cp_kinds import CP_KINDS, cp_times, design_times
from planner.model.shapes import Shape

NET = Network(domain=8, intra_GBps=100.0, nic_GBps=10.0, alpha_step_us=1.0, alpha_level_us=10.0)
MHA = Shape(layers=4, hidden=1024, heads=16, kv_heads=16, vocab=1000, seq=8192, ffn=4096)
GQA = Shape(layers=4, hidden=1024, heads=16, kv_heads=2, vocab=1000, seq=8192, ffn=4096)


def test_each_design_prices_its_bytes_as_its_collectives():
    t, c, b, e = 1, 4, 1, 2.0
    block = 2 * b * (MHA.seq // c) * MHA.kv_heads * MHA.head_dim  # K/V elements one rank holds
    # the ring: 3 hops of the block forward; backward 3 hops of the block plus its fp32 accumulator (one send each)
    hop_f = collective_time_s("send_recv", block * e, 2, 2, NET)
    hop_b = collective_time_s("send_recv", block * (e + 4), 2, 2, NET)
    comm, exposed = design_times("ring", MHA, t, c, b, 0.0, 0, 8, NET, e)
    assert comm == pytest.approx(3 * hop_f + 3 * hop_b) and exposed == pytest.approx(comm)  # nothing to hide behind
    # the all-gather: nccl-tests' S is the gathered K/V (c blocks), and the reduce-scatter's the fp32 whole sequence
    gather = collective_time_s("all_gather", c * block * e, c, 4, NET)
    scatter = collective_time_s("reduce_scatter", c * block * 4, c, 4, NET)
    comm, _ = design_times("allgather", MHA, t, c, b, 0.0, 0, 8, NET, e)
    assert comm == pytest.approx(2 * gather + scatter)
    # Ulysses: per pass an all-to-all of q, k, v (48 heads of this rank's s/c tokens) and one of the output (16)
    per_head = b * (MHA.seq // c) * MHA.head_dim * e
    a2a = collective_time_s("all_to_all", 48 * per_head, c, 4, NET) + collective_time_s("all_to_all", 16 * per_head,
                                                                                         c, 4, NET)
    comm, exposed = design_times("ulysses", MHA, t, c, b, 1.0, 1, 8, NET, e)  # full recompute: the forward twice
    assert comm == pytest.approx(3 * a2a) and exposed == pytest.approx(comm)  # never hidden, however long attention


def test_what_hides_and_what_is_chosen():
    t, c = np.array([1, 1, 8]), np.array([4, 4, 4])
    slow = np.array([1.0, 0.0, 1.0])  # seconds of attention per layer: plenty, none, plenty
    auto = cp_times("auto", GQA, t, c, 1, slow, 0, 8, NET)
    ring = cp_times("ring", GQA, t, c, 1, slow, 0, 8, NET)
    assert ring.exposed_s[0] == 0 and ring.exposed_s[1] == pytest.approx(ring.comm_s[1])  # hidden behind attention
    assert CP_KINDS[auto.kind[0]] == "ring"  # all hidden: the ring, the fewest seconds on the wire among equals
    assert (auto.exposed_s <= ring.exposed_s).all()
    # GQA 16/2: at TP 8 two query heads and a quarter K/V head per rank: Ulysses cannot run at CP 4
    assert CP_KINDS[auto.kind[2]] != "ulysses" and np.isinf(cp_times("ulysses", GQA, t, c, 1, slow, 0, 8, NET).exposed_s[2])
    # MHA without attention to hide behind: Ulysses' bytes fall with N, so it wins at CP 4 (2e/(N(e+2)) of the ring's)
    mha = cp_times("auto", MHA, 1, 4, 1, 0.0, 0, 8, NET)
    assert CP_KINDS[int(mha.kind)] == "ulysses"
    at_one = cp_times("auto", MHA, 1, 1, 1, 1.0, 0, 8, NET)
    assert at_one.comm_s == 0 and at_one.exposed_s == 0


def _plan(capsys, *argv):
    assert plan.main(list(argv)) == 0
    return capsys.readouterr().out


def test_the_plan_says_why_and_prints_the_command_of_its_design(capsys):
    base = ["--layers", "24", "--hidden", "2048", "--heads", "16", "--gpus", "16", "--seq", "65536", "--cp", "4",
            "--top", "1"]
    out = _plan(capsys, *base)
    why = next(line for line in out.splitlines() if "CP 4 runs" in line)
    chosen = why.split("CP 4 runs ")[1].split()[0]
    assert chosen in CP_KINDS and f"--cp-kind={chosen}" in out and all(k in why for k in CP_KINDS)
    pinned = _plan(capsys, *base, "--cp-kind", "allgather", "--json")
    rep = json.loads(pinned)
    assert rep["best"]["cp_kind"] == "allgather" and "--cp-kind=allgather" in rep["run"]["torchrun"]
    assert set(rep["cp_choice"]["priced"]) == set(CP_KINDS) and rep["cp_choice"]["design"] == "allgather"


def test_ulysses_pinned_where_heads_do_not_divide_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        plan.main(["--layers", "24", "--hidden", "2048", "--heads", "16", "--kv-heads", "2", "--gpus", "16", "--seq",
                   "65536", "--cp", "4", "--tp", "1", "--cp-kind", "ulysses"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Ulysses needs heads/tp and kv-heads/tp (16/1, 2/1) divisible by cp" in err
    assert len(err.strip().splitlines()) == 1
