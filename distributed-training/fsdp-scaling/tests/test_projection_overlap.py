"""The projection's cost model, the overlap arithmetic, the efficiency metric; and the GPU-only paths."""

import dataclasses

import pandas as pd
import pytest
import torch

import memory_model as mm
import overlap
import project
from common.collective_cost import Network, members_per_domain
from common.hardware import PRESETS
from common.model import GPTConfig, count_params
from planner.model import cluster, costs
from measured import efficiency
from report import weak_scaling_anchor

CFG = GPTConfig(d_model=32, n_layers=2, n_heads=2, seq_len=16, vocab_size=64)


def test_exposed_communication_by_hand():
    # compute 0-10 and 12-20; communication 8-14 and 19-25 -> comm 12, hidden 2 + 2 + 1, exposed 7
    comp, comm, hidden = overlap.exposed([(8, 14), (19, 25)], [(0, 10), (12, 20)])
    assert (comp, comm, hidden) == (18, 12, 7)
    assert overlap.union([(3, 5), (0, 1), (1, 2), (4, 9)]) == [(0, 2), (3, 9)]
    assert overlap.exposed([], [(0, 1)]) == (1, 0, 0)


TOY = Network(domain=4, intra_GBps=100.0, nic_GBps=10.0, alpha_step_us=2.0, alpha_level_us=5.0)


def test_step_communication_by_hand():
    prec, psi = mm.precision_for("adamw", 2), count_params(CFG)
    # DDP on 2 ranks in one node: one all-reduce of 4 Psi bytes; 2 ring steps; bus factor 2 (2-1)/2 = 1
    assert project.comm_time_s("ddp", CFG, 2, prec, TOY) == pytest.approx(2 * 2e-6 + 4 * psi / 100e9)
    # on 8 ranks = 2 nodes of 4: 2 x 3 ring steps in a node, 2 x 1 tree level across; one ring per NIC:
    # min(100, 4 x 10) = 40 GB/s
    want = (2 * 3 * 2 + 2 * 1 * 5) * 1e-6 + 4 * psi * 2 * 7 / 8 / 40e9
    assert project.comm_time_s("ddp", CFG, 8, prec, TOY) == pytest.approx(want)
    # HSDP on 8 = 2 x 4: (1 + L) reduce-scatters and 1 + 2L all-gathers inside the node, then (1 + L)
    # all-reduces of a quarter of the gradients with one GPU per node: one NIC each, one tree level.
    plan = {c["collective"]: c for c in mm.comm_plan("hsdp", CFG, 8, prec, mesh=(2, 4))}
    ar = plan["all_reduce"]
    want_ar = ar["count"] * 2 * 5e-6 + ar["payload_bytes"] * 1.0 / 10e9
    inside = sum(plan[k]["count"] * 3 * 2e-6 + plan[k]["payload_bytes"] * 0.75 / 100e9
                 for k in ("all_gather", "reduce_scatter"))
    assert project.comm_time_s("hsdp", CFG, 8, prec, TOY) == pytest.approx(want_ar + inside)


@pytest.mark.parametrize("gpu, n", [("h100", 8), ("h100", 64), ("a100", 1024), ("b200", 16)])
def test_projection_and_planner_price_the_same_collective_alike(gpu, n):
    # One network from the same table row, one cost model: DDP's gradient all-reduce (one bucket, 4 Psi bytes)
    # costs the same in the projection as the planner's ZeRO-0 data-parallel all-reduce.
    preset, prec = PRESETS[gpu], mm.precision_for("adamw", 2)
    net = project.table_network(preset, 8)
    cl = cluster.make_cluster(preset, n, gpus_per_node=8)
    assert dataclasses.replace(cl.net, source=net.source) == net
    ours = project.comm_time_s("ddp", CFG, n, prec, net)
    theirs = costs.dp_collectives(count_params(CFG), n, members_per_domain(n, 1, 8), prec.grad, cl.net).all_reduce
    assert ours == pytest.approx(float(theirs), rel=1e-12) and ours > 0


def test_projection_rows_and_bounds():
    p = PRESETS["h100"]
    t = project.planner_target(p, "tiny", CFG, seqs=4)
    rows = project.project(t, project.table_network(p, 8), (1, 8, 64))
    assert {r["efficiency_no_overlap"] for r in rows if r["n_gpus"] == 1} == {1.0}
    for r in rows:
        assert r["efficiency_no_overlap"] <= r["efficiency_full_overlap"] <= 1.0 + 1e-12
        assert "PLANNER's compute model" in r["compute_source"]
    # The planner's one-rank step, per strategy: ZeRO-3 gathers before forward and backward, ZeRO-2 once.
    assert t.per_seq_s[("zero3", "weak")] > t.per_seq_s[("zero2", "weak")] > 0


def test_projection_uses_the_measured_mfu_of_a_matching_run(tmp_path):
    # A one-rank H100 row of a model: the projection carries its measured step (its MFU) and says so, with the
    # file's hardware and commit; the file's name may carry the world size (scaling_h100_ws1.csv).
    row = {"strategy": "zero3", "mode": "weak", "model": "d128-L2-h4-T128-V256", "world_size": 1,
           "step_time_ms": 50.0, "effective_batch": 8, "hardware": "1x NVIDIA H100 80GB HBM3",
           "git_commit": "abc123"}
    pd.DataFrame([row]).to_csv(tmp_path / "scaling_h100_ws1.csv", index=False)
    (t,) = project.measured_targets(tmp_path / "scaling_h100_ws1.csv", 1024)
    assert t.name == "h100" and t.per_seq_s == {("zero3", "weak"): 0.05 / 8}
    assert "measured 1-rank steps (MFU" in t.compute_source and "commit abc123" in t.compute_source


def test_network_from_allreduce_bench_csvs(tmp_path, monkeypatch):
    # Exactly alpha-beta rows: 600 us + 1.5 S / 0.5 GB/s on 4 ranks. The planner's rule (the fit) recovers both.
    rows = [{"collective": "all_reduce", "size_bytes": s, "dtype": "fp32", "world_size": 4, "nnodes": 1,
             "backend": "gloo", "hardware": "cpu", "preset": "cpu", "time_us": 600.0 + 1.5 * s / 0.5e9 * 1e6}
            for s in (1024, 1 << 16, 1 << 20, 1 << 24)]
    pd.DataFrame(rows).to_csv(tmp_path / "sweep_cpu_ws4.csv", index=False)
    monkeypatch.setattr(project, "ALLREDUCE", tmp_path)
    net = project.measured_network("cpu", 8, None)
    assert net.intra_GBps == pytest.approx(0.5) and net.alpha_step_us == pytest.approx(600.0 / 6)  # 2 (4-1) steps
    assert net.domain == 8 and "4-rank all_reduce" in net.source
    assert project.measured_network("h100", 8, None) is None  # no rows for that preset, no fallback
    monkeypatch.setattr(project, "ALLREDUCE", tmp_path / "absent")
    assert project.measured_network("cpu", 8, None) is None


@pytest.mark.parametrize("no, full, verdict", [(0.99, 1.0, "keeps less of its per-GPU rate"),
                                               (0.96, 1.0, "lies between the projection's bounds"),
                                               (0.90, 0.95, "keeps more than either bound")])
def test_weak_scaling_anchor_reads_the_bounds(no, full, verdict):
    # torchtitan keeps 5605 / 5762 = 97.3% from 8 to 128 GPUs; the projection's bounds keep `no` and `full`.
    rows = [{"strategy": "zero3", "mode": "weak", "n_gpus": n, "efficiency_no_overlap": e,
             "efficiency_full_overlap": f} for n, e, f in ((8, 1.0, 1.0), (128, no, full))]
    text = "\n".join(weak_scaling_anchor(pd.DataFrame(rows)))
    assert "| 5,762 tok/s/GPU | 5,605 tok/s/GPU | 97.3% |" in text and verdict in text
    assert f"| E = 1.000 | E = {no:.3f} | {no:.1%} |" in text


def test_scaling_efficiency_definition():
    df = pd.DataFrame({"hardware": "x", "strategy": "ddp", "mode": "weak", "world_size": [1, 2, 4],
                       "tokens_per_s": [100.0, 180.0, 200.0]})
    assert efficiency(df)["efficiency"].tolist() == [1.0, 0.9, 0.5]


@pytest.mark.gpu
def test_gpu_profile_of_a_bf16_fsdp_step():
    """On one GPU: FSDP2 with bf16 MixedPrecisionPolicy trains, and the profile yields compute time."""
    import torch.distributed as dist

    from common.dist import distributed
    from strategies import Trainer

    with distributed(device="cuda") as env:
        tr = Trainer("zero3", CFG, env.device, param_dtype=torch.bfloat16, prefetch=True)
        x = torch.randint(0, CFG.vocab_size, (4, CFG.seq_len + 1))
        stats = overlap.profile_trainer(tr, lambda i: [(x[:, :-1], x[:, 1:])], steps=2, warmup=1)
        assert stats["compute_ms"] > 0 and stats["exposed_comm_ms"] <= stats["comm_ms"] + 1e-9
        assert dist.get_world_size() == 1
