"""A stand-in offline kit for the rehearsals: one tiny wheel, made for this Python and torch, described as
`make offline-kit` describes a kit (its MANIFEST.json: the target and each file's size and hash)."""

import hashlib
import json
import sys
import zipfile
from pathlib import Path

from provision.wheel_edit import record_hash


def standin_kit(folder: Path) -> Path:
    """A kit of one tiny wheel, made for this Python and torch, as `make offline-kit` would describe it."""
    import torch
    folder.mkdir()
    wheel = folder / "dt_kit_probe-1.0-py3-none-any.whl"
    files = {"dt_kit_probe/__init__.py": b"CARRIED = True\n",
             "dt_kit_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: dt_kit_probe\nVersion: 1.0\n",
             "dt_kit_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in files.items())
    with zipfile.ZipFile(wheel, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr("dt_kit_probe-1.0.dist-info/RECORD", record + "dt_kit_probe-1.0.dist-info/RECORD,,\n")
    manifest = {"target": {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "torch": torch.__version__},
                "files": {wheel.name: {"bytes": wheel.stat().st_size,
                                       "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}}}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))
    return folder
