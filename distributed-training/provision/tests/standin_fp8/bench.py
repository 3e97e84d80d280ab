"""A stand-in for fp8-train's bench.py in the slot's rehearsal: --parts gemm writes one GEMM row and merges it
into --results at once, as the real one does with --promote merge."""

import json
import sys
from pathlib import Path

from common.runs import MANIFEST, run_dir_for


def main() -> int:
    args = sys.argv[1:]
    out = Path(args[args.index("--results") + 1])
    parts = args[args.index("--parts") + 1]
    run_dir = run_dir_for(out.parent, f"{out.name}-bench")
    run_dir.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    name = "bench_gemm.csv" if parts == "gemm" else "bench_step.csv"
    (out / name).write_text("op,time_us\nbf16 torch.mm,1.0\n")
    (run_dir / MANIFEST).write_text(json.dumps({"state": "merged"}))
    print(f"{parts}: 1 row merged into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
