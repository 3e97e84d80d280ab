"""3D parallelism trains exactly like one process, and issues exactly the collectives the design predicts.

Every combination the suite can afford on 2 cores, each against the one-process GPT on the same global
batch (fp32, SGD, 2 steps: the second step's gradients follow a sharded optimizer update):

    TP2 x DP2        ZeRO-2, selective recompute, no pipeline (gradient accumulation)
    PP2 x DP2        ZeRO-3, 1F1B
    TP2 x PP2        full recompute, interleaved 1F1B over 4 uneven stages (1, 2, 2, 1 layers)
    TP2 x PP2 x DP2  ZeRO-3, selective recompute, interleaved 1F1B, 8 ranks
"""

import warnings

import pytest
import torch

from comms import CollectiveLog, mesh_groups
from common.model import GPT, GPTConfig, lm_loss
from common.testing import run_ranks
from design import predicted_counts, predicted_payloads
from engine import Batch, Engine
from parallelize import build_mesh
from settings import Layout, Variant

CFG = GPTConfig(d_model=32, n_layers=6, n_heads=4, seq_len=16, vocab_size=64)
GLOBAL, STEPS, LR, TOL = 8, 2, 0.5, 1e-5
CASES = {
    "tp2-dp2": (Layout(tp=2, pp=1, dp=2, microbatch=1, num_microbatches=4), Variant(2, "selective", 1)),
    "pp2-dp2": (Layout(tp=1, pp=2, dp=2, microbatch=1, num_microbatches=4), Variant(3, "none", 1)),
    "tp2-pp2": (Layout(tp=2, pp=2, dp=1, microbatch=2, num_microbatches=4), Variant(3, "full", 2)),
    "tp2-pp2-dp2": (Layout(tp=2, pp=2, dp=2, microbatch=1, num_microbatches=4), Variant(3, "selective", 2)),
}


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.randint(0, CFG.vocab_size, (GLOBAL, CFG.seq_len + 1), generator=torch.Generator().manual_seed(step))
    return t[:, :-1], t[:, 1:]


@pytest.fixture(scope="module")
def reference():
    torch.manual_seed(0)
    model = GPT(CFG)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        x, y = _batch(step)
        loss = lm_loss(model(x), y)
        loss.backward()
        losses.append(loss.item())
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        opt.zero_grad()
    return losses, grads


def _train(env, layout: Layout, variant: Variant):
    mesh = build_mesh("cpu", layout.pp, layout.dp, layout.tp)
    eng = Engine(CFG, layout, variant, mesh, env.device, optimizer="sgd", lr=LR)
    rows, dp_rank = GLOBAL // layout.dp, mesh["dp"].get_local_rank()
    losses = []
    for step in range(STEPS):
        x, y = _batch(step)
        batch = Batch(x[dp_rank * rows:(dp_rank + 1) * rows], y[dp_rank * rows:(dp_rank + 1) * rows])
        log = CollectiveLog(mesh_groups(mesh))
        with log:
            micro = eng.forward_backward(batch)
        with warnings.catch_warnings():  # gathering a dp x tp sharded gradient takes two all-gathers: fine here
            warnings.filterwarnings("ignore", message=".*sequential all_gather")
            grads = eng.full_grads()
        with log:
            eng.optimizer_step()
        losses.append(eng.mean_loss(micro))
    # numpy, not tensors: torch would pass tensors through shared memory the exiting child owns
    payloads = {(t.dim, t.kind): t.payload_bytes for t in log.totals()}
    return {"losses": losses, "grads": {k: v.numpy() for k, v in grads.items()}, "counts": dict(+log.counts()),
            "design": dict(predicted_counts(layout, variant, eng.specs, **eng.design())), "payloads": payloads,
            "design_payloads": dict(predicted_payloads(CFG, layout, variant, eng.specs, 4, 4, 4, **eng.design()))}


@pytest.mark.parametrize("case", CASES)
def test_matches_one_process_and_the_design(case, reference):
    layout, variant = CASES[case]
    ref_losses, ref_grads = reference
    results = run_ranks(_train, layout.world, layout, variant, timeout_s=240)
    seen = set()
    for rank, r in enumerate(results):
        where = f"{case}, rank {rank}"
        assert r["losses"] == pytest.approx(ref_losses, rel=TOL), where
        for name, g in r["grads"].items():
            ref = ref_grads[name]
            err = (torch.from_numpy(g) - ref).abs().max() / ref.abs().max()
            assert err <= TOL, f"{where}: {name} relative error {err:.2e}"
        seen |= set(r["grads"])
        assert r["counts"] == r["design"], where
        assert r["payloads"] == r["design_payloads"], where
    assert seen == set(ref_grads)  # every parameter lives on some stage and was checked
