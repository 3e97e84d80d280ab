"""The shared FSDP2 wrap trains exactly like one process on the same global batch."""

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

from common.fsdp import apply_fsdp
from common.model import GPT, GPTConfig, lm_loss
from testkit import run_ranks

CFG = GPTConfig(d_model=32, n_layers=2, n_heads=2, seq_len=16, vocab_size=64)


def _losses(model, rank, world, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        x = torch.randint(0, 64, (4, 17), generator=g)
        b = 4 // world
        x = x[rank * b:(rank + 1) * b]
        loss = lm_loss(model(x[:, :-1]), x[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()
        t = loss.detach().clone()
        if world > 1:
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.AVG)
        out.append(t.item())
    return out


def _sharded(env, reshard):
    torch.manual_seed(0)
    model = apply_fsdp(GPT(CFG), init_device_mesh("cpu", (env.world_size,)), reshard_after_forward=reshard)
    assert all(isinstance(p, DTensor) for p in model.parameters())
    return _losses(model, env.rank, env.world_size)


@pytest.mark.parametrize("reshard", [True, False], ids=["zero3", "zero2"])
def test_fsdp_matches_single_process(reshard):
    torch.manual_seed(0)
    ref = _losses(GPT(CFG), 0, 1)
    for losses in run_ranks(_sharded, 2, reshard):
        assert losses == pytest.approx(ref, rel=1e-5)
