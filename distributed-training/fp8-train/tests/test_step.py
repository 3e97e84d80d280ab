"""The training step's phases: what is timed, and the clip folded into the optimizer.

    - the timed region holds forward/backward, the gradient norm and the optimizer step only: the
      weight snapshot for the update ratio, the probes' weight reads and TE's scale snapshot run
      before it, the update norms and the row after it;
    - amax probes of an eager model are attached only on the steps that record (--stats-every) and
      see the input, the weight before the update and the output gradient of their module;
    - clipping inside the fused AdamW kernel (grad_scale = max(1, (norm + 1e-6) / clip)) gives the
      parameters clip_grads_with_norm_ + step gives, to rounding.
"""

import contextlib
import dataclasses

import pytest
import torch

from common.dist import distributed
from common.model import GPTConfig
from precision.modes import RunSpec
from precision.prepare import prepare
from training import one_run, runner
from training import trainer as trainer_mod

MCFG = GPTConfig(vocab_size=256, seq_len=16, d_model=32, n_layers=1, n_heads=2)


def _trainer(env, spec: RunSpec, **cfg_kw):
    cfg = dataclasses.replace(runner.preset("cpu"), steps=8, batch=4, seq_len=16, d_model=32, n_layers=1,
                              n_heads=2, lr=1e-2, warmup=1, **cfg_kw)
    prep = prepare(spec, MCFG, one_run.settings(cfg), env.device)
    return trainer_mod.Trainer(cfg, spec, prep, env, runner._load_data(None, 256 << 10), MCFG)


def test_monitoring_reads_stay_outside_the_timed_region(monkeypatch):
    log, inside = [], [False]

    @contextlib.contextmanager
    def timer(device):
        inside[0] = True
        log.append("timer")
        yield type("T", (), {"elapsed_s": 1e-3})()
        inside[0] = False

    monkeypatch.setattr(trainer_mod, "StepTimer", timer)
    with distributed(device="cpu") as env:
        tr = _trainer(env, RunSpec("mxfp8", "emulated", 0), stats_every=2)
        for name in ("snapshot", "param_and_update_sq"):
            orig = getattr(tr.norms, name)
            monkeypatch.setattr(tr.norms, name, lambda *a, _o=orig, _n=name: (log.append(_n), inside[0] is False
                                                                           or pytest.fail(_n), _o(*a))[-1])
        weights = tr.p.probe.weights
        monkeypatch.setattr(tr.p.probe, "weights", lambda: (log.append("weights"), inside[0] is False
                                                            or pytest.fail("weights"), weights())[-1])
        for step in range(3):
            tr.train_step(step)
            assert not tr.p.probe.handles  # the probe's hooks come off after every step
    assert log == ["snapshot", "weights", "timer", "param_and_update_sq",  # step 0 records
                   "snapshot", "timer", "param_and_update_sq",  # step 1 does not
                   "snapshot", "weights", "timer", "param_and_update_sq"]


def test_eager_probe_sees_input_weight_and_output_gradient_on_recording_steps():
    with distributed(device="cpu") as env:
        tr = _trainer(env, RunSpec("mxfp8", "emulated", 0), stats_every=2, fractions_every=0)
        mod = tr.p.raw.layers[0].mlp.w2
        seen = {}
        mod.register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0].detach().abs().max().item()))
        w_before = mod.weight.detach().abs().max().item()
        tr.train_step(0)
        amax = mod.last[:, 0].tolist()
        assert amax[0] == pytest.approx(seen["x"], rel=1e-6)
        assert amax[1] == pytest.approx(w_before, rel=1e-6)  # the weight it multiplied, not the updated one
        assert amax[2] > 0 and mod.last[2, 1].item() == pytest.approx(448.0 / amax[2], rel=1e-6)  # MXFP8: E4M3 elements
        recorded = mod.last.clone()
        tr.train_step(1)  # not a recording step: nothing attached, nothing changes
        assert torch.equal(mod.last, recorded)


def test_clip_inside_fused_adamw_equals_clip_then_step():
    results = []
    with distributed(device="cpu") as env:
        for fused_clip in (False, True):
            tr = _trainer(env, RunSpec("bf16", "torch", 0), clip=0.05, stats_every=0)
            groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in tr.opt.param_groups]
            tr.opt = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, fused=True)  # CUDA's optimizer
            tr.fused_clip = fused_clip
            rows = [tr.train_step(s) for s in range(3)]
            assert all(r["grad_norm"] > 0.05 for r in rows)  # every step clips
            results.append([p.detach().clone() for p in tr.p.raw.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
