"""The CUDA path on one GPU (skipped without one): parity at t = 1 in fp32 and bf16, and one timed benchmark row."""

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_parity_and_a_benchmark_row_on_one_gpu():
    from dataclasses import replace

    from torch.distributed.device_mesh import init_device_mesh

    import bench
    from common.dist import distributed
    from tp_config import VerifyConfig
    from verify import check

    shape = dict(tp=1, n_heads=8, n_kv_heads=4, d_model=256, seq_len=128, batch=2, gpu="auto")
    with distributed(device="cuda") as env:
        mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("tp",))
        for cfg in (VerifyConfig(**shape), VerifyConfig(dtype="bfloat16", **shape),
                    VerifyConfig(impl="dtensor", fused_qkv=False, **shape)):
            res = check(cfg, mesh, env.device)
            assert res.passed, res
        cfg = replace(bench.cuda(1), seq_lens=(128,), d_models=(256,), seq_len=128, d_model=256, iters=3, warmup=1)
        row = bench.bench_row(cfg, mesh, env.device, 128, 256, False)
        assert row["verified"] and row["ours_ms"] > 0 and row["ref_ms"] > 0 and row["dtensor_ms"] > 0
        assert row["timing"].startswith("median of 3")
    assert torch.cuda.is_available()
