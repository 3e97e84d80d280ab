"""The CUDA path on one GPU (skipped without one): the fused kernels against the math one, ours and PyTorch's public
context_parallel at N = 1 against SDPA in bf16 (the three designs' own distance from fp32 beside it), and one timed
benchmark row of every implementation."""

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_kernels_parity_and_a_benchmark_row_on_one_gpu():
    from dataclasses import replace

    from torch.distributed.device_mesh import init_device_mesh

    import bench
    import verify
    from common.attention_block import block_backward, block_forward
    from common.dist import distributed

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(1, h, 256, 64, device="cuda", generator=g, dtype=torch.bfloat16) for h in (8, 2, 2, 8))
    for causal, keys in ((True, slice(0, 256)), (False, slice(0, 128))):  # a whole block, and half of one
        o32, lse32 = block_forward(q.double(), k[:, :, keys].double(), v[:, :, keys].double(), causal=causal, scale=0.125)
        o, lse = block_forward(q, k[:, :, keys], v[:, :, keys], causal=causal, scale=0.125, kernel="fused")
        assert (o - o32).abs().max() < 2e-2 and (lse - lse32).abs().max() < 2e-2
        grads = block_backward(dout, q, k[:, :, keys], v[:, :, keys], o32.to(q.dtype), lse32.float(), causal=causal,
                               scale=0.125, kernel="fused")
        exact = block_backward(dout.double(), q.double(), k[:, :, keys].double(), v[:, :, keys].double(), o32, lse32,
                               causal=causal, scale=0.125)
        for got, want in zip(grads, exact):
            assert (got.double() - want).abs().max() / want.abs().max() < 3e-2
    with distributed(device="cuda") as env:
        mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("cp",))
        for impl in verify.IMPLS:
            vcfg = verify.VerifyConfig(cp=1, impl=impl, dtype="bfloat16", n_heads=8, n_kv_heads=2, seq_len=256,
                                       head_dim=64)
            res = verify.check(vcfg, mesh, env.device)
            assert res.passed and res.vs_fp32 <= 2 * res.reference_vs_exact, res
        cfg = replace(bench.cuda(1), seq_lens=(512,), heads=("8/2",), head_dim=64, iters=2, warmup=1)
        rows = bench.bench_rows(cfg, mesh, env.device, 512, (8, 2))
        assert {r["impl"] for r in rows} == set(bench.IMPLS)
        assert all(r["time_ms"] > 0 and r["peak_mem_bytes"] > 0 for r in rows)
