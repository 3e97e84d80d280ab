"""NaN policies on injected faults, rollback of FP8 state, checkpoints that survive kill -9 and SIGTERM."""

import copy
import dataclasses
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import train
from common.dist import distributed
from common.failures import PREEMPTED
from common.model import GPTConfig
from precision.modes import RunSpec
from training import checkpoint, one_run, runloop, runner
from training.faults import Fault
from training.trainer import Trainer, lr_at

LAB = Path(train.__file__).resolve().parent


def test_injected_faults_raise_alerts_and_rollback_recovers(demo_runs):
    clean, faulty = demo_runs
    ev = pd.read_csv(faulty / "events.csv")
    kinds = {(r.step, r.kind) for r in ev.itertuples()}
    assert (12, "grad_spike") in kinds  # spike@12: gradients x1000
    assert (16, "nonfinite") in kinds  # nan@16
    assert any(k == "scale_drop" and s in (20, 21) for s, k in kinds)  # overflow@20: the scale collapses
    assert "rolled back" in ev[ev.kind == "nonfinite"]["action"].iloc[0]
    assert not len(pd.read_csv(clean / "events.csv").query("kind in ['nonfinite', 'grad_spike']"))
    steps = pd.read_csv(faulty / "steps.csv")
    assert len(steps) == 28 and steps["nan_steps"].iloc[-1] == 1 and steps["skipped_steps"].iloc[-1] == 1
    assert steps.set_index("step")["injected"].dropna().to_dict() == {12: "spike@12", 16: "nan@16", 20: "overflow@20"}
    final = {d: pd.read_csv(d / "steps.csv")["val_loss"].dropna().iloc[-1] for d in demo_runs}
    assert abs(final[faulty] - final[clean]) < 0.25  # the run survived and learned about as well
    layers = pd.read_csv(faulty / "layers.csv")
    assert {"layers.0.attn", "layers.0.mlp", "layers.0.out", "embed", "lm_head"} <= set(layers["layer"])


@pytest.mark.parametrize("policy, runs, action", [
    ("skip", "fp16,fp8:emulated", "skipped the optimizer step"),
    ("reduce-lr", "fp8:emulated", "learning rate x0.5"),
])
def test_skip_and_reduce_lr(policy, runs, action, tmp_path, tiny):
    out = tiny.run(tmp_path, policy, "--runs", runs, "--inject", "nan@6", "--on-nan", policy, "--steps", "12")
    steps = pd.read_csv(out / "steps.csv")
    ev = pd.read_csv(out / "events.csv")
    for run, g in steps.groupby("run"):
        g = g.set_index("step")
        assert g.loc[6, "nonfinite"] and g["nan_steps"].iloc[-1] == 1 and len(g) == 12
        assert action in ev[(ev.run == run) & (ev.kind == "nonfinite")]["action"].iloc[0]
        assert g["loss"].iloc[-1] < g["loss"].iloc[0] - 0.3  # and training went on
        if run.startswith("fp16"):  # GradScaler's response to the NaN: skip the step, halve the loss scale
            assert g.loc[6, "loss_scale"] == g.loc[5, "loss_scale"] / 2
        if policy == "reduce-lr":  # halved from the NaN step on
            assert g.loc[7, "lr"] == pytest.approx(0.5 * lr_at(7, 12, 1e-2, 1), rel=1e-12)
            assert g.loc[5, "lr"] == pytest.approx(lr_at(5, 12, 1e-2, 1), rel=1e-12)


def test_stop_policy(tmp_path, tiny):
    code = train.main(tiny.TINY + tiny.DEMO + ["--results", str(tmp_path / "results" / "r"),
                                               "--ckpt-dir", str(tmp_path / "c"), "--inject", "nan@6",
                                               "--on-nan", "stop"])
    assert code == 3
    assert not (tmp_path / "results" / "r").exists()  # a stopped run publishes nothing; its rows stay in runs/
    steps = pd.read_csv(tmp_path / "runs" / "r" / "steps.csv")
    assert steps["step"].max() == 6 and steps["nonfinite"].iloc[-1]
    assert torch.load(tmp_path / "c" / "fp8-emulated-s0.pt", weights_only=True)["step"] == 7


def test_rollback_restores_fp8_scaling_state(tmp_path):
    cfg = dataclasses.replace(runner.preset("cpu"), steps=10, batch=4, seq_len=16, d_model=32, n_layers=1,
                              n_heads=2, lr=1e-2, warmup=1, on_nan="rollback", ckpt_every=4)
    mcfg = GPTConfig(vocab_size=256, seq_len=16, d_model=32, n_layers=1, n_heads=2)
    spec = RunSpec("fp8", "emulated", 0)
    with distributed(device="cpu") as env:
        tr = Trainer(cfg, spec, one_run.build(cfg, spec, mcfg, env), env, runner._load_data(None, 256 << 10), mcfg,
                     ckpt_path=tmp_path / "ck.pt", faults=[Fault("nan", 6)])

        def fp8_state():
            return {k: v.clone() for k, v in tr.p.raw.state_dict().items() if k.startswith("fp8_scaling.")}

        for s in range(4):
            tr.train_step(s)
        tr.save_checkpoint(4)
        saved, saved_opt = fp8_state(), copy.deepcopy(tr.opt.state_dict())
        for s in (4, 5):
            tr.train_step(s)
        assert saved and any(not torch.equal(saved[k], v) for k, v in fp8_state().items())  # the scales moved on
        row = tr.train_step(6)  # NaN -> rollback
        assert row["nonfinite"] and "rolled back" in row["action"]
        for k, v in fp8_state().items():
            assert torch.equal(saved[k], v), k  # amax histories and scales are the checkpoint's again
        for k, v in saved_opt["state"].items():
            assert torch.equal(tr.opt.state_dict()["state"][k]["exp_avg"], v["exp_avg"])
        assert tr.train_step(7)["nonfinite"] is False


# The child trains until `pause_after` steps are written, then waits to be killed: the kill cannot come after the
# run finished, however loaded the machine (a race the earlier poll-then-kill lost on a busy 2-core box).
_PAUSING_CHILD = """
import sys, time
import train
from training import runloop
pause_after, args = int(sys.argv[1]), sys.argv[2:]
one_step = runloop.RunLoop.one_step
def paused(self, step):
    one_step(self, step)
    if step + 1 == pause_after:
        print("paused", flush=True)
        time.sleep(3600)
runloop.RunLoop.one_step = paused
sys.exit(train.main(args))
"""


def _spawn_paused(args, pause_after: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{LAB}{os.pathsep}{LAB.parent}", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", _PAUSING_CHILD, str(pause_after), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_paused(proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until the child says it paused (its steps are on disk), or fail with what it printed."""
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            if line.strip() == "paused":
                return
    finally:
        timer.cancel()
    raise AssertionError(f"the run ended before it could be interrupted (exit {proc.wait()})")


def test_kill_resume_sigterm_bit_identical(tmp_path, tiny, monkeypatch):
    args = tiny.TINY + ["--runs", "fp8:emulated", "--steps", "30", "--val-every", "10", "--ckpt-every", "5",
                        "--stats-every", "5", "--dashboard-every", "0"]
    ref = tmp_path / "ref"
    assert train.main(args + ["--results", str(ref / "results" / "r"), "--ckpt-dir", str(ref / "c")]) == 0
    # kill -9 mid-run, then resume
    killed = tmp_path / "killed"
    kargs = args + ["--results", str(killed / "results" / "r"), "--ckpt-dir", str(killed / "c")]
    proc = _spawn_paused(kargs, 12)  # past the checkpoint at step 10
    _wait_paused(proc)
    proc.kill()
    proc.wait()
    assert len(pd.read_csv(killed / "runs" / "r" / "steps.csv")) == 12
    assert not (killed / "results" / "r").exists()  # nothing published by the killed run
    with open(killed / "runs" / "r" / "steps.csv", "a") as f:
        f.write("fp8-emulated-s0,fp8,emulated,0,12,3.1")  # and a row it was writing when killed: repaired
    assert train.main(kargs + ["--resume"]) == 0
    # SIGTERM to this very process while step 7 runs (its handler sets the flag the loop reads after the step):
    # checkpoint, exit 75, resume
    termed = tmp_path / "termed"
    targs = args + ["--results", str(termed / "results" / "r"), "--ckpt-dir", str(termed / "c")]
    one_step = runloop.RunLoop.one_step

    def term_in_step_7(self, step):
        one_step(self, step)
        if step == 6:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(runloop.RunLoop, "one_step", term_in_step_7)
    assert train.main(targs) == PREEMPTED == 75  # not success: a requeue script can tell
    monkeypatch.setattr(runloop.RunLoop, "one_step", one_step)
    at = torch.load(termed / "c" / "fp8-emulated-s0.pt", weights_only=True)["step"]
    assert at == 7 == len(pd.read_csv(termed / "runs" / "r" / "steps.csv"))  # the last finished step
    assert not (termed / "results" / "r").exists()
    assert train.main(targs + ["--resume"]) == 0
    want = pd.read_csv(ref / "results" / "r" / "steps.csv", dtype=str)
    for d in (killed, termed):
        got = pd.read_csv(d / "results" / "r" / "steps.csv", dtype=str)
        assert got["step"].tolist() == want["step"].tolist()
        for col in ("loss", "val_loss", "grad_norm", "param_norm", "update_ratio"):  # bit for bit (repr strings)
            assert got[col].fillna("").tolist() == want[col].fillna("").tolist(), (d.name, col)
        f_got, f_want = (pd.read_csv(x / "results" / "r" / "fp8.csv", dtype=str) for x in (d, ref))
        assert f_got["scale"].tolist() == f_want["scale"].tolist()
        _assert_tensorboard_once_per_step(d / "runs" / "r", got)


def _assert_tensorboard_once_per_step(run_folder: Path, steps: pd.DataFrame) -> None:
    """After a kill or SIGTERM and --resume: every step's event once (purge_step dropped the replayed ones)."""
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    ea = ea_mod.EventAccumulator(str(run_folder / "tb" / "fp8-emulated-s0"), size_guidance={"scalars": 0})
    ea.Reload()
    events = ea.Scalars("loss/train")
    assert [e.step for e in events] == list(range(30))
    assert [np.float32(e.value) for e in events] == [np.float32(float(v)) for v in steps["loss"]]


def test_bad_checkpoints_are_clear_errors(tmp_path, capsys, tiny, monkeypatch):
    from training import runloop
    args = tiny.TINY + ["--runs", "fp8:emulated", "--steps", "6", "--ckpt-every", "3",
                        "--results", str(tmp_path / "results" / "r"), "--ckpt-dir", str(tmp_path / "c")]
    with pytest.raises(SystemExit):  # --resume with no earlier run says so, and starts nothing
        train.main(args + ["--resume"])
    assert "nothing to resume" in capsys.readouterr().err and not (tmp_path / "runs" / "r").exists()
    real = runloop.RunLoop.one_step

    def dies_at_step_4(self, step):  # after its step-3 checkpoint
        if step == 4:
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(runloop.RunLoop, "one_step", dies_at_step_4)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        train.main(args)
    monkeypatch.setattr(runloop.RunLoop, "one_step", real)
    ck = tmp_path / "c" / "fp8-emulated-s0.pt"
    good = ck.read_bytes()
    ck.write_bytes(good[: len(good) // 2])  # a crash mid-copy, a full disk
    with pytest.raises(SystemExit) as e:
        train.main(args + ["--resume"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "unreadable (truncated or corrupt" in err[0]
    ck.write_bytes(good)
    fp = torch.load(ck, weights_only=True)["fingerprint"]
    with pytest.raises(checkpoint.CheckpointError, match="another configuration .*model"):
        checkpoint.load(ck, {**fp, "model": [256, 64, 1, 2, 16]})
    ck.unlink()  # an unfinished run's rows but no checkpoint: never a silent restart from scratch
    csv = tmp_path / "runs" / "r" / "steps.csv"
    csv.write_text("".join(csv.read_text().splitlines(keepends=True)[:4]))
    with pytest.raises(SystemExit):
        train.main(args + ["--resume"])
    assert "no checkpoint" in capsys.readouterr().err


def test_two_run_folders_of_one_name_never_share_state(tmp_path, tiny, monkeypatch, capsys):
    """Issue 44: `--results A/x` and `--results B/x --lr 1e-3`, both stopped by SIGTERM. Each resumes its own checkpoint
    (in its run folder, runs/x/checkpoints/) and ends complete with its own learning rate; one run's end leaves the
    other's state alone; a checkpoint of another configuration is refused in one line (exit 2), and so is one that
    does not continue the folder's rows (two runs sharing a --ckpt-dir)."""
    base = tiny.TINY + ["--runs", "fp8:emulated", "--steps", "8", "--val-every", "0", "--ckpt-every", "2",
                        "--stats-every", "4", "--dashboard-every", "0"]
    runs = {name: base + ["--results", str(tmp_path / name / "x")] + extra
            for name, extra in (("A", []), ("B", ["--lr", "1e-3"]), ("C", []))}
    ckpt = {name: tmp_path / name / "runs" / "x" / "checkpoints" / "fp8-emulated-s0.pt" for name in runs}
    one_step = runloop.RunLoop.one_step

    def sigterm_after(last):
        def step(self, s):
            one_step(self, s)
            if s == last:
                os.kill(os.getpid(), signal.SIGTERM)
        return step

    for name, last in (("A", 2), ("B", 5), ("C", 2)):
        monkeypatch.setattr(runloop.RunLoop, "one_step", sigterm_after(last))
        assert train.main(runs[name]) == PREEMPTED
    monkeypatch.setattr(runloop.RunLoop, "one_step", one_step)
    assert [torch.load(ckpt[n], weights_only=True)["step"] for n in "AB"] == [3, 6]
    assert not (LAB / "checkpoints" / "x").exists()  # nothing of either run outside its folder
    capsys.readouterr()
    assert train.main(runs["A"] + ["--resume"]) == 0
    a = pd.read_csv(tmp_path / "A" / "x" / "steps.csv")
    assert a["step"].tolist() == list(range(8)) and a["lr"].max() == pytest.approx(1e-2)  # A's rows, A's lr
    assert ckpt["B"].exists()  # A's end did not touch B's checkpoint
    assert train.main(runs["B"] + ["--resume"]) == 0
    b = pd.read_csv(tmp_path / "B" / "x" / "steps.csv")
    assert b["step"].tolist() == list(range(8)) and b["lr"].max() == pytest.approx(1e-3)
    # B's checkpoint (lr 1e-3) where C's belongs: another configuration, one line, exit 2, nothing trained
    own = ckpt["C"].read_bytes()
    ckpt["C"].write_bytes(ckpt["B"].read_bytes())
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train.main(runs["C"] + ["--resume"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "another configuration (lr: 0.001 -> 0.01)" in err[0], err
    # the same configuration, but not this folder's run (two folders sharing one --ckpt-dir): a checkpoint at step 6
    # does not continue C's rows, which end at step 2
    ckpt["C"].write_bytes(own)
    torch.save({**torch.load(ckpt["C"], weights_only=True), "step": 6}, ckpt["C"])
    with pytest.raises(SystemExit) as e:
        train.main(runs["C"] + ["--resume"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "checkpoint is at step 6 but steps.csv has no row of step 5" in err[0]
    assert len(pd.read_csv(tmp_path / "C" / "runs" / "x" / "steps.csv")) == 3  # nothing trained by either attempt
