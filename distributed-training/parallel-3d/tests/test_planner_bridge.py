"""The planner's terms as this lab reads them: bus bytes by hand, and `make plan`'s command accepted by the runner."""

import pytest

import planner_bridge as pb
from common.model import GPTConfig
from pipeline_stages import split_layers
from settings import PRESET_KEYS, Config, check, gpt_config, preset, variants

G = GPTConfig(vocab_size=1024, seq_len=128, d_model=64, n_layers=8, n_heads=4, d_ff=256)


def test_bus_bytes_by_hand():
    t, p, d, b, m = 2, 2, 4, 2, 4
    pred = pb.predict(G, pb.Degrees(t, p, d, 3, b, m, 1, "none"), "h100")
    act = 2 * b * G.seq_len * G.d_model  # one bf16 (b, s, h) activation
    # TP (SC21): 4 all-reduce-equivalents of act per layer and micro-batch on L/p layers, ring factor 2(t-1)/t
    assert pred.bus_bytes["tp"] == pytest.approx(G.n_layers / p * 4 * m * 2 * (t - 1) / t * act)
    # PP: one transfer each way per micro-batch, this rank's 1/t of the activation
    assert pred.bus_bytes["pp"] == pytest.approx(2 * m * act / t)
    # DP, ZeRO-3 under a pipeline as FSDP2 runs it (design.py): a 1F1B stage gathered m + 1 times in bf16 (resharded
    # after every forward), its gradients reduce-scattered once per step in fp32 (pipelining accumulates them)
    psi = pred.stage_params  # the busier end stage: 4 blocks and the embeddings (or the LM head), / t
    shape = pb.shape_of(G)
    assert psi == pytest.approx((4 * shape.layer_params + max(shape.embedding_params, shape.head_params)) / t)
    assert pred.bus_bytes["dp"] == pytest.approx(((m + 1) * 2 + 4) * psi * (d - 1) / d)
    # without a pipeline: every micro-batch gathers twice (ZeRO-3) and reduce-scatters once
    flat = pb.predict(G, pb.Degrees(t, 1, d, 3, b, m, 1, "none"), "h100")
    assert flat.bus_bytes["dp"] == pytest.approx(m * (2 * 2 + 4) * flat.stage_params * (d - 1) / d)
    assert pred.times_s["step_s"] > 0 and pb.predict(G, pb.Degrees(1, 1, 1, 3, 1, 1, 1, "none"), None).times_s is None


def test_activation_formula_is_korthikanti_without_dropout():
    # sequence parallelism, FlashAttention, no dropout: 32 bytes/sbh at t = 1 (34 minus the masks), /t with SP
    sbh = G.seq_len * 2 * G.d_model  # micro-batch 2
    assert pb.activation_bytes_per_layer(G, 1, "none", 2) == pytest.approx(32 * sbh)
    assert pb.activation_bytes_per_layer(G, 2, "none", 2) == pytest.approx(16 * sbh)
    # full recompute: the block input, 2 sbh / t in bf16; in fp32 every term doubles
    assert pb.activation_bytes_per_layer(G, 2, "full", 2, elem_bytes=4) == pytest.approx(2 * sbh)


@pytest.mark.parametrize("params, gpus", [("8B", 64), ("405B", 4096)])
def test_the_plan_command_runs_here(params, gpus, monkeypatch):
    """`make plan --cp 1` prints train.py flags; parsed by this lab's own config they describe the planner's
    choice (a plan with context parallelism says it needs another runner: test_launch.py)."""
    from planner.search import launch, search
    from planner import plan as planner_cli

    cfg = planner_cli.PlanConfig(params=params, gpus=gpus, top=1, cp=1)
    w, cl, pins, enumerated = cfg.resolved
    res = search.search(w, cl, pins, top=1, enumerated=enumerated)
    cmd = planner_cli.run_commands(w, cl, res)
    flags = cmd.torchrun.split(launch.RUNNER)[1].split()
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    from common.config import parse_preset

    run = parse_preset(Config, [f.replace("--gpu=h100", "--gpu=cpu") for f in flags], preset, PRESET_KEYS)
    layout = check(run, gpt_config(run), gpus)
    best = res.best
    assert (layout.tp, layout.pp, layout.dp, layout.microbatch, layout.num_microbatches) == \
        (best.tp, best.pp, best.dp, best.microbatch, best.num_microbatches)
    assert [v.interleave for v in variants(run)] == [best.interleave]
    assert gpt_config(run).n_layers == w.shape.layers and f"--nodes={gpus // 8}" in cmd.slurm
    split = launch.virtual_stage_layers(best.layers_per_stage, w.shape.layers, best.pp, best.interleave)
    assert split_layers(w.shape.layers, best.pp * best.interleave, run.stage_layers) == split


@pytest.mark.parametrize("kind", ["ring", "allgather", "ulysses"])
def test_the_plan_command_runs_its_cp_design_here(kind, monkeypatch):
    """A plan with context parallelism names its design (--cp-kind); this lab's config takes it, and refuses Ulysses
    where this TP rank's heads do not split over CP."""
    from planner.search import launch, search
    from planner import plan as planner_cli

    cfg = planner_cli.PlanConfig(layers=8, hidden=2048, heads=16, gpus=16, seq=32768, cp=4, tp=2, cp_kind=kind, top=1)
    w, cl, pins, enumerated = cfg.resolved
    res = search.search(w, cl, pins, top=1, enumerated=enumerated)
    flags = planner_cli.run_commands(w, cl, res).torchrun.split(launch.RUNNER)[1].split()
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    from common.config import parse_preset

    run = parse_preset(Config, [f.replace("--gpu=h100", "--gpu=cpu") for f in flags], preset, PRESET_KEYS)
    layout = check(run, gpt_config(run), 16)
    assert (layout.cp, layout.cp_kind) == (4, kind) == (res.best.cp, res.best.cp_kind)
    odd = parse_preset(Config, ["--gpu=cpu", "--cp=2", "--cp-kind=ulysses", "--heads=4", "--kv-heads=2", "--tp=2",
                                "--seq=64", "--hidden=64"], preset, PRESET_KEYS)
    with pytest.raises(ValueError, match=r"--cp-kind ulysses at --tp 2: Ulysses gives each of the 2 ranks 1/2 of the "
                                         r"heads, so n_heads \(2\) and n_kv_heads \(1\) must both divide by 2"):
        check(odd, gpt_config(odd), 4)
