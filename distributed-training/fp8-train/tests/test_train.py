"""The runner: every precision mode trains, the precision map, unavailable backends, the report."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import report
import train
from common.dist import distributed
from common.model import GPT, GPTConfig
from precision.modes import DEFAULT_FP8_MODULES, RunSpec, parse_runs
from precision.prepare import select_modules
from training import one_run, plan, runner

LAB = Path(train.__file__).resolve().parent
TINY = ["--gpu", "cpu", "--steps", "8", "--batch", "4", "--seq-len", "16", "--d-model", "32", "--n-layers", "1",
        "--n-heads", "2", "--lr", "1e-2", "--warmup", "1", "--val-every", "4", "--val-batches", "1", "--stats-every",
        "2", "--fractions-every", "2", "--data-size", "256K", "--log-every", "100", "--threads", "1",
        "--promote", "replace"]


def test_precision_map():
    model = GPT(GPTConfig(n_layers=2))
    names = select_modules(model, DEFAULT_FP8_MODULES)
    assert names == [f"layers.{i}.{m}" for i in range(2) for m in
                     ("attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.w1", "mlp.w2")]  # not lm_head
    assert "lm_head" not in names and "tok_emb" not in names
    assert select_modules(model, DEFAULT_FP8_MODULES, ("layers.0.*",)) == names[6:]  # keep block 0 high precision
    assert select_modules(model, ("lm_head",)) == ["lm_head"]  # allowed when asked for explicitly
    for bad, why in ((("tok_emb",), "only nn.Linear"), (("layers.*.norm1",), "only nn.Linear"),
                     (("layers.*.attn.wz",), "matches no module")):
        with pytest.raises(ValueError, match=why):
            select_modules(model, bad)


def test_run_specs():
    specs = parse_runs(("fp32", "bf16", "fp8", "nvfp4:emulated"), "native", seed=5, noise_seeds=2)
    assert [s.name for s in specs] == ["fp32-s5", "bf16-s5", "bf16-s6", "fp8-native-s5", "nvfp4-emulated-s5"]
    for bad in (("fp7",), ("fp32:te",), ("fp8:cudnn",), ("fp8", "fp8")):
        with pytest.raises(ValueError):
            parse_runs(bad, "auto", 0, 1)
    assert RunSpec("fp8", "auto", 0).name == "fp8-auto-s0"


def test_every_mode_trains(tmp_path, capsys):
    runs = "fp32,bf16,fp16,fp8:native,fp8:emulated,fp8,mxfp8:emulated,mxfp4:emulated,nvfp4:emulated"
    assert train.main(TINY + ["--runs", runs, "--noise-seeds", "2", "--results",
                              str(tmp_path / "results" / "cpu")]) == 0
    steps = pd.read_csv(tmp_path / "results" / "cpu" / "steps.csv")
    assert steps["run"].nunique() == 10
    for run, g in steps.groupby("run"):
        loss = g.sort_values("step")["loss"].tolist()
        assert len(loss) == 8 and max(loss[-2:]) < loss[0] - 0.3, (run, loss)  # every mode learns
        assert g["val_loss"].notna().sum() == 2 and not g["nonfinite"].any()
    first = steps[(steps.step == 0) & (steps.seed == 0)].set_index("run")["loss"]
    assert (first - first["fp32-s0"]).abs().max() < 0.05  # same weights, same batch: only arithmetic differs
    assert first["bf16-s0"] != first["fp32-s0"]  # ... and the arithmetic does differ
    auto = steps[steps.run == "fp8-auto-s0"]["precision_backend"].unique().tolist()
    assert auto == ["native"]  # auto records what it chose (torch._scaled_mm works on CPU)
    fp8 = pd.read_csv(tmp_path / "results" / "cpu" / "fp8.csv")
    nat = fp8[fp8.run == "fp8-native-s0"]
    assert set(nat["role"]) == {"input", "weight", "grad_output"} and set(nat["step"]) == {0, 2, 4, 6}
    assert len(nat) == 4 * 6 * 3 and nat["underflow_frac"].notna().all()
    assert (nat[nat.step == 0]["scale"] == 1.0).all() and (nat[nat.step == 6]["scale"] != 1.0).all()
    assert set(fp8[fp8.run == "nvfp4-emulated-s0"]["scale_kind"]) == {"derived"}
    versions = steps.groupby("run")["precision_backend_version"].unique().map(list).to_dict()
    own = {"fp8-native-s0", "fp8-emulated-s0", "fp8-auto-s0"}  # the lab's own FP8 layer names its version too
    assert versions == {r: [f"torch {torch.__version__}" + (", fp8_linear 2" if r in own else "")] for r in versions}
    saved = json.loads((tmp_path / "results" / "cpu" / "steps.config.json").read_text())
    assert saved["mx_scale_rule"] == "te"  # the MX block-scale rule is part of the recorded config
    assert "bf16 emulated on CPU" in capsys.readouterr().out
    # The report reads only these CSVs.
    assert report.main(["--results", str(tmp_path / "results"), "--out", str(tmp_path / "REPORT.md")]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "| fp8-native-s0 | cpu | fp8, delayed, 16-step max | native, torch " in text and "between the 2 BF16 seeds" in text
    assert "GPU results: **none yet**" in text and (tmp_path / "results" / "cpu" / "loss.png").exists()


NO_CUDA_TE = "TransformerEngine needs a CUDA GPU; use --fp8-backend native or emulated on this machine"


@pytest.mark.parametrize("args, expect", [
    (["--runs", "fp8:te"], NO_CUDA_TE if not torch.cuda.is_available() else "README"),
    (["--runs", "fp8:te-fused"], NO_CUDA_TE if not torch.cuda.is_available() else "README"),
    (["--runs", "fp8:torchao"], "make setup-fp8"),
    (["--runs", "mxfp8:native"], "te (Blackwell) or emulated"),
    (["--fp8-backend", "te"], "TransformerEngine"),
    (["--fp8-modules", "tok_emb"], "only nn.Linear"),
])
def test_unavailable_or_bad_exits_2_and_writes_nothing(args, expect, tmp_path, capsys):
    pytest.importorskip("torch")
    if "te" in args[-1] and _importable("transformer_engine.pytorch") and torch.cuda.is_available():
        pytest.skip("TransformerEngine is installed and usable here")
    if args[-1] == "fp8:torchao" and _importable("torchao.float8"):
        pytest.skip("torchao is installed here")
    with pytest.raises(SystemExit) as e:
        train.main(TINY + args + ["--results", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expect in err[0], err
    assert not (expect == NO_CUDA_TE and "setup-fp8" in err[0]), err  # it refuses a CPU torch: not the way here
    assert not (tmp_path / "out").exists()


def test_bad_input_in_a_real_process(tmp_path):
    r = subprocess.run([sys.executable, str(LAB / "train.py"), "--gpu", "cpu", "--batch", "6", "--grad-accum", "4",
                        "--results", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "divisible by --grad-accum" in r.stderr
    assert not (tmp_path / "out").exists()


def _importable(name: str) -> bool:
    try:
        __import__(name)
        return True
    except Exception:  # noqa: BLE001
        return False


def _fsdp_run(env, spec, ckpt):
    from training import checkpoint
    from training.trainer import Trainer
    cfg = dataclasses.replace(runner.preset("cpu"), steps=4, batch=4, seq_len=16, d_model=32, n_layers=1, n_heads=2,
                              lr=1e-2, warmup=1, stats_every=0)
    mcfg = GPTConfig(vocab_size=256, seq_len=16, d_model=32, n_layers=1, n_heads=2)
    data = runner._load_data(None, 256 << 10)
    tr = Trainer(cfg, spec, one_run.build(cfg, spec, mcfg, env), env, data, mcfg, ckpt_path=ckpt)
    losses = [tr.train_step(0)["loss"]]
    first_scales = torch.stack([m.scale_fwd for m in tr.fp8]).tolist()  # from the initial weights, first batch
    losses += [tr.train_step(s)["loss"] for s in (1, 2)]
    tr.save_checkpoint(3)  # FSDP2: full state gathered, rank 0 writes
    losses.append(tr.train_step(3)["loss"])
    again = Trainer(cfg, spec, one_run.build(cfg, spec, mcfg, env), env, data, mcfg, ckpt_path=ckpt)
    again.restore(checkpoint.load(ckpt, again.fingerprint()))
    return losses, first_scales, again.train_step(3)["loss"]


def test_fsdp_fp8_matches_one_process_and_resumes(tmp_path):
    import torch.distributed.checkpoint.state_dict  # noqa: F401 - imported before forking, so that the
    import common.fsdp  # noqa: F401 - ranks do not each import FSDP and DCP (seconds on 2 cores)
    from testkit import run_ranks
    runner._load_data(None, 256 << 10)  # likewise the corpus
    spec = RunSpec("fp8", "native", 0)
    (one_loss, one_scales, _), = run_ranks(_fsdp_run, 1, spec, tmp_path / "one.pt")
    (l0, s0, r0), (l1, s1, r1) = run_ranks(_fsdp_run, 2, spec, tmp_path / "two.pt")
    assert l0 == l1 and s0 == s1  # amaxes all-reduced (MAX): every rank casts with the same scales
    assert one_loss == pytest.approx(l0, abs=2e-3)
    assert s0 == one_scales  # max over ranks of each shard's amax == the global batch's amax
    assert r0 == r1 == l0[3]  # restored from the full-state checkpoint: step 3 again, bit for bit


def test_compiled_fp8_blocks_share_their_graphs_whatever_the_depth():
    """Every block of the native layer compiles to the same graphs: one per (recording, counting fractions,
    evaluating) variant, not one per block. A per-layer int passed to the traced code made Dynamo compile each
    block apart; past its 8 recompiles the run went eager (the native layer at 0.79x BF16 on one H200)."""
    from torch._dynamo.utils import counters

    from precision.modes import PrecisionSettings
    from precision.prepare import prepare
    from training.trainer import Trainer
    cfg = dataclasses.replace(runner.preset("cpu"), steps=6, batch=4, seq_len=16, d_model=32, n_layers=3, n_heads=2,
                              lr=1e-2, warmup=1, health_every=0, stats_every=1, fractions_every=2,
                              val_batches=1)
    mcfg = GPTConfig(vocab_size=256, seq_len=16, d_model=32, n_layers=3, n_heads=2)
    spec = RunSpec("fp8", "native", 0)
    counters.clear()
    with distributed(device="cpu") as env:
        prep = prepare(spec, mcfg, PrecisionSettings(compile=True, compile_backend="aot_eager"), env.device)
        tr = Trainer(cfg, spec, prep, env, runner._load_data(None, 256 << 10), mcfg)
        for s in range(4):  # steps 0 and 2 count fractions; an evaluation runs without grad
            tr.train_step(s)
        tr.evaluate()
    assert counters["stats"]["unique_graphs"] == 3  # train, train counting fractions, evaluate: for all 3 blocks
    assert counters["frames"]["total"] == counters["frames"]["ok"]


def test_activation_ranges_are_measured_under_compile():
    """Compiled blocks keep their activation hooks for the whole run: act_amax is real on every health step.

    aot_eager traces exactly what Inductor would compile (Dynamo + AOTAutograd) without generating code.
    """
    from precision.modes import PrecisionSettings
    from precision.prepare import prepare
    from training.trainer import Trainer
    cfg = dataclasses.replace(runner.preset("cpu"), steps=12, batch=4, seq_len=16, d_model=32, n_layers=2, n_heads=2,
                              lr=1e-2, warmup=1, health_every=5, stats_every=0)
    mcfg = GPTConfig(vocab_size=256, seq_len=16, d_model=32, n_layers=2, n_heads=2)
    spec = RunSpec("fp8", "native", 0)
    with distributed(device="cpu") as env:
        prep = prepare(spec, mcfg, PrecisionSettings(compile=True, compile_backend="aot_eager"), env.device)
        assert prep.compiled
        tr = Trainer(cfg, spec, prep, env, runner._load_data(None, 256 << 10), mcfg)
        seen = {}
        for s in range(11):
            tr.train_step(s)
            if s % 5 == 0:
                seen[s] = [v["act_amax"] for k, v in tr.layer_stats.items() if "act_amax" in v]
    assert set(seen) == {0, 5, 10}
    for s, amaxes in seen.items():
        assert len(amaxes) == 6 and min(amaxes) > 0, (s, amaxes)


def test_activation_probe_adds_no_compiled_graph():
    """A health step's activation hooks compile into the blocks' one graph: as many graphs with the probe as without.

    The hooks once closed over their layer's index, a Python int Dynamo guards on: each compiled block recompiled
    its own graph on health steps (5 graphs for 3 blocks instead of 1), and past Dynamo's 8 recompiles a deeper
    model would have run eagerly."""
    from torch._dynamo.utils import counters

    from precision.modes import PrecisionSettings
    from precision.prepare import prepare
    from training.trainer import Trainer
    mcfg = GPTConfig(vocab_size=256, seq_len=16, d_model=32, n_layers=3, n_heads=2)
    spec = RunSpec("fp8", "native", 0)

    def graphs(health_every: int) -> tuple[int, dict[str, dict[str, float]]]:
        cfg = dataclasses.replace(runner.preset("cpu"), steps=2, batch=4, seq_len=16, d_model=32, n_layers=3,
                                  n_heads=2, lr=1e-2, warmup=1, health_every=health_every, stats_every=0,
                                  fractions_every=0)
        counters.clear()
        with distributed(device="cpu") as env:
            prep = prepare(spec, mcfg, PrecisionSettings(compile=True, compile_backend="aot_eager"), env.device)
            tr = Trainer(cfg, spec, prep, env, runner._load_data(None, 256 << 10), mcfg)
            for s in range(2):  # both health steps when health_every is 1
                tr.train_step(s)
            assert not any("act_amax" in k for k in prep.raw.state_dict())  # checkpoints unchanged
        assert counters["frames"]["total"] == counters["frames"]["ok"]
        return counters["stats"]["unique_graphs"], tr.layer_stats

    without, _ = graphs(0)
    with_probe, stats = graphs(1)
    assert with_probe <= without == 1
    amaxes = [v["act_amax"] for v in stats.values() if "act_amax" in v]
    assert len(amaxes) == 9 and min(amaxes) > 0  # and it measured every block


def test_completed_runs_keep_only_the_newest_checkpoints(tmp_path):
    paths = [tmp_path / f"run{i}.pt" for i in range(3)]
    for p in paths:
        p.write_bytes(b"x")
    runner.prune_checkpoints(paths, keep=1)
    assert [p.exists() for p in paths] == [False, False, True]
    runner.prune_checkpoints(paths, keep=0)
    assert not any(p.exists() for p in paths)


def test_only_trains_part_of_the_plan_and_resume_publishes_the_whole(tmp_path, tiny, capsys):
    """A short job runs part of a preset (--only); --resume runs the rest; results/ changes once, complete."""
    out = tmp_path / "results" / "parts"
    args = tiny.TINY + ["--runs", "bf16,fp8:emulated", "--noise-seeds", "2", "--steps", "3", "--val-every", "0",
                        "--ckpt-every", "0", "--results", str(out), "--ckpt-dir", str(tmp_path / "ckpt")]
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "fp8-emulated-s0.pt").write_bytes(b"an older plan's")  # never resumed from
    assert train.main(args + ["--only", "bf16"]) == 0
    assert "not run yet: fp8-emulated-s0" in capsys.readouterr().out
    assert not out.exists()  # nothing published from an incomplete plan
    assert train.main(args + ["--resume"]) == 0
    steps = pd.read_csv(out / "steps.csv")
    assert sorted(steps["run"].unique()) == ["bf16-s0", "bf16-s1", "fp8-emulated-s0"]
    assert len(steps) == 9  # each run once: the resumed launch did not repeat the bf16 runs
    with pytest.raises(SystemExit) as e:
        train.main(args + ["--only", "fp8:native"])
    assert e.value.code == 2 and "--only fp8:native: not one of this plan's runs" in capsys.readouterr().err


def test_resume_builds_no_model_for_finished_runs_and_writes_no_checkpoint_when_they_are_off(tmp_path, tiny,
                                                                                            monkeypatch):
    """A short GPU job resumes a plan: finished runs are told from their rows alone, and --ckpt-every 0 stays 0."""
    out, ckpt = tmp_path / "results" / "r", tmp_path / "ckpt"
    args = tiny.TINY + ["--runs", "bf16,fp8:emulated", "--noise-seeds", "1", "--steps", "3", "--val-every", "0",
                        "--ckpt-every", "0", "--results", str(out), "--ckpt-dir", str(ckpt)]
    assert train.main(args + ["--only", "bf16"]) == 0
    built = []
    real = one_run.build
    monkeypatch.setattr(one_run, "build", lambda cfg, spec, *a: built.append(spec.name) or real(cfg, spec, *a))
    assert train.main(args + ["--resume"]) == 0
    assert built == ["fp8-emulated-s0"]  # bf16-s0 was complete: no model built for it
    assert not list(ckpt.glob("*.pt"))  # checkpoints off: none at the end of a resumed launch either


def test_publish_finished_publishes_what_finished_and_never_half_a_run(tmp_path, tiny, capsys, monkeypatch):
    """The end of a short GPU job: bf16-s0 finished, fp8 was cut off at step 2; only bf16-s0 reaches results/."""
    from training import runloop
    out = tmp_path / "results" / "slot"
    args = tiny.TINY + ["--runs", "bf16,fp8:emulated", "--noise-seeds", "2", "--steps", "4", "--val-every", "0",
                        "--ckpt-every", "0", "--results", str(out), "--ckpt-dir", str(tmp_path / "ckpt")]
    assert train.main(args + ["--list-runs"]) == 0
    assert capsys.readouterr().out.splitlines() == ["run bf16-s0", "run fp8-emulated-s0", "run bf16-s1",
                                                    "layer fp8-emulated-s0: fp8_linear 2"]
    real = runloop.RunLoop.one_step

    def cut_off_at_step_2(self, step):
        if self.ids["run"] == "fp8-emulated-s0" and step == 2:
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(runloop.RunLoop, "one_step", cut_off_at_step_2)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train.main(args + ["--only", "bf16-s0,fp8-emulated-s0"])
    monkeypatch.setattr(runloop.RunLoop, "one_step", real)
    assert not out.exists()
    assert train.main(args + ["--publish-finished"]) == 0
    said = capsys.readouterr().out
    assert "fp8-emulated-s0: cut off mid-way; its" in said and "not run yet: fp8-emulated-s0, bf16-s1" in said
    assert pd.read_csv(out / "steps.csv").groupby("run")["step"].apply(list).to_dict() == {"bf16-s0": [0, 1, 2, 3]}
    assert train.main(args + ["--resume"]) == 0  # a later slot finishes the plan, which then replaces the merge
    assert sorted(pd.read_csv(out / "steps.csv")["run"].unique()) == ["bf16-s0", "bf16-s1", "fp8-emulated-s0"]


def test_initial_weights_are_drawn_once_per_plan_and_kept_for_its_next_launch(tmp_path, monkeypatch):
    import precision.prepare
    monkeypatch.setattr(precision.prepare, "DISK_MIN_PARAMS", 0)  # the disk copy is for big models; any model here
    cfg = GPTConfig(vocab_size=64, seq_len=8, d_model=16, n_layers=1, n_heads=2)
    precision.prepare.forget_initial_weights(tmp_path)
    first = precision.prepare.initial_gpt(cfg, 3, torch.device("cpu"), tmp_path).state_dict()
    assert len(list(tmp_path.glob("initial-s3-*.pt"))) == 1
    precision.prepare._initial_state.cache_clear()  # the next launch: a new process
    monkeypatch.setattr(precision.prepare, "GPT", lambda c: pytest.fail("drew the weights again"))
    again = precision.prepare._initial_state(cfg, 3, tmp_path)
    assert all(torch.equal(first[k], again[k]) for k in first)
    precision.prepare.forget_initial_weights(tmp_path)  # a fresh plan
    assert not list(tmp_path.glob("initial-*"))


def test_resume_without_checkpoints_restarts_an_interrupted_run(tmp_path, tiny, capsys, monkeypatch):
    """--ckpt-every 0 (the GPU presets): a run killed mid-way starts again; its partial rows are replaced."""
    from training import runloop
    out = tmp_path / "results" / "killed"
    args = tiny.TINY + ["--runs", "bf16,fp8:emulated", "--noise-seeds", "1", "--steps", "4", "--val-every", "0",
                        "--ckpt-every", "0", "--results", str(out), "--ckpt-dir", str(tmp_path / "ckpt")]
    real = runloop.RunLoop.one_step

    def dies_at_step_2_of_fp8(self, step):
        if self.ids["run"] == "fp8-emulated-s0" and step == 2:
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(runloop.RunLoop, "one_step", dies_at_step_2_of_fp8)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train.main(args)
    monkeypatch.setattr(runloop.RunLoop, "one_step", real)
    capsys.readouterr()
    assert train.main(args + ["--resume"]) == 0
    assert "starting fp8-emulated-s0 again (" in capsys.readouterr().out  # its steps, fp8 and layer rows
    steps = pd.read_csv(out / "steps.csv")
    assert steps.groupby("run")["step"].apply(list).to_dict() == {"bf16-s0": [0, 1, 2, 3],
                                                                  "fp8-emulated-s0": [0, 1, 2, 3]}


def test_only_skips_a_preset_run_that_cannot_run_here_with_its_reason(tmp_path, tiny, capsys, monkeypatch):
    """A short job on a node without one backend still runs the rest; a run it cannot do is named with why."""
    from precision import backends
    real = backends.resolve

    def no_native(precision, backend, device):
        if backend == "native":
            raise backends.BackendUnavailable("--fp8-backend native for fp8: not on this machine")
        return real(precision, backend, device)

    monkeypatch.setattr(backends, "resolve", no_native)
    assert train.main(tiny.TINY + ["--only", "fp8:native", "--results", str(tmp_path / "results" / "x")]) == 0
    out = capsys.readouterr().out
    assert "skipped fp8-native-s0: --fp8-backend native for fp8: not on this machine" in out
    assert "nothing to train here; nothing written" in out
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


def test_only_takes_run_names_and_keeps_the_plans_order(tiny):
    specs = parse_runs(("bf16", "fp8:te", "fp8:te-fused", "fp8:torchao"), "auto", 0, 3)
    pick = lambda *items: [s.name for s in plan.selected(specs, items)]  # noqa: E731
    assert pick("fp8:torchao", "bf16-s0") == ["bf16-s0", "fp8-torchao-s0"]  # the plan's order, not the items'
    assert pick("fp8:te") == ["fp8-te-s0"]  # a backend is matched whole: te is not te-fused
    assert pick("fp8") == ["fp8-te-s0", "fp8-te-fused-s0", "fp8-torchao-s0"]
    assert pick("bf16") == ["bf16-s0", "bf16-s1", "bf16-s2"]
    with pytest.raises(ValueError, match="--only bf16-s7: not one of this plan's runs"):
        pick("bf16-s7")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU: its backends are probed")
def test_list_runs_of_a_gpu_preset_answers_without_a_gpu(tmp_path, capsys):
    """What a GPU slot would train, in order, from a machine without one (gpu-quick's dry run plans with it): the
    backends unprobed and said so, every other check made (a bad --only is still one line, exit 2), nothing written."""
    out = tmp_path / "results" / "h100_ws1"
    assert train.main(["--gpu", "h100", "--list-runs", "--results", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "run bf16-s0", "run fp8-torchao-s0", "run fp8-native-s0", "run fp8-te-s0", "run fp8-te-fused-s0", "run bf16-s1",
        "run bf16-s2", "layer fp8-native-s0: fp8_linear 2", "bound bf16-s0",
        "unchecked: no CUDA device here; each backend is checked where the plan runs"]
    with pytest.raises(SystemExit) as e:
        train.main(["--gpu", "h100", "--list-runs", "--only", "fp8:cudnn", "--results", str(out)])
    assert e.value.code == 2 and "--only fp8:cudnn: not one of this plan's runs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # without --list-runs a GPU preset still needs its GPU
        train.main(["--gpu", "h100", "--results", str(out)])
    assert e.value.code == 2 and "needs a CUDA GPU" in capsys.readouterr().err
    assert not any(tmp_path.rglob("*"))  # nothing written
