"""The three designs whole, on 2 and 4 gloo ranks, against single-device attention (causal and document masks, GQA,
fp64, fp32 and bf16), with their bytes counted against their formulas; and one rank, which is plain attention."""

import pytest
import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

import torch_cp
import verify
from common.cp_attention import cp_attention
from common.cp_bytes import CP_KINDS
from common.cp_layout import CPLayout
from testkit import run_ranks
from traffic import Traffic


def _every_check(env):
    """The report's correctness grid at N = world: every implementation that runs each case, and the public API's
    refusal on CPU."""
    n = env.world_size
    mesh = init_device_mesh("cpu", (n,), mesh_dim_names=("cp",))
    results = [(case, verify.check(cfg, mesh, env.device)) for case, cfg in verify.correctness_grid(n, "cpu")]
    return results, torch_cp.public_refusal_on_cpu(mesh)


def _calls(results, impl):
    return {(r.sent.forward_calls, r.sent.backward_calls) for _, r in results if r.config.impl == impl}


@pytest.mark.parametrize("world", [2, 4])
def test_every_design_matches_one_device_and_sends_its_formula(world):
    results, refusal = run_ranks(_every_check, world, timeout_s=240)[0]
    failed = [(case, r.config.impl, r.config.kernel, r.config.dtype, r.errors, r.sent, r.expected)
              for case, r in results if not r.passed]
    assert failed == []
    ran = {(case, r.config.impl) for case, r in results}
    for impl in CP_KINDS:  # causal and document masks, MHA and GQA, fp64 too, for each of the three
        assert {("mha", impl), ("gqa", impl), ("docs", impl), ("gqa-fp64", impl), ("docs-fp64", impl)} <= ran, impl
    # Ulysses splits heads: 2 K/V heads go over 2 ranks, not over 4 (its row is absent there, not failed)
    assert (("gqa2", "ulysses") in ran) == (world == 2) and ("odd", "ulysses") not in ran
    n1 = world - 1
    assert _calls(results, "ring") == {(f"all_reduce:1 recv:{n1} send:{n1}", f"recv:{2 * n1} send:{2 * n1}")}
    assert _calls(results, "allgather") == {("all_gather:1 all_reduce:1", "all_gather:1 reduce_scatter:1")}
    assert _calls(results, "ulysses") == {("all_reduce:1 all_to_all:2", "all_to_all:2")}
    # bf16: the all-gather and the ring merge in fp32, so they are at least as close to fp32 as single-device bf16
    # SDPA, and differ from it by about its own error; Ulysses runs SDPA's kernel on whole sequences: identical
    bf16 = {r.config.impl: r for case, r in results if case == "gqa-bf16"}
    for impl in ("ring", "allgather", "torch-allgather"):
        assert bf16[impl].vs_fp32 <= bf16[impl].reference_vs_exact
    assert bf16["ulysses"].max_err == 0
    assert "does not have a sharding strategy registered" in refusal


def _one_rank(env):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 12, 4, generator=g, dtype=torch.float64) for h in (4, 2, 2))
    docs = CPLayout.of(12, 1, (5, 7))
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    masked = F.scaled_dot_product_attention(q, k, v, attn_mask=docs.allowed(), enable_gqa=True)
    errs, calls = [], set()
    for kind in CP_KINDS:
        for kernel in ("math", "fused"):
            with Traffic() as t:
                errs.append((cp_attention(kind, q, k, v, kernel=kernel) - plain).abs().max().item())
                errs.append((cp_attention(kind, q, k, v, layout=docs, kernel=kernel) - masked).abs().max().item())
            calls.add(t.describe())
    return max(errs), calls


def test_one_rank_is_plain_attention_and_sends_nothing():
    [(err, calls)] = run_ranks(_one_rank, 1)
    assert err < 1e-12 and calls == {"none"}
