"""What a make variable may hold: one checker per kind of value (a whole number in a range, seconds, one of a
few words, a host, shell words, a folder to read or to fill, ...), each a function text -> value that raises Bad
and says, in `allowed`, what it takes. common/make_vars.py's table gives each variable its checker.

Standard library only: make runs these before every target (no torch; GPU names are read from hardware.py's text).
"""

from __future__ import annotations

import ast
import os
import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Callable

INT32_MAX = 2**31 - 1  # ranks are C ints in torch.distributed and NCCL: a world past it cannot start
DAY_S = 86400
NAME_MAX = 255  # bytes in one file name (Linux, macOS)


class Bad(ValueError):
    """A value that is not allowed; its message, if any, says why beyond the checker's `allowed`."""


def checker(allowed: str):
    """A checker: text -> value, or Bad; `allowed` says what it takes (the refusal's end, the --table column)."""
    def wrap(check: Callable[[str], object]) -> Callable[[str], object]:
        check.allowed = allowed
        return check
    return wrap


def whole(low: int, high: int = INT32_MAX, what: str = "a whole number") -> Callable[[str], int]:
    @checker(f"{what}, {low}..{high}")
    def check(text: str) -> int:
        if not re.fullmatch(r"[0-9]+", text) or not low <= int(text) <= high:
            raise Bad()
        return int(text)
    return check


@checker(f"seconds, more than 0 and at most {DAY_S} (a day)")
def seconds(text: str) -> float:
    if not re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", text) or not 0 < float(text) <= DAY_S:
        raise Bad()
    return float(text)


def one_of(*values: str) -> Callable[[str], str]:
    @checker(", ".join(v or "empty" for v in values))
    def check(text: str) -> str:
        if text not in values:
            raise Bad()
        return text
    return check


def pattern(regex: str, what: str, empty_ok: bool = False) -> Callable[[str], str]:
    @checker(what + (", or empty" if empty_ok else ""))
    def check(text: str) -> str:
        if not (empty_ok and text == "") and not re.fullmatch(regex, text):
            raise Bad()
        return text
    return check


def gpu(text: str) -> str:
    if text not in gpu_names():
        raise Bad()
    return text


@lru_cache(maxsize=1)
def gpu_names() -> tuple[str, ...]:
    """GPU= values: common/hardware.py's CHOICES ('auto', its PRESETS, its ALIASES), read from its source, since
    importing it would import torch (a test holds the two equal)."""
    tree = ast.parse(Path(__file__).with_name("hardware.py").read_text())
    presets, aliases = [], []
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign)
                                                                      else None)
        name = getattr(target, "id", None)
        if name == "PRESETS":
            presets = [ast.literal_eval(call.args[0]) for call in ast.walk(node.value)
                       if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "GPUPreset"]
        elif name == "ALIASES":
            aliases = list(ast.literal_eval(node.value))
    return ("auto", *presets, *aliases)


gpu.allowed = "a GPU preset: " + ", ".join(gpu_names())


@checker("a host name or an IP address (where node 0 listens)")
def host(text: str) -> str:
    import ipaddress
    try:
        ipaddress.ip_address(text[1:-1] if text.startswith("[") and text.endswith("]") else text)
        return text
    except ValueError:
        pass
    label = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    if len(text) > 253 or re.fullmatch(r"[0-9.]+", text) or not re.fullmatch(rf"{label}(\.{label})*\.?", text):
        raise Bad()
    return text


@checker("flags a shell can split (quotes and escapes closed)")
def words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as e:  # No closing quotation / No escaped character
        raise Bad(str(e).lower())


def _is(path: Path, kind: str) -> bool:
    """Path.is_dir()/is_file()/exists(), False for a name the system cannot even look up (too long, a NUL)."""
    try:
        return getattr(path, kind)()
    except (OSError, ValueError):
        return False


def folder(must_exist: bool, required: bool = True, what: str = "") -> Callable[[str], str]:
    """A folder, relative to the checkout root or absolute; spaces are fine. must_exist: one to read (a kit);
    else one to fill, made if missing (nothing on its way may be a file)."""
    what = what or ("an existing folder" if must_exist else "a folder (made if missing)")
    @checker(what + ("" if required else ", or empty"))
    def check(text: str) -> str:
        if text == "":
            if required:
                raise Bad("none given")
            return text
        p = Path(text)
        if any(len(os.fsencode(part)) > NAME_MAX for part in p.parts):
            raise Bad(f"a name longer than {NAME_MAX} bytes")
        if must_exist and not _is(p, "is_dir"):
            raise Bad(f"{text} is a file" if _is(p, "exists") else f"{text} does not exist")
        above = p
        while not _is(above, "exists") and above != above.parent:
            above = above.parent
        if not _is(above, "is_dir"):
            raise Bad(f"{above} is a file" if _is(above, "exists") else f"{text} cannot be made")
        return text
    return check


@checker("a folder (made if missing) whose path has no ':' (it goes on PYTHONPATH)")
def site(text: str) -> str:
    if ":" in text:
        raise Bad()
    folder(must_exist=False)(text)
    return text


@checker("a results archive: an existing file (make results-archive writes one)")
def archive(text: str) -> str:
    if not _is(Path(text), "is_file"):
        raise Bad("none given" if not text else f"{text} is a folder" if _is(Path(text), "exists") else
                  f"{text} does not exist")
    return text


@checker("world sizes: whole numbers >= 1, space-separated")
def worlds(text: str) -> str:
    if not text.split() or not all(re.fullmatch(r"[1-9][0-9]{0,9}", w) for w in text.split()):
        raise Bad()
    return text


@checker("'results', or CSV paths or globs, comma-separated, or empty")
def calibrate(text: str) -> str:
    if text not in ("", "results") and any(not item.strip() for item in text.split(",")):
        raise Bad()
    return text


NAME = r"[A-Za-z0-9][A-Za-z0-9._:+-]*"
VERSION = r"[0-9]+(\.[0-9]+){1,3}"
ARCHS = r"[0-9]{2,3}[af]?"
