"""The planner against PyTorch, rendered as markdown from parallel-3d's results/at_scale.csv and
at_scale_terms.csv alone.

One renderer for two documents: parallel-3d's REPORT.md and the section "The planner against PyTorch" of
PARALLELISM_GUIDE.md (guide.py). Like the planner's other readers (own_runs.py, measured_runs.py) it reads
the lab's CSVs, never its code; SCHEMAS holds every parallel-3d CSV, so the lab's report checks its files
with the same `read`. Standard library and common.markdown only (no torch, no pandas), so the guide stays
quick to generate.

    PYTHONPATH=distributed-training python -m planner.against_pytorch    # the section, on stdout
"""

from __future__ import annotations

from pathlib import Path

from common import markdown
from common.csvread import Schema, read_rows

RESULTS = Path(__file__).resolve().parent.parent / "parallel-3d" / "results"
GB = 1e9
QUANTITIES = (("state", "state bytes (params + grads + optimizer)"), ("tp", "TP bus bytes / step"),
              ("pp", "PP bytes sent / step"), ("dp", "DP bus bytes / step"))


# What the report reads from each kind of file, checked by common/csvread.py before it is used.
_PROV = {"hardware": str, "world_size": int, "backend": str, "git_commit": str}
SCHEMAS = {
    "runs_": Schema("parallel-3d runs", {**_PROV, "variant": str, "tp": int, "pp": int, "dp": int,
                                         "step_time_ms": float, "loss_first": float, "loss_last": float}, finite=True,
                     key=("variant", "tp", "pp", "dp", "world_size", "nnodes")),
    # a header alone is a complete result: launches of one rank (the 1-GPU baseline) issue no collective
    "comms_": Schema("parallel-3d collectives", {**_PROV, "variant": str, "tp": int, "pp": int, "dp": int,
                                                 "kind": str, "count": int, "payload_bytes": float},
                     allow_empty=True, finite=True),
    "activations_": Schema("parallel-3d activations", {"tp": int, "recompute": str, "measured_bytes": float,
                                                       "planner_bytes": float}, finite=True),
    "at_scale_terms": Schema("parallel-3d planner terms", {"study": str, "role": str, "quantity": str, "term": str,
                                                          "bytes": float}, finite=True),
    "at_scale_cp": Schema("parallel-3d at-scale CP study", {"study": str, "role": str, "baseline_study": str,
                                                            "world": int, "cp": int, "param_bytes": float,
                                                            "cp_payload_bytes": float, "ring_formula_bytes": float},
                          finite=True),
    "at_scale": Schema("parallel-3d at-scale study", {"study": str, "role": str, "world": int, "tp": int, "pp": int,
                                                      "dp": int, "param_bytes": float}, finite=True),
}


def read(path: Path) -> list[dict]:
    """A results CSV as dicts of text, after common/csvread.py's checks (one line naming a bad file)."""
    schema = next((s for prefix, s in SCHEMAS.items() if path.name.startswith(prefix)), Schema(path.stem))
    return read_rows(path, schema)


def table(header: list[str], rows: list[list]) -> list[str]:
    """common.markdown's table, first column left, the rest right, as lines."""
    return markdown.table(header, rows, align="l" + "r" * (len(header) - 1)).split("\n")


def _f(row: dict, key: str) -> float:
    return float(row[key] or 0)


def _gb(x: float) -> str:
    return f"{x / GB:.3f}"


def _signed(x: float) -> str:
    """A term's size: GB, or MB when small (so a few MB of padding do not print as 0.000 GB)."""
    return f"{x / GB:+.3f} GB" if abs(x) >= 0.01 * GB else f"{x / 1e6:+.3f} MB"


def _pct(a: float, b: float) -> str:
    return "-" if b == 0 else f"{(a - b) / b:+.1%}"


def values(row: dict, q: str) -> tuple[float, float, float]:
    """(measured, planner, planner + named terms) of one quantity of one at-scale row."""
    if q == "state":
        return (_f(row, "param_bytes") + _f(row, "grad_bytes") + _f(row, "opt_bytes"),
                _f(row, "planner_state_bytes"), _f(row, "explained_state_bytes"))
    return _f(row, f"{q}_bus_bytes"), _f(row, f"planner_{q}_bus_bytes"), _f(row, f"explained_{q}_bus_bytes")


def degrees(row: dict) -> str:
    v = f", v={row['interleave']}" if row["interleave"] != "1" else ""
    zero = f"Z{row['planner_zero']}" + (f"→Z{row['run_zero']}" if row["planner_zero"] != row["run_zero"] else "")
    return (f"TP{row['tp']}·PP{row['pp']}·DP{row['dp']} {zero}, {row['microbatch']}×{row['num_microbatches']}"
            f"{v}, {row['recompute']}")


def summary(rows: list[dict]) -> list[str]:
    """One line per measured rank and quantity: measured, planner, explained, residual."""
    out = []
    for r in rows:
        for q, label in QUANTITIES:
            m, p, e = values(r, q)
            if m == p == e == 0:
                continue
            out.append([f"{r['study']} ({r['role']} stage)", label, _gb(m), _gb(p), _pct(p, m), _gb(e),
                        _pct(e, m)])
    return table(["study (rank)", "quantity", "PyTorch GB", "planner GB", "planner vs PyTorch",
                  "planner + named terms GB", "residual"], out)


def terms_section(rows: list[dict], terms: list[dict]) -> list[str]:
    out = []
    for r in rows:
        mine = [t for t in terms if t["study"] == r["study"] and t["role"] == r["role"]]
        if not mine:
            continue
        out.append(f"- **{r['study']}, {r['role']} stage** ({degrees(r)}):")
        for t in mine:
            out.append(f"  - {t['quantity']}: {_signed(float(t['bytes']))}, {t['term']}")
    return out


def peak_lines(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        state = sum(_f(r, k) for k in ("param_bytes", "grad_bytes", "opt_bytes"))
        out.append([f"{r['study']} ({r['role']})", _gb(state + _f(r, "peak_bytes")),
                    _gb(_f(r, "planner_total_bytes")), _gb(_f(r, "planner_activations_bytes")),
                    _gb(_f(r, "planner_buffers_bytes"))])
    return table(["study (rank)", "PyTorch state + step peak GB", "planner total GB", "of which activations",
                  "of which buffers"], out)


def render(results: Path = RESULTS) -> str:
    """The whole section body (no heading), or one line saying the study has not run."""
    at, tm = results / "at_scale.csv", results / "at_scale_terms.csv"
    if not at.exists() or not tm.exists():
        return "_Not measured yet: run `make parallel-3d-at-scale`._"
    rows, terms = read(at), read(tm)
    first = rows[0]
    plans = table(["study", "model", "planner's choice (ran)", "ranks measured", "collectives = design"],
                  [[r["study"], f"{float(r['n_params']) / 1e9:.1f}B: L{r['layers']} h{r['hidden']} "
                    f"a{r['heads']} V{r['vocab']} s{r['seq']}", degrees(r), r["role"],
                    "yes" if r["counts_match_design"] == "true" else "**no**"] for r in rows])
    lines = [
        "Each study is the planner's first choice for a standard model with context parallelism pinned off (`make "
        "plan --cp 1`: parallel-3d has none; `planner_bridge.best_plan`), built by "
        "parallel-3d's own code as one rank of the full world on PyTorch's fake process group under "
        "FakeTensorMode, and stepped once through the real pipelining schedule (bf16 MixedPrecisionPolicy, "
        "fp32 reduce; `parallel-3d/at_scale.py`). ZeRO-0/1 are not FSDP2 modes: a planner choice of 0 or 1 "
        "runs as ZeRO-2 (no reshard after forward), and the planner's terms are evaluated for the stage that "
        "ran. Measured on "
        f"{first['hardware']}, torch {first['torch_version']}, commit {first['git_commit']}.", "",
        *plans, "",
        "State bytes are taken after backward, before the optimizer step; bus bytes are nccl-tests' (payload x "
        "2(n-1)/n for all-reduce, x (n-1)/n for all-gather and reduce-scatter; a pipeline send counts its "
        "payload once). The planner's bus bytes are its own time terms priced on a 1 byte/s, zero-latency "
        "cluster (`planner_bridge.py`). *Planner + named terms* adds the differences listed below, each "
        "computed from the model's shapes; the residual is what none of them explains.", "",
        *summary(rows), "",
        "The named differences, per measured rank:", "", *terms_section(rows, terms), "",
        "Memory at the step's peak: PyTorch's state plus everything the step holds at once (gathered parameters, "
        "unsharded gradients under a pipeline, activations of the micro-batches in flight, logits), beside the "
        "planner's total (its activations are Korthikanti's with sequence parallelism; its buffers 1 GB of "
        "context plus communication buckets, which a fake world does not allocate):", "",
        *peak_lines(rows)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
