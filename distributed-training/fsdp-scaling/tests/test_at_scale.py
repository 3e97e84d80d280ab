"""The fake-process-group study at small size: real FSDP2 / DDP / ZeroRedundancyOptimizer code as
rank 0 of 8 ranks in this one process, measured against the memory and communication model."""

from dataclasses import replace

import pytest

import memory_model as mm
from at_scale import measure_one
from common.model import GPTConfig
from settings import cpu

CFG = GPTConfig(d_model=32, n_layers=2, n_heads=2, seq_len=16, vocab_size=64)
ADAMW = mm.precision_for("adamw")


def test_fake_pg_memory_and_comms_match_the_model():
    world, cfg = 8, replace(cpu(), node_size=4)
    rows = {s: measure_one(s, world, cfg, CFG) for s in ("ddp", "zero1", "zero2", "zero3", "hsdp")}
    psi = rows["ddp"]["n_params"]
    # DDP replicates everything: 16 bytes per parameter; one gradient bucket (the model is < 1 MiB)
    ddp = rows["ddp"]
    assert (ddp["param_bytes"], ddp["grad_bytes"], ddp["opt_bytes"]) == (4 * psi, 4 * psi, 8 * psi)
    assert (ddp["all_reduces"], ddp["broadcasts"]) == (1, 0)
    # ZeRO-3 divides all of it by the world size exactly (every dim of CFG divides 16), plus root + 1 block gathered
    z3 = rows["zero3"]
    assert z3["param_bytes"] + z3["grad_bytes"] + z3["opt_bytes"] == 16 * psi / world
    assert z3["unsharded_peak_bytes"] == z3["model_unsharded_bytes"] == mm.unsharded_peak("zero3", CFG, ADAMW)
    assert (z3["all_gathers"], z3["reduce_scatters"]) == (1 + 2 * CFG.n_layers, 1 + CFG.n_layers)
    # ZeRO-2 (no reshard after forward): the same bytes between steps, every unit gathered at its peak
    z2 = rows["zero2"]
    assert z2["param_bytes"] + z2["grad_bytes"] + z2["opt_bytes"] == 16 * psi / world
    assert z2["unsharded_peak_bytes"] == 4 * psi and z2["all_gathers"] == 1 + CFG.n_layers
    # ... which is not the paper's ZeRO-2 (replicated fp32 parameters), written beside it
    assert z2["paper_model_state_bytes"] == 4 * psi + 12 * psi / world
    assert z3["paper_model_state_bytes"] == z3["model_param_bytes"] + z3["model_grad_bytes"] + z3["model_opt_bytes"]
    # HSDP on (world/4) x 4: sharded over the node of 4, gradients all-reduced across nodes once per unit
    h = rows["hsdp"]
    assert (h["replicate"], h["shard"]) == (world // 4, 4)
    assert h["param_bytes"] + h["grad_bytes"] + h["opt_bytes"] == 16 * psi / 4 and h["all_reduces"] == 1 + CFG.n_layers
    # ZeRO-1: whole tensors per rank; the worst rank is what the sorted-greedy partition predicts
    z1 = rows["zero1"]
    assert z1["opt_bytes_worst_rank"] == 8 * mm.zero1_worst_rank_numel(mm.all_shapes(CFG), world)
    assert z1["broadcasts"] == len(mm.all_shapes(CFG))
    for s, r in rows.items():
        exact = r["param_bytes"] + r["grad_bytes"] + r["opt_bytes_worst_rank"]
        assert exact == r["exact_model_state_bytes"], s
        assert r["bus_bytes_per_rank"] == pytest.approx(r["model_bus_bytes_per_rank"]), s
        assert r["payload_bytes"] == r["model_payload_bytes"], s
        assert r["tracker_peak_bytes"] >= exact, s  # the tracker's peak includes what is held between steps
