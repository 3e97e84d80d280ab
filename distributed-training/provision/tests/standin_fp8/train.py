"""A stand-in for fp8-train's train.py in the slot's rehearsal: what gpu-quick asks of it (the preset in --help,
--list-runs, --only RUN [--resume], --publish-finished), no model.

Its preset trains bf16 x2 seeds, fp8:native and fp8:te-fused. A TE run is listed as skipped where
transformer_engine does not import, as fp8-train lists it. STANDIN_HANG=<run>: that run ignores SIGTERM and
never ends (a step forced past its deadline). Rows go into the run folder gpu-quick reads (runs/<tag>), and
--publish-finished merges the finished ones into --results, as fp8-train does.
"""

import importlib.util
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.config import parse_config
from common.runs import MANIFEST, run_dir_for


@dataclass(frozen=True)
class Config:
    gpu: str = field(default="auto", metadata={"help": "preset"})
    runs: tuple[str, ...] = field(default=("bf16", "fp8:native", "fp8:te-fused"),
                                  metadata={"help": "precision[:backend] list"})
    seed: int = field(default=0, metadata={"help": "seed"})
    noise_seeds: int = field(default=2, metadata={"help": "bf16 seeds"})
    bound: bool = field(default=False, metadata={"help": "the FP8 bound"})
    only: tuple[str, ...] = field(default=(), metadata={"help": "runs to train now"})
    list_runs: bool = field(default=False, metadata={"help": "print the plan"})
    publish_finished: bool = field(default=False, metadata={"help": "merge finished runs"})
    resume: bool = field(default=False, metadata={"help": "continue"})
    progress: bool = field(default=True, metadata={"help": "progress bar"})
    results: str = field(default="", metadata={"help": "results folder"})


def main() -> int:
    cfg = parse_config(Config, prog="train.py (stand-in)")
    names = ["bf16-s0", "fp8-native-s0", "fp8-te-fused-s0", "bf16-s1"]
    out = Path(cfg.results)
    run_dir = run_dir_for(out.parent, out.name)
    te = importlib.util.find_spec("transformer_engine") is not None
    if cfg.list_runs:
        for name in names:
            print(f"run {name}" if te or "-te" not in name else
                  f"skipped {name}: TransformerEngine does not import (no module named 'transformer_engine')")
        return 0
    if cfg.publish_finished:
        rows = (run_dir / "steps.csv").read_text().splitlines()[1:]
        out.mkdir(parents=True, exist_ok=True)
        (out / "steps.csv").write_text("run,step,step_time_s\n" + "".join(r + "\n" for r in rows))
        (run_dir / MANIFEST).write_text(json.dumps({"state": "merged"}))
        print(f"published {', '.join(r.split(',')[0] for r in rows)}")
        return 0
    (run_name,) = cfg.only
    if run_name == os.environ.get("STANDIN_HANG"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"{run_name}: training past any deadline", flush=True)
        while True:
            time.sleep(1)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not cfg.resume:
        (run_dir / "steps.csv").write_text("run,step,step_time_s\n")
    (run_dir / MANIFEST).write_text(json.dumps({"state": "running"}))
    time.sleep(0.2)
    with (run_dir / "steps.csv").open("a") as f:
        f.write(f"{run_name},0,0.2\n")
    print(f"{run_name}: 1 step in 0.2 s{' (resumed)' if cfg.resume else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
