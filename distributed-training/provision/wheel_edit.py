"""A wheel rewritten with some of its files changed: a new build tag, and its RECORD telling the truth.

A wheel is a zip whose `*.dist-info/RECORD` lists every file with its SHA-256 and size (PEP 376/427).
The offline kit changes one file of TransformerEngine's core wheel (its library reduced to the node's
GPU architectures, fatbin.py); the result keeps the project and version (TE checks that its three
packages share one version) and gets a build tag naming what was kept, e.g. `0sm90`, so that the file
says it is not the wheel PyPI serves:

    transformer_engine_cu13-2.20.2-py3-none-manylinux_2_28_x86_64.whl
    transformer_engine_cu13-2.20.2-0sm90-py3-none-manylinux_2_28_x86_64.whl
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path
from typing import Callable


def record_hash(data: bytes) -> str:
    """RECORD's hash field: sha256, urlsafe base64 without padding (PEP 376)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def tagged_name(name: str, build: str) -> str:
    """`dist-version-python-abi-platform.whl` with a build tag inserted (it must start with a digit)."""
    parts = name[:-len(".whl")].split("-")
    if len(parts) != 5:
        raise ValueError(f"{name}: expected dist-version-python-abi-platform.whl (no build tag yet)")
    if not build[:1].isdigit():
        raise ValueError(f"a wheel's build tag starts with a digit, got {build!r}")
    return "-".join(parts[:2] + [build] + parts[2:]) + ".whl"


def rewrite(src: Path, dest_dir: Path, build: str, change: Callable[[str, bytes], bytes | None]) -> Path:
    """Copy wheel `src` into `dest_dir` under a build-tagged name; `change(name, data)` returns a file's new bytes
    (None: unchanged). RECORD gets each changed file's hash and size, WHEEL its `Build:` line."""
    out = dest_dir / tagged_name(src.name, build)
    tmp = out.with_name(out.name + ".tmp")
    new_record: dict[str, tuple[str, int]] = {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zout:
        names = zin.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        wheel = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        for name in names:
            if name in (record, wheel):
                continue
            data = zin.read(name)
            changed = change(name, data)
            if changed is not None:
                data = changed
                new_record[name] = (record_hash(data), len(data))
            zout.writestr(zin.getinfo(name), data)
        meta = [line for line in zin.read(wheel).decode().splitlines() if not line.startswith("Build:")]
        wheel_bytes = ("\n".join(meta + [f"Build: {build}"]) + "\n").encode()
        zout.writestr(zin.getinfo(wheel), wheel_bytes)
        new_record[wheel] = (record_hash(wheel_bytes), len(wheel_bytes))
        lines = []
        for line in zin.read(record).decode().splitlines():
            path = line.rsplit(",", 2)[0]
            lines.append(f"{path},{new_record[path][0]},{new_record[path][1]}" if path in new_record else line)
        zout.writestr(zin.getinfo(record), "\n".join(lines) + "\n")
    tmp.replace(out)
    return out
