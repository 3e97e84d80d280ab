"""FP8 measurements that need a GPU but no TransformerEngine (skipped without CUDA).

    - the bound (bound.py) on a small BF16 model: the profiler finds exactly the FP8-able GEMMs (six
      linears x forward, input gradient, weight gradient), the LM head's stay out, and the GEMM share is
      a fraction of a step that is all there.
"""

import dataclasses

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


def test_bound_of_a_small_model():
    from training import bound, one_run, runner
    from common.dist import distributed
    from precision.modes import RunSpec
    from training.trainer import Trainer
    cfg = dataclasses.replace(runner.preset("h100"), steps=20, batch=4, seq_len=512, d_model=1024, n_layers=1,
                              n_heads=8, lr=1e-3, warmup=1, compile=False)
    from common.model import GPTConfig
    mcfg = GPTConfig(vocab_size=256, seq_len=512, d_model=1024, n_layers=1, n_heads=8)
    spec = RunSpec("bf16", "torch", 0)
    with distributed(device="cuda") as env:
        tr = Trainer(cfg, spec, one_run.build(cfg, spec, mcfg, env), env, runner._load_data(None, 1 << 20), mcfg)
        b = bound.measure_trainer(tr, bound.mapped_linears(mcfg, cfg.fp8_modules, cfg.hp_modules), 0, timed=4)
    assert b.fp8_gemms == 6 * 3  # six linears: forward, input gradient, weight gradient each
    assert 0 < b.bf16_gemm_ms < b.bf16_step_ms and b.fp8_gemm_ms > 0 and b.other_gemm_ms > 0  # LM head stays
    assert 0.2 < b.row()["gemm_share"] < 1
