"""Bad input: one line on stderr, exit code 2, nothing written, before any process group (the project contract)."""

from pathlib import Path

import pytest

import activations
import at_scale
import train

RESULTS = Path(train.__file__).resolve().parent / "results"


def _listing() -> list[str]:
    return sorted(p.name for p in RESULTS.glob("*")) if RESULTS.exists() else []


@pytest.mark.parametrize("argv, message", [
    (["--tp", "3"], "--tp 3 does not divide heads 4"),
    (["--zero", "1"], "--zero 1 is not available"),
    (["--pp", "1", "--interleave", "2"], "--interleave 2 needs --pp > 1"),
    (["--tp", "2", "--pp", "2", "--dp", "2", "--world", "4"], "but the world is 4 ranks"),
    (["--pp", "2", "--interleave", "1", "--stage-layers", "1,1,1"], "must list 2 positive counts"),
    (["--pp", "2", "--interleave", "2", "--global-batch", "6", "--microbatch", "2"], "multiple of pp=2"),
    (["--tp", "2"], "needs 2 ranks: launch it with torchrun"),
    (["--recompute", "some"], "--recompute 'some'"),
    (["--gpu", "h100"], "needs a CUDA GPU"),
    (["--tp", "2", "--steps", "-1"], "--steps must be >= 1"),
    (["--cp", "0"], "--cp must be >= 1"),
    (["--tp", "2", "--cp", "3", "--world", "6"], "a multiple of 2 x cp x tp = 12"),
    (["--cp", "2", "--recompute", "selective", "--world", "2"], "--recompute op with --cp > 1"),
    (["--tp", "2", "--pp", "1", "--dp", "2", "--cp", "2", "--world", "4"], "tp x pp x dp x cp = 2x1x2x2 = 8"),
    (["--cp", "2"], "x CP2 needs 2 ranks: launch it with torchrun (make parallel-3d TP=1 PP=1 DP=1 CP=2)"),
], ids=["tp-heads", "zero1", "interleave-no-pp", "world", "stage-layers", "interleave-m", "no-torchrun",
        "recompute",
        "no-gpu", "steps", "cp-0", "cp-seq", "cp-selective", "cp-world", "cp-no-torchrun"])
def test_runner_refuses_in_one_line(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    before = _listing()
    with pytest.raises(SystemExit) as e:
        train.main(["--gpu", "cpu", *argv] if "--gpu" not in argv else argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and message in err, err
    assert _listing() == before


def test_check_args_mode_stops_before_launch(monkeypatch):
    """make runs the runner once with DT_CHECK_ARGS=1: valid arguments exit 0 where the process group would start."""
    monkeypatch.setenv("DT_CHECK_ARGS", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    before = _listing()
    with pytest.raises(SystemExit) as e:
        train.main(["--gpu", "cpu", "--tp", "2", "--pp", "2", "--dp", "2"])
    assert e.value.code == 0 and _listing() == before


@pytest.mark.parametrize("module, argv", [(at_scale, ["--studies", "70B"]), (activations, ["--recompute", "half"]),
                                          (activations, ["--gpu", "cpu", "--tp", "3"])])
def test_studies_refuse_in_one_line(module, argv, capsys):
    with pytest.raises(SystemExit) as e:
        module.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
