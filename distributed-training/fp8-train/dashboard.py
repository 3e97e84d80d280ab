"""The training-health dashboard: one self-contained HTML file per run, or several runs overlaid.

No server, no network, no CDN: the page embeds its data (JSON read from the run's CSVs) and the
drawing code (health/dashboard.js, inline SVG), so it opens from disk on a laptop or an air-gapped
cluster. While a run goes on the runner rewrites it every --dashboard-every steps with a
<meta refresh>, so an open browser tab follows the run; the final write drops the refresh.

Panels (defined once in health/panels.py, which the report's PNG copy and the TensorBoard events read too):
loss (train, val), gradient norm with alert markers, parameter norm, update/parameter ratio (total
and per layer), FP8 scale and amax of every tensor, activation ranges per block, throughput, memory,
learning rate / loss scale, and a timeline plus table of alerts and recovery actions.

    python dashboard.py --run results/cpu_ws1:bf16-s0 --run results/cpu_ws1:fp8-native-s0 --out bf16_vs_fp8.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.config import OneLineParser
from common.csvread import BadResults
from health.dashboard import write
from reporting.tables import read


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="dashboard.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", required=True, metavar="DIR:RUN",
                    help="a result folder and a run in it (repeat to overlay runs)")
    ap.add_argument("--out", required=True, help="HTML file to write")
    ap.add_argument("--title", default="fp8-train dashboard")
    args = ap.parse_args(argv)
    sources = []
    for item in args.run:
        d, _, run = item.rpartition(":")
        try:
            steps = read(Path(d) / "steps.csv") if run else None
            for name in ("fp8.csv", "layers.csv", "events.csv"):  # what the page draws, checked first
                read(Path(d) / name)
        except BadResults as e:
            ap.exit(2, f"dashboard: error: {e}\n")
        if steps is None or run not in set(steps["run"]):
            ap.exit(2, f"dashboard: error: --run {item!r}: expected DIR:RUN with RUN in DIR/steps.csv\n")
        sources.append((Path(d), run, f"{Path(d).name}/{run}"))
    if not Path(args.out).parent.is_dir():
        ap.exit(2, f"dashboard: error: --out {args.out}: the folder {Path(args.out).parent} does not exist\n")
    print(f"wrote {write(sources, Path(args.out), args.title)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
