"""World-size checks, and the runner refusing a plan in a real process before any rank starts (the
in-process bad-input matrix is test_bad_input.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.config import parse_preset
from settings import Config, check_world, preset

LAB = Path(__file__).resolve().parents[1]


def _cfg(*argv: str) -> Config:
    return parse_preset(Config, list(argv), preset)


@pytest.mark.parametrize("argv, world, message", [
    (("--strategies", "hsdp", "--hsdp-shard", "4", "--modes", "weak"), 6, "hsdp needs the world size .6. to be"),
    (("--strategies", "hsdp", "--modes", "weak"), 3, None),  # auto: an odd world is one replica group: valid
    (("--global-batch", "12", "--grad-accum", "2"), 4, r"--global-batch 12 \(sequences per step, .* over 4 ranks"),
    (("--strategies", "single",), 2, "one-process baseline"),
], ids=["hsdp-shard", "hsdp-odd-auto", "batch", "single"])
def test_world_size_combinations(argv, world, message):
    cfg = _cfg(*argv)
    if message is None:
        check_world(cfg, world)
        return
    with pytest.raises(ValueError, match=message):
        check_world(cfg, world)


def test_runner_rejects_a_plan_before_launching(tmp_path):
    """The real command make runs first: hsdp on 6 ranks with shard groups of 4 cannot be built."""
    before = sorted(p.name for p in (LAB / "results").glob("*")) if (LAB / "results").exists() else []
    env = {**os.environ, "PYTHONPATH": str(LAB.parent)}
    argv = ["--gpu", "cpu", "--preflight", "--worlds", "4,6", "--hsdp-shard", "4", "--global-batch", "24"]
    r = subprocess.run([sys.executable, str(LAB / "bench.py"), *argv], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and r.stderr.count("\n") == 1
    assert "hsdp needs the world size (6) to be a multiple of its shard group (--hsdp-shard 4)" in r.stderr
    after = sorted(p.name for p in (LAB / "results").glob("*")) if (LAB / "results").exists() else []
    assert after == before  # nothing cleared, nothing written
