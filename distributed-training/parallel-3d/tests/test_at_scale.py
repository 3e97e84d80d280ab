"""The fake-world study at small size: the real code as one rank of 8, against the design and the named terms."""

import pytest

import at_scale
import explain as ex
import planner_bridge as pb
from common.model import GPTConfig
from settings import Layout
from pipeline_stages import stage_specs

CFG = GPTConfig(vocab_size=512, seq_len=64, d_model=64, n_layers=6, n_heads=4, d_ff=256)
# TP2 x PP2 x DP2, ZeRO-3, interleaved over 4 uneven stages: every dimension and the explicit unshard plan
DEGREES = pb.Degrees(tp=2, pp=2, dp=2, zero=3, microbatch=1, num_microbatches=4, interleave=2, recompute="full")


@pytest.mark.parametrize("rank", [0, 4], ids=["first-stage", "last-stage"])
def test_one_rank_of_eight_matches_the_design_and_the_terms(rank):
    m = at_scale.isolated(at_scale.measure, CFG, DEGREES, rank)
    assert m["counts_match_design"]
    pp_rank = rank // (DEGREES.dp * DEGREES.tp)
    specs = stage_specs(CFG.n_layers, DEGREES.pp, DEGREES.interleave, pp_rank)
    # FSDP2 stores 4 B of fp32 parameter, 4 B of fp32 gradient and 8 B of AdamW state per stored element
    stored = ex.rank_state_numel(CFG, Layout(DEGREES.tp, DEGREES.pp, DEGREES.dp, DEGREES.microbatch,
                                             DEGREES.num_microbatches), specs)
    assert (m["param_bytes"], m["grad_bytes"], m["opt_bytes"]) == (4 * stored, 4 * stored, 8 * stored)
    # planner + named terms = measured, for the state and every dimension's bus bytes
    pred = pb.predict(CFG, DEGREES, "h100")
    terms = at_scale.terms_for(CFG, DEGREES, pp_rank, pred, m)
    # the planner's state is FSDP2's 16 B per parameter of its busiest stage; the one term is this rank's stages
    assert pred.state_bytes == pytest.approx(16 * pred.stage_params / DEGREES.dp)
    assert pred.state_bytes + sum(t.bytes for t in terms if t.quantity == "state") == pytest.approx(16 * stored)
    for q in ("tp", "pp", "dp"):
        explained = pred.bus_bytes[q] + sum(t.bytes for t in terms if t.quantity == q)
        assert explained == pytest.approx(m[f"{q}_bus_bytes"], rel=1e-9), q
    assert m["peak_bytes"] > 0


def test_planner_zero_1_runs_as_zero_2():
    assert [at_scale.run_zero(z) for z in (0, 1, 2, 3)] == [2, 2, 2, 3]


def test_a_cp_rank_matches_the_design_and_the_ring_formula():
    """TP2 x CP2 (4 ranks), full recompute: FSDP2 over dp x cp, the ring's bytes exactly ring_bytes per block."""
    d = pb.Degrees(tp=2, pp=1, dp=1, zero=3, microbatch=1, num_microbatches=2, interleave=1, recompute="full", cp=2)
    m = at_scale.isolated(at_scale.measure, CFG, d, 0)
    assert m["counts_match_design"]
    layout = Layout(d.tp, d.pp, d.dp, d.microbatch, d.num_microbatches, cp=2)
    stored = ex.rank_state_numel(CFG, layout, stage_specs(CFG.n_layers, 1, 1, 0))
    assert (m["param_bytes"], m["grad_bytes"], m["opt_bytes"]) == (4 * stored, 4 * stored, 8 * stored)
    # per block and micro-batch a K/V block is 2 x b 1 x s/cp 32 tokens x 4 K/V heads / t 2 x 16 elements: bf16 once
    # forward, once more + fp32 dK/dV backward, once more forward for the recompute; 6 blocks, 2 micro-batches
    block = 2 * 1 * (CFG.seq_len // 2) * (4 // 2) * 16
    assert m["cp_payload_bytes"] == 2 * 6 * (block * 2 + block * (2 + 4) + block * 2)
    assert m["cp_count"] == 2 * 6 * 4  # sends (receives are not counted in *_count)


@pytest.mark.parametrize("d", [
    DEGREES,  # interleaved 1F1B, ZeRO-3, full recompute: the last rank (the loss, kept logits) is the busiest
    pb.Degrees(tp=1, pp=2, dp=2, zero=3, microbatch=4, num_microbatches=1, interleave=1, recompute="none"),  # GPipe
    pb.Degrees(tp=2, pp=1, dp=4, zero=3, microbatch=2, num_microbatches=2, interleave=1, recompute="none"),
], ids=["tp2-pp2-dp2-interleaved", "pp2-dp2-gpipe", "tp2-dp4-accumulate"])
def test_the_planners_pytorch_memory_is_the_measured_peak(d):
    """Issue 29 part 3 at small size: the planner's memory for the pytorch stack (its busiest rank, less the CUDA
    context a fake world does not allocate) within 10% of the busier of the first and last rank's peak (parameters
    and optimizer state, plus everything the step allocates, gradients included)."""
    from planner.model.memory import CONTEXT_BYTES

    ranks = [0] + ([(d.pp - 1) * d.dp * d.tp] if d.pp > 1 else [])
    measured = []
    for rank in ranks:
        m = at_scale.isolated(at_scale.measure, CFG, d, rank)
        measured.append(m["param_bytes"] + m["opt_bytes"] + m["peak_bytes"])
    planned = pb.predict(CFG, d, "h100").memory_bytes["total"] - CONTEXT_BYTES
    assert planned == pytest.approx(max(measured), rel=0.10)
