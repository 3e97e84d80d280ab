"""Every strategy trains exactly like one process on the same global batch, issues exactly the
collectives of the analytic plan, and holds exactly the bytes of the memory model (gloo, 2 and 4 ranks).

One launch per world size runs all five strategies: a launch costs more than a strategy.
"""

import pytest
import torch
import torch.distributed as dist

import memory_model as mm
from common.model import GPTConfig
from testkit import run_ranks
from measure import instrumented_step
from settings import hsdp_mesh_shape
from strategies import Trainer, micro_batches

CFG = GPTConfig(d_model=32, n_layers=2, n_heads=2, seq_len=16, vocab_size=64)
GLOBAL, ACCUM, STEPS = 8, 2, 3
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "hsdp")


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.randint(0, CFG.vocab_size, (GLOBAL, CFG.seq_len + 1), generator=torch.Generator().manual_seed(step))
    return t[:, :-1], t[:, 1:]


def _train(env, strategies):
    """Each strategy: STEPS SGD steps with grad accumulation, the last one with its collectives logged
    and the state bytes taken after backward (instrumented_step, tracker off)."""
    out = {}
    b = GLOBAL // env.world_size
    for s in strategies:
        mesh = hsdp_mesh_shape(env.world_size) if s == "hsdp" else None
        tr = Trainer(s, CFG, env.device, optimizer="sgd", lr=0.5, mesh_shape=mesh)
        losses = []
        for step in range(STEPS):
            x, y = (t[env.rank * b:(env.rank + 1) * b] for t in _batch(step))
            micro = micro_batches(x, y, ACCUM)
            if step == STEPS - 1:
                held, _, log = instrumented_step(tr, micro, memory=False)
                break
            loss = tr.step(micro)
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
            losses.append(loss.item())
        # numpy, not tensors: torch would pass tensors through shared memory the exiting child owns
        params = {k: v.numpy() for k, v in tr.full_params().items()}
        out[s] = {"losses": losses, "params": params, "held": held, "comms": log.per_kind(), "mesh": mesh}
    return out


@pytest.fixture(scope="module")
def reference():
    """One process, the full global batch at once (the mean over all sequences, as accumulation computes)."""
    tr = Trainer("single", CFG, torch.device("cpu"), optimizer="sgd", lr=0.5)
    losses = []
    for step in range(STEPS):
        x, y = _batch(step)
        losses.append(tr.step([(x, y)]).item())
    return losses[:-1], tr.full_params()


@pytest.mark.parametrize("world", [2, 4])
def test_strategies_match_one_process_and_the_models(world, reference):
    ref_losses, ref_params = reference
    prec = mm.precision_for("sgd")
    for rank, result in enumerate(run_ranks(_train, world, STRATEGIES)):
        for s, r in result.items():
            where = f"{s} at world size {world}, rank {rank}"
            # 1. parity: losses per step and the parameters after the last step (fp32, tight)
            assert r["losses"] == pytest.approx(ref_losses, rel=1e-5), where
            for name, p in r["params"].items():
                torch.testing.assert_close(torch.from_numpy(p), ref_params[name], rtol=1e-5, atol=1e-6,
                                           msg=f"{where}: {name}")
            # 2. collectives: exactly the analytic plan (one all-reduce bucket: this model is < 1 MiB)
            plan = mm.comm_plan(s, CFG, world, prec, accum=ACCUM, mesh=r["mesh"], n_buckets=1)
            key = lambda c: (c["collective"], c["group_size"], c["count"], int(c["payload_bytes"]))  # noqa: E731
            assert sorted(map(key, r["comms"])) == sorted(map(key, plan)), where
            # 3. memory: this rank's bytes are exactly the model's (FSDP padding and all)
            shard = r["mesh"][1] if r["mesh"] else world
            want = mm.model_states(s, CFG, world, prec, shard=shard, padded=True)
            assert (r["held"]["param_bytes"], r["held"]["grad_bytes"]) == (want["param"], want["grad"]), where
            assert r["held"]["opt_bytes"] == 0  # plain SGD keeps no state


def test_hsdp_mesh_at_four_ranks_is_two_by_two():
    assert hsdp_mesh_shape(4) == (2, 2) and hsdp_mesh_shape(2) == (2, 1) and hsdp_mesh_shape(1) == (1, 1)
    assert hsdp_mesh_shape(16, local_world=8, nnodes=2) == (2, 8)
    with pytest.raises(ValueError, match="multiple of its shard group"):
        hsdp_mesh_shape(6, hsdp_shard=4)
