"""The planner against PyTorch, rendered as markdown from parallel-3d's results/at_scale.csv and
at_scale_terms.csv alone.

One renderer for two documents: parallel-3d's REPORT.md and the section "The planner against PyTorch" of
PARALLELISM_GUIDE.md (guide.py). Like the planner's other readers (own_runs.py, measured_runs.py) it reads
the lab's CSVs, never its code; SCHEMAS holds every parallel-3d CSV, so the lab's report checks its files
with the same `read`. Standard library and common.markdown only (no torch, no pandas), so the guide stays
quick to generate.

    PYTHONPATH=distributed-training python -m planner.evidence.against_pytorch    # the section, on stdout
"""

from __future__ import annotations

from pathlib import Path

from common import markdown
from common.csvread import Schema, read_rows
from planner.model.memory import CONTEXT_BYTES

from .ranking import CALIBRATION as RANKING_CALIBRATION, ROWS as RANKING_ROWS

RESULTS = Path(__file__).resolve().parents[2] / "parallel-3d" / "results"
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
    "ranking_calibration_": RANKING_CALIBRATION,  # the ranking set (parallel-3d/ranking.py, evidence/ranking.py)
    "ranking_": RANKING_ROWS,
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


def measured_peak(row: dict) -> float:
    """A measured rank's peak: its parameters and optimizer state, plus the most its step allocates at once (the
    gradients are allocated during the step, so they are in the step's peak, not added to it)."""
    return _f(row, "param_bytes") + _f(row, "opt_bytes") + _f(row, "peak_bytes")


def planned_peak(row: dict, key: str = "planner_total_bytes") -> float:
    """The planner's memory less the CUDA context, which a fake world does not allocate."""
    return _f(row, key) - CONTEXT_BYTES


def peak_rows(rows: list[dict]) -> list[tuple[str, dict, float]]:
    """(study, its busiest measured rank, that rank's peak) per study: the planner prices the busiest rank."""
    out: dict[str, tuple[dict, float]] = {}
    for r in rows:
        peak = measured_peak(r)
        if r["study"] not in out or peak > out[r["study"]][1]:
            out[r["study"]] = (r, peak)
    return [(study, r, peak) for study, (r, peak) in out.items()]


def peak_lines(rows: list[dict]) -> list[str]:
    """Memory at the peak, per study: PyTorch's busiest measured rank against the planner's pytorch stack (what it
    prices now) and its megatron stack (Korthikanti's activations, ZeRO's accounting: what it priced these plans
    with before it knew PyTorch's stack)."""
    out = []
    for study, r, peak in peak_rows(rows):
        torch_ = planned_peak(r)
        megatron = planned_peak(r, "megatron_total_bytes") if r.get("megatron_total_bytes") else None
        out.append([f"{study} ({r['role']} stage)", degrees(r), f"{peak / GB:.1f}", f"{torch_ / GB:.1f}",
                    _pct(torch_, peak), "-" if megatron is None else f"{megatron / GB:.1f}",
                    "-" if megatron is None else _pct(megatron, peak)])
    return table(["study (busiest measured rank)", "plan", "PyTorch GB", "planner, pytorch stack GB", "vs PyTorch",
                  "planner, megatron stack GB", "vs PyTorch"], out)


def cp_section(results: Path = RESULTS) -> str:
    """The CP plan at real size (at_scale_cp.csv): the ring's counted bytes against common/cp_bytes.py's formula
    and the planner's CP term, its peak against the planner's pytorch-stack memory."""
    path = results / "at_scale_cp.csv"
    if not path.exists():
        return "_Not measured yet: `make parallel-3d-at-scale`._"
    rows = read(path)
    body = []
    for r in rows:
        peak = measured_peak(r)
        planned = planned_peak(r) if r.get("planner_total_bytes") else None
        ring = _f(r, "cp_payload_bytes")
        body.append([f"{r['study']} ({r['role']})", f"TP{r['tp']}·PP{r['pp']}·DP{r['dp']}·CP{r['cp']} Z{r['run_zero']}, "
                     f"{r['microbatch']}×{r['num_microbatches']}, {r['recompute']}", r["seq"],
                     f"{ring / GB:.2f}", f"{_f(r, 'ring_formula_bytes') / GB:.2f}",
                     "-" if not r.get("planner_cp_bus_bytes") else f"{_f(r, 'planner_cp_bus_bytes') / GB:.2f}",
                     f"{peak / GB:.1f}", "-" if planned is None else f"{planned / GB:.1f}",
                     "-" if planned is None else _pct(planned, peak),
                     "yes" if r["counts_match_design"] == "true" else "**no**"])
    return "\n".join(table(["study (rank)", "plan (ran)", "seq", "ring GB sent", "ring formula GB",
                            "planner CP bus GB", "PyTorch peak GB", "planner GB", "vs PyTorch", "collectives = design"],
                           body))


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
        "Each study is the planner's first choice for the model a size names (Llama 3.1 8B, 70B, 405B), exactly what "
        "`make plan ARGS=\"--params MODEL --gpus GPUS\"` prints (the pytorch stack, the guide's batch rule; "
        "`planner_bridge.best_plan`), built by parallel-3d's own code as one rank of the full world on PyTorch's fake "
        "process group under FakeTensorMode, and stepped once through the real pipelining schedule (bf16 "
        "MixedPrecisionPolicy, fp32 reduce; `parallel-3d/at_scale.py`). ZeRO-0/1 are not FSDP2 modes: a planner "
        "choice of 0 or 1 runs as ZeRO-2 (no reshard after forward), and the planner's terms are evaluated for the "
        "stage that ran. Measured on "
        f"{first['hardware']}, torch {first['torch_version']}, commit {first['git_commit']}.", "",
        *plans, "",
        "State bytes are taken after backward, before the optimizer step; bus bytes are nccl-tests' (payload x "
        "2(n-1)/n for all-reduce, x (n-1)/n for all-gather and reduce-scatter; a pipeline send counts its "
        "payload once). The planner's bus bytes are its own time terms priced on a 1 byte/s, zero-latency "
        "cluster (`planner_bridge.py`). *Planner + named terms* adds the differences listed below, each "
        "computed from the model's shapes; the residual is what none of them explains.", "",
        *summary(rows), "",
        "The named differences, per measured rank:", "", *terms_section(rows, terms), "",
        "Memory at the step's peak: PyTorch's parameters and optimizer state plus the most its step holds at once "
        "(gathered parameters, gradients, unsharded under a pipeline, activations of the micro-batches in flight, "
        "the loss and kept logits, pipeline buffers), on the busier of the measured ranks, beside the planner's "
        "memory for the pytorch stack (`planner/model/torch_memory.py`, its busiest rank) and, for contrast, for the "
        "megatron stack (Korthikanti's activations with sequence parallelism, ZeRO's accounting), both less the "
        "1 GB of CUDA context a fake world does not allocate:", "",
        *peak_lines(rows)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
