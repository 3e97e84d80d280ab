"""Frozen-dataclass configuration with a generated command line.

Every runner declares its settings once, as a frozen dataclass whose fields carry a default and
a one-line help text, and validates them in `__post_init__` by raising ValueError. This module
turns such a class into an argparse parser (kebab-case flags, defaults shown in --help) and
turns every kind of bad input into the same outcome: one line on stderr that says what is wrong
and what is allowed, exit code 2, nothing written.

    @dataclass(frozen=True)
    class Config:
        sizes: str = field(default="1K:64M", metadata={"help": "min:max message size"})
        iters: int = field(default=20, metadata={"help": "timed iterations"})
        def __post_init__(self):
            if self.iters <= 0:
                raise ValueError(f"--iters must be positive, got {self.iters}")

    cfg = parse_config(Config, description=__doc__)

A lab's presets are functions that return a complete Config; `parse_preset` reads the command line as
overrides on the one its choosing flags pick (--gpu, and whatever else a preset depends on), so --help
shows the values that will run:

    def preset(gpu: str = "auto") -> Config:
        return cpu() if get_preset(gpu).name == "cpu" else h100()

    cfg = parse_preset(Config, argv, preset, description=__doc__)

A field whose metadata names a "group" is listed under that heading in --help (common.runner's run-folder
flags: the same in every lab).

Numbers are checked as a class, here, before any `__post_init__`: a number given on the command line (a flag, or
a flag inside a make target's ARGS) is finite and lies in its field's range: metadata "range" = (low, high), else
0..2**31 - 1 for a whole number (a count, a size, a degree: a C int in torch and NCCL) and 0 or more for a real
one. `--warmup -1` or `--steps 99999999999` is one line naming the flag and what it takes, exit 2, nothing run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math
import os
import sys
import types
import typing
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")

BAD_INPUT = 2  # the exit code for every configuration error, as argparse uses


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage + error over two lines; the project contract is one line."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help keeps the runbook's line breaks (its commands stay one per line) and shows defaults, a tuple as
    the comma-separated list a user would type."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text and isinstance(action.default, tuple) and "%(default)" in text:
            text = text.replace("%(default)s", ",".join(map(str, action.default)) or "none")
        return text


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _base_type(tp: Any) -> Any:
    """Unwrap Optional[X] / X | None to X."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _tuple_parser(elem: Any):
    def parse(text: str) -> tuple:
        items = [s.strip() for s in text.split(",") if s.strip()]
        try:
            return tuple(elem(s) for s in items)
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"in {text!r}: {e}")
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {elem.__name__}, got {text!r}")

    parse.__name__ = f"list of {elem.__name__}"
    return parse


INT_MAX = 2**31 - 1  # a count, size or degree beyond a C int cannot reach torch.distributed or NCCL


def _ranged(conv: Callable[[str], Any], low: float, high: float | None) -> Callable[[str], Any]:
    """conv, then the value's range: [low, high] (high None: no upper end)."""
    def parse(text: str):
        value = conv(text)
        if value < low or (high is not None and value > high):
            what = "a whole number" if conv is int else "a number"
            upto = f"{high:,}" if high is not None else "any"
            raise argparse.ArgumentTypeError(f"expected {what} from {low:g} to {upto}, got {text!r}")
        return value

    parse.__name__ = getattr(conv, "__name__", "value")
    return parse


def _number_type(f: dataclasses.Field, base: Any) -> Callable[[str], Any]:
    """The converter of a number field (or a list's element): finite, in the field's range (the module's rule)."""
    low, high = f.metadata.get("range", (0, INT_MAX if base is int else None))
    return _ranged(_finite if base is float else int, low, high)


def _finite(text: str) -> float:
    """A float flag: inf and nan are refused (a cost model or a timeout fed nan answers nonsense)."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


_finite.__name__ = "float"


def _optional(conv):
    def parse(text: str):
        return None if text.lower() in ("none", "") else conv(text)

    parse.__name__ = getattr(conv, "__name__", "value")
    return parse


def build_parser(cls: type, description: str | None = None, prog: str | None = None,
                 defaults: Any = None) -> argparse.ArgumentParser:
    """The parser of `cls`'s fields. Its defaults are the fields' own, or `defaults`' values when given (an
    instance of `cls`, e.g. a preset: --help then shows what that preset runs). A field with neither is a
    required flag."""
    parser = OneLineParser(
        prog=prog,
        description=description,
        formatter_class=lambda prog: HelpFormatter(prog, max_help_position=36, width=110),
    )
    hints = typing.get_type_hints(cls)
    groups: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.metadata.get("cli") is False:
            continue
        title = f.metadata.get("group")
        where = groups.setdefault(title, parser.add_argument_group(title)) if title else parser
        tp = hints[f.name]
        base = _base_type(tp)
        optional = base is not tp
        kw: dict[str, Any] = {"help": f.metadata.get("help", " "), "dest": f.name}
        if defaults is not None:
            kw["default"] = getattr(defaults, f.name)
        elif f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            kw["default"] = f.default_factory()  # type: ignore[misc]
        else:
            kw["required"] = True
        if "choices" in f.metadata:
            kw["choices"] = f.metadata["choices"]
        if base is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(base) is typing.Literal:
            kw["choices"] = list(typing.get_args(base))
            kw["type"] = type(kw["choices"][0])
        elif typing.get_origin(base) is tuple:
            elem = typing.get_args(base)[0]
            kw["type"] = _tuple_parser(_number_type(f, elem) if elem in (int, float) else elem)
            kw["metavar"] = "A,B,..."
        elif base in (int, float, str):
            # "none" is a value, not "unset", when the choices list it (e.g. --recompute none)
            literal_none = "none" in f.metadata.get("choices", ())
            conv = _number_type(f, base) if base in (int, float) else base
            kw["type"] = _optional(conv) if optional and not literal_none else conv
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: unsupported config type {tp!r}")
        where.add_argument(_flag(f.name), **kw)
    return parser


def _quiet():
    """Under torchrun every rank parses the same argv and exits the same way, but only global rank 0 prints
    (the error line, or --help), so a mistake is reported once, not once per rank."""
    if os.environ.get("RANK", "0") == "0":
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    return stack


def parse_config(cls: type[T], argv: Sequence[str] | None = None, description: str | None = None,
                 prog: str | None = None, defaults: T | None = None) -> T:
    """Parse argv into `cls`; bad input exits 2 with one line on stderr and nothing else done. `defaults`
    (an instance of `cls`) supplies the value of every flag not given, in place of the fields' defaults."""
    with _quiet():
        parser = build_parser(cls, description, prog, defaults)
        ns = parser.parse_args(argv)
        try:
            return cls(**vars(ns))
        except (ValueError, TypeError) as e:
            print(f"{parser.prog}: error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(BAD_INPUT)


def parse_preset(cls: type[T], argv: Sequence[str] | None, preset: Callable[..., T], keys: Sequence[str] = ("gpu",),
                 description: str | None = None, prog: str | None = None) -> T:
    """Parse argv as overrides on a preset: `preset(**choice)`, where `choice` holds the values of the flags
    `keys` (as given, else the field's default, else None), is the Config every flag not given keeps, and what
    --help shows. A ValueError from `preset` (an unknown --gpu) is bad input: one line, exit 2.

    A key is a flag the preset depends on: the hardware (--gpu), and e.g. a model size or the pipeline degree
    where the preset's other values follow from it. The keys are read first, alone (a malformed one reads as not
    given: the full parse then says what is wrong with it)."""
    hints = typing.get_type_hints(cls)
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    choice: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in keys:
            choice[f.name] = f.default if f.default is not dataclasses.MISSING else None
            base = _base_type(hints[f.name])
            peek.add_argument(_flag(f.name), dest=f.name, type=base if base in (int, float, str) else str)
    try:
        given, _ = peek.parse_known_args(list(sys.argv[1:] if argv is None else argv))
        choice.update({k: v for k, v in vars(given).items() if v is not None})
    except argparse.ArgumentError:
        pass
    with _quiet():
        try:
            defaults = preset(**choice)
        except ValueError as e:
            print(f"{prog or os.path.basename(sys.argv[0])}: error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(BAD_INPUT)
    return parse_config(cls, argv, description, prog, defaults)


def config_dict(cfg: Any) -> dict[str, Any]:
    """The resolved config as plain JSON-able values (saved beside every result)."""
    out = {}
    for k, v in dataclasses.asdict(cfg).items():
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


def changed_flags(cfg: Any, reference: Any, ignore: Sequence[str] = ()) -> list[str]:
    """The flags whose values differ between two configs of one class (a run vs its preset's run):
    what makes a run an experiment rather than the preset (common.runs decides where it goes)."""
    return [_flag(f.name) for f in dataclasses.fields(cfg)
            if f.name not in ignore and getattr(cfg, f.name) != getattr(reference, f.name)]


def env_seconds(name: str, default: float) -> float:
    """A time limit a user may set in the environment variable `name`, in seconds: `default` where it is unset, not a
    number, or not positive (a limit that cannot be read never becomes "no limit")."""
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return float(default)
    return value if value > 0 else float(default)


def parse_size(text: str) -> int:
    """'64', '4K', '1M', '4G' -> bytes (binary units, as nccl-tests' -b/-e)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    s = text.strip().upper()
    for suffix in ("IB", "B"):  # 4KiB, 4KB, 64B all accepted; K/M/G are binary, as in nccl-tests
        if s.endswith(suffix) and len(s) > len(suffix):
            s = s[: -len(suffix)]
            break
    num, unit = (s[:-1], s[-1]) if s and s[-1] in units else (s, "")
    try:
        value = float(num) * units[unit]
    except ValueError:
        raise ValueError(f"cannot read size {text!r}; use a number with an optional K/M/G suffix, e.g. 64K or 4G")
    if not math.isfinite(value) or value != int(value) or value <= 0:
        raise ValueError(f"size {text!r} must be a positive whole number of bytes")
    return int(value)


def format_size(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B" if nbytes < 1024 else f"{nbytes / 1024:.1f}K"
