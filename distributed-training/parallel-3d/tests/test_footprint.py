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


def _dtensor_op_in_a_fake_world() -> tuple[int, int]:
    """(peak bytes, local output bytes) of one DTensor op as rank 0 of 4 on the fake group, under FakeTensorMode."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        mesh = init_device_mesh("cpu", (4,))
        with FakeTensorMode():
            x = DTensor.from_local(torch.empty(357, 64), mesh, [Shard(0)])  # global (1428, 64); a shape no other
            with PeakTracker() as mem:                                     # test uses: sharding prop is not cached
                y = x * 3.0
        return mem.peak_bytes, y.to_local().untyped_storage().nbytes()
    finally:
        dist.destroy_process_group()


def test_dtensor_shape_propagation_is_not_counted_in_a_fake_world():
    """DTensor runs each op once on global-shape fake tensors to learn its output's shape; in the at-scale study's
    fake world those tensors live in the study's own FakeTensorMode, and a rank must not be charged for them."""
    from at_scale import isolated

    peak, local = isolated(_dtensor_op_in_a_fake_world)
    assert peak == local == 357 * 64 * 4
