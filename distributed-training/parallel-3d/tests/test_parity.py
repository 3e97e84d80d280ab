"""3D (and 4D: CP) parallelism trains exactly like one process, and issues exactly the collectives the design predicts.

Every combination the suite can afford on 2 cores, each against the one-process GPT (fp32) on the same
global batch (SGD, 2 steps: the second step's gradients follow a sharded optimizer update):

    fp32, within 1e-5
    TP2 x DP2        ZeRO-2, per-op recompute, no pipeline (gradient accumulation)
    PP2 x DP2        ZeRO-3, 1F1B; and with one micro-batch per step (fewer than stages: GPipe)
    TP2 x PP2        full recompute, interleaved 1F1B over 4 uneven stages (1, 2, 2, 1 layers)
    TP2 x PP2 x DP2  ZeRO-3, per-op recompute, interleaved 1F1B, 8 ranks, built on the meta device
                     (the path of models > 2 GiB): its weights equal the one-process model's exactly
    DP2 x CP2        ZeRO-3, ring attention over 2 ranks (load-balanced split), FSDP2 over dp x cp
    CP2 all-gather   the all-gather design at dp = 1, full recompute (its gathers again)
    TP2 x CP2        Ulysses under TP: each TP rank's 2 heads scattered over the 2 CP ranks
    TP2 x PP2 x CP2  full recompute (the ring runs again), interleaved 1F1B, 8 ranks: K/V heads split by TP
                     travel the CP ring between ranks of the same TP rank
    bf16 (FSDP2's MixedPrecisionPolicy: bf16 compute, fp32 master weights and reduction), within bf16's error
    1 rank           what one GPU runs (make parallel-3d-gpu): FSDP2 on a 1-rank group, no dp collective
    TP2 x PP2        FSDP2 at dp = 1 beside TP; interleaved pipeline buffers typed by the policy
    PP2 x DP2        sharded bf16 parameters, fp32 gradient reduction, 1F1B buffers typed by the policy
"""

import warnings
from typing import NamedTuple

import pytest
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor import DTensor

from comms import CollectiveLog, mesh_groups
from common.model import GPT, GPTConfig, lm_loss
from testkit import run_ranks
from design import predicted_counts, predicted_payloads
from engine import Batch, Engine
from parallelize import boundary_dtype, build_mesh, fsdp_policy, plain_name
from settings import Layout, Variant

CFG = GPTConfig(d_model=32, n_layers=6, n_heads=4, seq_len=16, vocab_size=64)
GLOBAL, STEPS, LR, TOL = 8, 2, 0.5, 1e-5
# bf16 keeps 8 significant bits (a rounding of 2^-9 relative per operation); through 6 blocks forward and back
# the one-process model itself run in bf16 is 2-3e-2 off its fp32 gradients (max over a tensor, relative to the
# tensor's largest entry), and its losses ~3e-5 off. A mis-scaled, missing or mistyped gradient is off by O(1).
TOL_BF16 = {"loss": 1e-3, "grad": 5e-2}


class Case(NamedTuple):
    layout: Layout
    variant: Variant
    dtype: torch.dtype | None = None  # None: fp32 throughout; bf16: FSDP2's MixedPrecisionPolicy
    init: str = "auto"  # auto: built whole from the seed (a tiny model); meta: the > 2 GiB path, forced


BF16 = torch.bfloat16
CASES = {
    "tp2-dp2": Case(Layout(tp=2, pp=1, dp=2, microbatch=1, num_microbatches=4), Variant(2, "op", 1)),
    "pp2-dp2": Case(Layout(tp=1, pp=2, dp=2, microbatch=1, num_microbatches=4), Variant(3, "none", 1)),
    "tp2-pp2": Case(Layout(tp=2, pp=2, dp=1, microbatch=2, num_microbatches=4), Variant(3, "full", 2)),
    "tp2-pp2-dp2-meta": Case(Layout(tp=2, pp=2, dp=2, microbatch=1, num_microbatches=4), Variant(3, "op", 2),
                             init="meta"),
    "dp2-cp2": Case(Layout(tp=1, pp=1, dp=2, microbatch=1, num_microbatches=4, cp=2), Variant(3, "none", 1)),
    "pp2-dp2-gpipe": Case(Layout(tp=1, pp=2, dp=2, microbatch=4, num_microbatches=1), Variant(3, "none", 1)),
    "tp2-pp2-cp2": Case(Layout(tp=2, pp=2, dp=1, microbatch=2, num_microbatches=4, cp=2), Variant(3, "full", 2)),
    # the other two CP designs: the all-gather at dp = 1 (FSDP2's dp x cp group is the cp group: its gathers and
    # CP's are told apart by CP attention's own group), full recompute; Ulysses under TP (2 heads per TP rank)
    "cp2-allgather": Case(Layout(tp=1, pp=1, dp=1, microbatch=2, num_microbatches=4, cp=2, cp_kind="allgather"),
                          Variant(3, "full", 1)),
    "tp2-cp2-ulysses": Case(Layout(tp=2, pp=1, dp=1, microbatch=2, num_microbatches=4, cp=2, cp_kind="ulysses"),
                            Variant(3, "none", 1)),
    "1-rank-bf16": Case(Layout(tp=1, pp=1, dp=1, microbatch=2, num_microbatches=4), Variant(3, "full", 1), BF16),
    "tp2-pp2-bf16": Case(Layout(tp=2, pp=2, dp=1, microbatch=2, num_microbatches=4), Variant(3, "none", 2), BF16),
    "pp2-dp2-bf16": Case(Layout(tp=1, pp=2, dp=2, microbatch=1, num_microbatches=4), Variant(2, "none", 1), BF16),
}


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.randint(0, CFG.vocab_size, (GLOBAL, CFG.seq_len + 1), generator=torch.Generator().manual_seed(step))
    return t[:, :-1], t[:, 1:]


@pytest.fixture(scope="module")
def reference():
    torch.manual_seed(0)
    model = GPT(CFG)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
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
    return losses, grads, initial


def _full(t: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # gathering a dp x tp sharded tensor takes two all-gathers: fine here
        warnings.filterwarnings("ignore", message=".*sequential all_gather")
        return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu().clone()


def _train(env, case: Case):
    layout, variant = case.layout, case.variant
    mesh = build_mesh("cpu", layout.pp, layout.dp, layout.tp, layout.cp)
    eng = Engine(CFG, layout, variant, mesh, env.device, param_dtype=case.dtype, optimizer="sgd", lr=LR,
                 init=case.init)
    initial = {plain_name(n): _full(p).numpy() for st in eng.stages for n, p in st.named_parameters()}
    rows, dp_rank = GLOBAL // layout.dp, mesh["dp"].get_local_rank()
    losses = []
    for step in range(STEPS):
        x, y = _batch(step)
        batch = Batch(x[dp_rank * rows:(dp_rank + 1) * rows], y[dp_rank * rows:(dp_rank + 1) * rows])
        log = CollectiveLog(mesh_groups(mesh))
        with log:
            micro = eng.forward_backward(batch)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*sequential all_gather")
            grads = eng.full_grads()
        with log:
            eng.optimizer_step()
        losses.append(eng.mean_loss(micro))
    # numpy, not tensors: torch would pass tensors through shared memory the exiting child owns
    payloads = {(t.dim, t.kind): t.payload_bytes for t in log.totals()}
    act = 2 if case.dtype == BF16 else 4  # activations and gathered parameters; FSDP2 reduces in fp32
    return {"losses": losses, "grads": {k: v.numpy() for k, v in grads.items()}, "initial": initial,
            "counts": dict(+log.counts()), "group_sizes": {(c.dim, c.group_size) for c in log.calls},
            "design": dict(predicted_counts(layout, variant, eng.specs, **eng.design())), "payloads": payloads,
            "design_payloads": dict(predicted_payloads(CFG, layout, variant, eng.specs, act, act, 4, **eng.design()))}


@pytest.mark.parametrize("case", CASES)
def test_matches_one_process_and_the_design(case, reference):
    c = CASES[case]
    ref_losses, ref_grads, ref_initial = reference
    tol = TOL_BF16 if c.dtype == BF16 else {"loss": TOL, "grad": TOL}
    results = run_ranks(_train, c.layout.world, c, timeout_s=240)
    seen = set()
    for rank, r in enumerate(results):
        where = f"{case}, rank {rank}"
        for name, w in r["initial"].items():  # built whole or on the meta device: the one-process weights exactly
            assert torch.equal(torch.from_numpy(w), ref_initial[name]), f"{where}: initial {name}"
        assert r["losses"] == pytest.approx(ref_losses, rel=tol["loss"]), where
        for name, g in r["grads"].items():
            ref = ref_grads[name]
            err = (torch.from_numpy(g) - ref).abs().max() / ref.abs().max()
            assert err <= tol["grad"], f"{where}: {name} relative error {err:.2e}"
        seen |= set(r["grads"])
        # every collective, 1-rank groups included (FSDP2 at dp = 1 issues none: the design predicts none)
        assert r["counts"] == r["design"], where
        assert r["payloads"] == r["design_payloads"], where
    assert seen == set(ref_grads)  # every parameter lives on some stage and was checked


def test_pipeline_buffers_take_the_policy_dtype():
    """What a stage sends is what FSDP2's policy makes its outputs: output_dtype, else the compute dtype."""
    assert boundary_dtype(None) == torch.float32  # fp32 at dp = 1: no FSDP2
    assert boundary_dtype(fsdp_policy(2, None)) == torch.float32
    assert boundary_dtype(fsdp_policy(1, BF16)) == BF16  # one GPU in bf16 (make parallel-3d-gpu)
    assert boundary_dtype(MixedPrecisionPolicy(param_dtype=BF16, output_dtype=torch.float32)) == torch.float32
    assert fsdp_policy(1, None) is None and fsdp_policy(1, BF16).reduce_dtype == torch.float32
