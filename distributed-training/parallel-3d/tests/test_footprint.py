"""The byte counters: storages counted once, views and in-place ops not at all, resizes tracked, frees subtracted."""

import torch

from footprint import PeakTracker, state_bytes, storage_bytes


def test_peak_and_live_bytes():
    w = torch.randn(64, 64)  # made before: not counted, nor its transpose (a view)
    with PeakTracker() as mem:
        a = torch.randn(1000)  # 4000 bytes
        v = a.view(10, 100)  # a view: nothing new
        a.add_(1.0)  # in place: nothing new
        b = w.t() @ w  # 16384 bytes; w.t() is a view of a tensor that existed before
        assert mem.live_bytes == 4000 + 16384
        del a, v, b
        assert mem.live_bytes == 0
        c = torch.empty(0)
        c.untyped_storage().resize_(400)  # FSDP2 grows its gathered parameters this way
        assert mem.live_bytes == 400
        c.untyped_storage().resize_(0)
        assert mem.live_bytes == 0
    assert mem.peak_bytes == 4000 + 16384


def test_state_bytes_count_storages_once():
    p = torch.nn.Parameter(torch.zeros(10))
    q = torch.nn.Parameter(torch.zeros(6))
    flat = torch.zeros(16)
    p.grad, q.grad = flat[:10], flat[10:]  # views into one buffer, as FSDP2's sharded gradients
    opt = torch.optim.AdamW([p, q])
    opt.step()
    assert storage_bytes([p.grad, q.grad, None]) == 64
    assert state_bytes([p, q], opt) == {"param_bytes": 64, "grad_bytes": 64, "opt_bytes": 2 * 64}
