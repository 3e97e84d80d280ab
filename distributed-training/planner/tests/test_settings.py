"""Issue 38's settings that decide the regime: a named size is its published model (GQA and FFN included) and
--kv-heads/--ffn are used with it; memory is priced as the allocator sees it (--memory-headroom); PyTorch's DDP and
ZeroRedundancyOptimizer are priced (ZeRO-0/1, one GPU too); TE's userbuffer TP overlap (--tp-comm-overlap) with FP8
all-gathers; the even L/p pipeline split of older Megatron (--pipeline-split even). In process."""

import json

import pytest

from planner import plan
from planner.model import costs
from planner.model.cluster import make_cluster
from planner.model.compute import Kernels
from planner.model.degrees import NONE, Degrees
from planner.model.memory import CAPACITY_PER_GB, usable_bytes
from planner.model.shapes import NAMED, model_shape
from planner.model.stacks import PYTORCH
from planner.model.torch_memory import memory_breakdown
from common.hardware import get_preset

# Parameter counts the model cards and papers print (the planner's GPT adds its learned position table, seq x h).
PUBLISHED = {"7B": 6.74e9, "8B": 8.03e9, "13B": 13.0e9, "70B": 70.6e9, "175B": 175e9, "405B": 405.9e9, "1T": 1008e9}


def cli(capsys, *argv) -> dict:
    assert plan.main([*argv, "--json", "--top", "1"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_named_size_is_its_published_model():
    assert set(NAMED) == set(PUBLISHED)
    for size, count in PUBLISHED.items():
        shape = model_shape(size, 2048)
        assert shape.params == pytest.approx(count, rel=0.01), size
    llama8 = model_shape("8B", 4096)
    assert (llama8.layers, llama8.hidden, llama8.heads, llama8.kv_heads, llama8.vocab) == (32, 4096, 32, 8, 128256)
    assert llama8.ffn == 14336 * 3 // 2  # SwiGLU 14,336 planned as a two-matrix MLP of 1.5 x 14,336
    assert model_shape("405B", 8192).kv_heads == 8 and model_shape("7B", 4096).kv_heads == 32  # Llama 2 7B: no GQA
    assert model_shape("30B", 4096).kv_heads == model_shape("30B", 4096).heads  # not a named size: a standard shape


def test_plan_8b_has_8_kv_heads_and_a_given_kv_heads_is_used(capsys):
    out = cli(capsys, "--params", "8B", "--gpus", "8")
    assert out["model"]["kv_heads"] == 8 and out["model"]["name"] == "Llama 3.1 8B" and out["model"]["ffn"] == 21504
    assert cli(capsys, "--params", "8B", "--gpus", "8", "--kv-heads", "4")["model"]["kv_heads"] == 4
    assert cli(capsys, "--params", "30B", "--gpus", "8", "--kv-heads", "8")["model"]["kv_heads"] == 8
    assert cli(capsys, "--params", "8B", "--gpus", "8", "--ffn", "16384", "--vocab", "32000")["model"]["ffn"] == 16384
    assert plan.main(["--params", "8B", "--gpus", "8", "--top", "1"]) == 0
    assert "Llama 3.1 8B" in capsys.readouterr().out.splitlines()[1]  # the model line names the model and source


def test_one_gpu_ddp_is_priced_with_pytorchs_bytes(capsys):
    out = cli(capsys, "--params", "1B", "--gpus", "1", "--zero", "0")
    best, params = out["best"], out["model"]["params"]
    assert (best["zero"], best["dp"], best["recompute"]) == (0, 1, "none")
    mem = best["memory_gb"]  # fp32 weights + autocast's bf16 copy, fp32 gradients, AdamW's two fp32 moments
    assert mem["params"] == pytest.approx(6 * params / 1e9, abs=2e-3)
    assert mem["grads"] == pytest.approx(4 * params / 1e9, abs=2e-3)
    assert mem["optimizer"] == pytest.approx(8 * params / 1e9, abs=2e-3)
    assert "as --zero 2" in out["stack"]["headline"]  # parallel-3d runs FSDP2: the command says it is not DDP


def test_zero1_shards_only_adams_moments_and_broadcasts_after_the_step():
    shape = model_shape("1B", 4096)
    deg = lambda zero: Degrees.of(d=8, b=1, m=4, zero=zero, recompute=NONE)  # noqa: E731
    ddp, z1 = memory_breakdown(shape, deg(0)), memory_breakdown(shape, deg(1))
    assert float(z1.optimizer) == pytest.approx(float(ddp.optimizer) / 8) and float(z1.params) == float(ddp.params)
    cl = make_cluster(get_preset("h100"), 8)
    t0, t1 = (costs.step_costs(shape, cl, deg(z), grad_bytes=4.0, kernels=Kernels(fused=False, attention="fa2"),
                               tp_overlap=False, dp_schedule=PYTORCH.dp_schedule) for z in (0, 1))
    assert float(t0.dp_comm_s) > 0 and float(t1.dp_comm_s) > float(t0.dp_comm_s)  # the broadcast of fp32 weights
    assert float(t1.dp_comm_s - t1.dp_hidden_s) > float(t0.dp_comm_s - t0.dp_hidden_s)  # after backward: exposed


def test_usable_memory_is_the_allocators_and_the_headroom_moves_it(capsys):
    # 79.11 GiB of an 80 GB H100 as CUDA reports it, 85% of it by default
    assert usable_bytes(80.0) == pytest.approx(0.85 * 79.11 * 2**30) and CAPACITY_PER_GB * 80 / 2**30 == 79.11
    base = cli(capsys, "--params", "8B", "--gpus", "8")
    assert base["cluster"]["usable_memory_gb"] == pytest.approx(0.85 * 79.11 * 2**30 / 1e9, abs=0.01)
    roomy = cli(capsys, "--params", "8B", "--gpus", "8", "--memory-headroom", "0.95")
    assert roomy["cluster"]["usable_memory_gb"] > base["cluster"]["usable_memory_gb"]
    assert roomy["best"]["memory_gb"]["total"] <= roomy["cluster"]["usable_memory_gb"]
    assert plan.main(["--params", "70B", "--gpus", "8", "--memory-headroom", "0.1", "--top", "1"]) == 1  # nothing fits
    capsys.readouterr()


def test_tp_comm_overlap_hides_tp_and_fp8_all_gathers_half_the_bytes(capsys):
    args = ["--params", "70B", "--gpus", "64", "--stack", "megatron", "--tp", "8", "--pp", "1", "--zero", "1",
            "--microbatch", "1", "--recompute", "full"]
    plain, ub = cli(capsys, *args)["best"], cli(capsys, *args, "--tp-comm-overlap")["best"]
    assert plain["tp_comm_s"] == ub["tp_comm_s"] and ub["tp_hidden_s"] > plain["tp_hidden_s"]
    f8, f8_ub = cli(capsys, *args, "--precision", "fp8")["best"], cli(capsys, *args, "--precision", "fp8",
                                                                          "--tp-comm-overlap")["best"]
    assert f8_ub["tp_comm_s"] < f8["tp_comm_s"]  # the all-gathers move FP8, the reduce-scatters bf16
    assert "no userbuffer TP overlap" in cli(capsys, "--params", "8B", "--gpus", "8", "--tp-comm-overlap")[
        "stack"]["headline"]


def test_the_even_split_of_older_megatron(capsys):
    args = ["--params", "405B", "--gpus", "4096", "--stack", "megatron", "--tp", "8", "--pp", "16"]
    balanced = cli(capsys, *args)["best"]
    assert balanced["layers_per_stage"] == "7+8x14+7"  # 126 on 16: one fewer at each end
    even = cli(capsys, "--params", "405B", "--gpus", "3584", "--stack", "megatron", "--tp", "8", "--pp", "14",
               "--pipeline-split", "even")["best"]
    assert even["layers_per_stage"] == "9x14" and 9 % even["interleave"] == 0  # v divides L/p
