"""The projection's cost model, the overlap arithmetic, the efficiency metric; and the GPU-only paths."""

import pandas as pd
import pytest
import torch

import memory_model as mm
import overlap
import project
from common.hardware import PRESETS
from common.model import GPTConfig, count_params
from report import efficiency

CFG = GPTConfig(d_model=32, n_layers=2, n_heads=2, seq_len=16, vocab_size=64)


def test_exposed_communication_by_hand():
    # compute 0-10 and 12-20; communication 8-14 and 19-25 -> comm 12, hidden 2 + 2 + 1, exposed 7
    comp, comm, hidden = overlap.exposed([(8, 14), (19, 25)], [(0, 10), (12, 20)])
    assert (comp, comm, hidden) == (18, 12, 7)
    assert overlap.union([(3, 5), (0, 1), (1, 2), (4, 9)]) == [(0, 2), (3, 9)]
    assert overlap.exposed([], [(0, 1)]) == (1, 0, 0)


def test_ring_cost_by_hand():
    links = project.Links(intra_GBps=100.0, inter_GBps=10.0, hop_intra_us=2.0, hop_inter_us=5.0, base_us=1.0,
                          node_size=4, source="test")
    prec, psi = mm.precision_for("adamw", 2), count_params(CFG)
    # DDP on 2 ranks in one node: one all-reduce of 4 Psi bytes; 2 ring steps; bus factor 2 (2-1)/2 = 1
    assert project.comm_time_s("ddp", CFG, 2, prec, links) == pytest.approx((1 + 2 * 2) * 1e-6 + 4 * psi / 100e9)
    # on 8 ranks = 2 nodes: 14 ring steps, 2 of them across the network, the network's bandwidth
    want = (1 + 12 * 2 + 2 * 5) * 1e-6 + 4 * psi * 2 * 7 / 8 / 10e9
    assert project.comm_time_s("ddp", CFG, 8, prec, links) == pytest.approx(want)


def test_projection_rows_and_bounds():
    p = PRESETS["h100"]
    t = project.assumed_target(p, "tiny", CFG, seqs=4)
    rows = project.project(t, project.table_links(p, 8), (1, 8, 64))
    assert {r["efficiency_no_overlap"] for r in rows if r["n_gpus"] == 1} == {1.0}
    for r in rows:
        assert r["efficiency_no_overlap"] <= r["efficiency_full_overlap"] <= 1.0 + 1e-12
        assert "ASSUMED MFU" in r["compute_source"]


def test_bandwidth_from_allreduce_bench_csvs(tmp_path, monkeypatch):
    rows = [{"collective": "all_reduce", "size_bytes": s, "dtype": "fp32", "world_size": 4, "nnodes": 1,
             "backend": "gloo", "hardware": "cpu", "preset": "cpu", "time_us": t, "algbw_GBps": 0.0, "busbw_GBps": b}
            for s, t, b in ((1024, 600.0, 0.001), (1 << 24, 50000.0, 0.5))]
    pd.DataFrame(rows).to_csv(tmp_path / "sweep_cpu_ws4.csv", index=False)
    monkeypatch.setattr(project, "ALLREDUCE", tmp_path)
    links = project.measured_links("cpu", 10**6, None)
    assert links.intra_GBps == 0.5 and links.hop_intra_us == pytest.approx(600.0 / 6)  # 2 (4-1) ring steps
    assert project.measured_links("h100", 8, None) is None  # no rows for that preset, no fallback
    monkeypatch.setattr(project, "ALLREDUCE", tmp_path / "absent")
    assert project.measured_links("cpu", 10**6, None) is None


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
