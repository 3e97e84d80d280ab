"""The training-health dashboard's page: one self-contained HTML file of one run, or of several runs overlaid.

No server, no network, no CDN: the page embeds its data (JSON read from the run's CSVs) and the
drawing code (dashboard.js, inline SVG), so it opens from disk on a laptop or an air-gapped
cluster. While a run goes on the runner rewrites it every --dashboard-every steps with a
<meta refresh>, so an open browser tab follows the run; the final write drops the refresh. The lab's
dashboard.py draws it for any runs from the command line.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd

from health import panels

HERE = Path(__file__).resolve().parent
PANELS = [p.id for p in panels.PANELS]
MAX_POINTS = 2000  # per series: keeps a long run's page small and fast


def _col(df: pd.DataFrame, name: str) -> list:
    if name not in df.columns:
        return [None] * len(df)
    return [None if (isinstance(v, float) and not math.isfinite(v)) else v
            for v in pd.to_numeric(df[name], errors="coerce").tolist()]


def _points(df: pd.DataFrame, name: str) -> dict:
    """A sparse column (measured every N steps) as its own (step, value) pairs, so lines join its points."""
    d = df.dropna(subset=[name])
    return {"step": d["step"].tolist(), "mib": _col(d, name)}


def _thin(df: pd.DataFrame) -> pd.DataFrame:
    if len(df) <= MAX_POINTS:
        return df
    keep = df["step"].isin(df["step"].iloc[:: math.ceil(len(df) / MAX_POINTS)])
    return df[keep | df["nonfinite"].astype(str).str.lower().eq("true")] if "nonfinite" in df else df[keep]


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.exists() and path.stat().st_size > 0 else pd.DataFrame()


def run_data(results: Path, run: str, label: str | None = None) -> dict:
    """Everything the page draws for one run, from its result folder's CSVs."""
    steps = _read(results / "steps.csv")
    steps = _thin(steps[steps["run"] == run].sort_values("step")) if len(steps) else steps
    val = steps.dropna(subset=["val_loss"]) if len(steps) else steps
    fp8, layers, events = (_read(results / f) for f in ("fp8.csv", "layers.csv", "events.csv"))
    scales = {}
    if len(fp8):
        for (module, role), g in fp8[fp8["run"] == run].groupby(["module", "role"], sort=False):
            scales[f"{module}.{role}"] = {"role": role, "step": g["step"].tolist(),
                                          **{s.column: _col(g, s.column) for s in panels.FP8_SERIES}}
    per_layer = {}
    if len(layers):
        for layer, g in layers[layers["run"] == run].groupby("layer", sort=False):
            per_layer[layer] = {"step": g["step"].tolist(),
                                **{s.column: _col(g, s.column) for s in panels.LAYER_SERIES
                                   if s.column in g and g[s.column].notna().any()}}
    mem_cols = [c for c in ("peak_mem_MiB", "alloc_MiB", "reserved_MiB", "rss_peak_MiB", "saved_act_MiB")
                if c in steps.columns and steps[c].notna().any()]
    ev = events[events["run"] == run] if len(events) else events
    return {
        "label": label or run,
        "steps": {"step": steps["step"].tolist() if len(steps) else [],
                  **{s.column: _col(steps, s.column) for s in panels.STEP_SERIES if s.column != "val_loss"
                     and s.panel not in ("p-mem", "p-events")}},  # memory: sparse points, below
        "val": {"step": val["step"].tolist() if len(val) else [], "loss": _col(val, "val_loss") if len(val) else []},
        "memory": {c.replace("_MiB", ""): _points(steps, c) for c in mem_cols},
        "scales": scales, "layers": per_layer,
        "events": [{"step": int(r.step), "kind": r.kind, "message": str(r.message),
                    "action": "" if pd.isna(r.action) else str(r.action)} for r in ev.itertuples()],
        "last_step": int(steps["step"].max()) if len(steps) else -1,
    }


def render(runs: list[dict], title: str, refresh_s: int | None = None) -> str:
    data = json.dumps({"runs": runs, "style": panels.as_json()}, separators=(",", ":"),
                      allow_nan=False).replace("</", "<\\/")
    js = (HERE / "dashboard.js").read_text()
    status = (f"live: this page reloads every {refresh_s} s while the run goes on" if refresh_s
              else "final")
    steps = ", ".join(f"{html.escape(r['label'])} to step {r['last_step']}" for r in runs)
    divs = "\n".join(f'<div class="panel" id="{p}"><h3></h3><div class="legend"></div></div>' for p in PANELS)
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">{refresh}
<title>{html.escape(title)}</title>
<style>
body {{ font: 13px system-ui, sans-serif; margin: 16px; color: #222; background: #f6f6f6; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }} .sub {{ color: #666; margin-bottom: 12px; }}
.grid {{ display: grid; grid-template-columns: repeat(2, 580px); gap: 12px; }}
.panel {{ background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: 6px 8px; }}
.panel h3 {{ font-size: 13px; margin: 2px 0 4px; }} .tick {{ font-size: 10px; fill: #555; }}
.axis {{ font-size: 11px; fill: #333; }} .legend span {{ margin-right: 10px; font-size: 11px; white-space: nowrap; }}
.legend i {{ display: inline-block; width: 10px; height: 10px; margin-right: 3px; vertical-align: -1px; }}
table {{ border-collapse: collapse; margin-top: 12px; background: #fff; max-width: 1172px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 6px; text-align: left; vertical-align: top; font-size: 12px; }}
</style></head>
<body>
<h1>{html.escape(title)}</h1>
<div class="sub">{status}; {steps}</div>
<div class="grid">
{divs}
</div>
<div id="events"></div>
<script>const DATA = {data};</script>
<script>
{js}
</script>
</body></html>
"""


def write(sources: list[tuple[Path, str, str | None]], out: Path, title: str, refresh_s: int | None = None) -> Path:
    """sources: (result folder, run name, label); the file is replaced atomically."""
    page = render([run_data(d, run, label) for d, run, label in sources], title, refresh_s)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page)
    tmp.replace(out)  # a browser reloading mid-write never sees half a page
    return out


def write_run_dashboard(results: Path, runs: list[str], out: Path, refresh_s: int | None = None) -> Path:
    return write([(results, r, None) for r in runs], out, f"fp8-train: {', '.join(runs)}", refresh_s)
