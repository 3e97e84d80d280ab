"""The config contract: generated flags, defaults in --help, one-line errors with exit code 2."""

from dataclasses import dataclass, field

import pytest

from common.config import build_parser, config_dict, env_seconds, format_size, parse_config, parse_size


@dataclass(frozen=True)
class Cfg:
    iters: int = field(default=20, metadata={"help": "timed iterations"})
    dtype: str = field(default="fp32", metadata={"help": "element type", "choices": ("fp32", "bf16")})
    collectives: tuple[str, ...] = field(default=("all_reduce",), metadata={"help": "which collectives"})
    resume: bool = field(default=False, metadata={"help": "skip rows already measured"})
    limit: float | None = field(default=None, metadata={"help": "optional cap"})

    def __post_init__(self):
        if self.iters <= 0:
            raise ValueError(f"--iters must be positive, got {self.iters}")


def test_flags_are_generated_from_fields():
    cfg = parse_config(Cfg, ["--iters", "5", "--dtype", "bf16", "--collectives", "all_reduce,broadcast",
                             "--resume", "--limit", "2.5"])
    assert cfg == Cfg(5, "bf16", ("all_reduce", "broadcast"), True, 2.5)
    assert parse_config(Cfg, ["--no-resume", "--limit", "none"]).limit is None
    assert config_dict(cfg)["collectives"] == ["all_reduce", "broadcast"]


def test_help_shows_defaults():
    text = build_parser(Cfg).format_help()
    assert "--iters ITERS" in text and "(default: 20)" in text and "(default: fp32)" in text
    # a tuple as the user types it, not Python's repr
    text = build_parser(Cfg, defaults=Cfg(collectives=("all_reduce", "broadcast"))).format_help()
    assert "(default: all_reduce,broadcast)" in " ".join(text.split()) and "('" not in text


def test_defaults_from_an_instance_and_required_fields():
    """`defaults` (e.g. a preset) replaces the fields' defaults, in the result and in --help; a field with
    no default and no instance to take it from is a required flag (one line, exit 2 without it)."""
    base = Cfg(iters=7, dtype="bf16", collectives=("broadcast",))
    assert parse_config(Cfg, ["--resume"], defaults=base) == Cfg(7, "bf16", ("broadcast",), True, None)
    assert parse_config(Cfg, [], defaults=base) == base
    assert "(default: 7)" in build_parser(Cfg, defaults=base).format_help()

    @dataclass(frozen=True, kw_only=True)
    class Needs:
        steps: int = field(metadata={"help": "no default"})
        lr: float = field(default=0.1, metadata={"help": "has one"})

    assert parse_config(Needs, ["--steps", "3"]) == Needs(steps=3)
    with pytest.raises(SystemExit) as e:
        parse_config(Needs, [])
    assert e.value.code == 2


@pytest.mark.parametrize("argv, needle", [
    (["--iters", "0"], "--iters must be positive, got 0"),  # __post_init__
    (["--dtype", "fp64"], "invalid choice: 'fp64'"),  # argparse choices
    (["--iters", "x"], "invalid int value"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as e:
        parse_config(Cfg, argv, prog="bench.py")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("value, seconds", [(None, 15.0), ("2.5", 2.5), ("x", 15.0), ("0", 15.0), ("-3", 15.0)])
def test_a_time_limit_from_the_environment_is_its_default_unless_a_positive_number(value, seconds, monkeypatch):
    if value is None:
        monkeypatch.delenv("DT_TEST_TIMEOUT_S", raising=False)
    else:
        monkeypatch.setenv("DT_TEST_TIMEOUT_S", value)
    assert env_seconds("DT_TEST_TIMEOUT_S", 15) == seconds


def test_sizes():
    assert [parse_size(s) for s in ("64", "64B", "1K", "4KiB", "1M", "4G", "0.5K")] == \
        [64, 64, 1024, 4096, 1 << 20, 4 << 30, 512]
    for bad in ("", "-1K", "1.5", "abc", "1X"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert [format_size(n) for n in (512, 1024, 3 << 20, 4 << 30)] == ["512B", "1K", "3M", "4G"]


def test_only_rank_0_prints_but_every_rank_exits_2(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(SystemExit) as e:
        parse_config(Cfg, ["--iters", "0"], prog="bench.py")
    assert e.value.code == 2 and capsys.readouterr() == ("", "")


@dataclass(frozen=True)
class Numbers:
    steps: int = field(default=5, metadata={"help": "a count"})
    lr: float = field(default=0.1, metadata={"help": "a rate"})
    cap: float | None = field(default=None, metadata={"help": "optional"})
    sizes: tuple[int, ...] = field(default=(1,), metadata={"help": "a list of counts"})
    shift: int = field(default=0, metadata={"help": "may be negative", "range": (-8, 8)})


@pytest.mark.parametrize("flag, value", [(flag, value) for flag in ("--steps", "--lr", "--cap", "--sizes")
                                         for value in ("-1", "99999999999" if flag in ("--steps", "--sizes") else
                                                       "-0.5", "nan", "inf", "-inf", "x")] +
                         [("--steps", ""), ("--lr", ""), ("--sizes", "4,-2"), ("--shift", "9"), ("--shift", "-9")])
def test_every_number_given_is_checked_against_its_range_in_one_place(capsys, flag, value):
    """Values as a class (issue 44): a number on the command line (or inside a make target's ARGS) is finite and in
    its field's range, whatever the field: one line naming the flag, exit 2, before any __post_init__ runs."""
    with pytest.raises(SystemExit) as e:
        parse_config(Numbers, [flag, value], prog="runner.py")
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and f"argument {flag}" in err, err


def test_a_declared_range_and_the_edges_are_taken():
    assert parse_config(Numbers, ["--shift", "-8", "--steps", str(2**31 - 1), "--lr", "0", "--sizes", "0,7"]) == \
        Numbers(steps=2**31 - 1, lr=0.0, sizes=(0, 7), shift=-8)
