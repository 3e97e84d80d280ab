"""parallel-3d's answer, from its CSVs: does the GPT trained with TP x PP x DP reproduce one process exactly, and
does the planner account for what PyTorch really holds and sends? The wording is findings_template.md's, picked
by what the rows show (common.findings); report.py puts these lines first and draws the peak-memory plot.

    lines = opening(runs, at_scale, device_gb, gpu)
"""

from __future__ import annotations

from pathlib import Path

from common.findings import Finding, Sentences, gaps_sentence, listing
from planner.evidence.against_pytorch import peak_rows, planned_peak

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")
GB = 1e9


def _f(row: dict, key: str) -> float:
    return float(row[key]) if row.get(key, "") not in ("", "nan", None) else float("nan")


def layout(r: dict) -> str:
    """TP·PP·DP, with ·CP where context parallelism ran (rows written before it had no cp column)."""
    cp = r.get("cp") or "1"
    return f"TP{r['tp']}·PP{r['pp']}·DP{r['dp']}" + (f"·CP{cp}" if cp != "1" else "")


def parity_sentence(runs: list[dict]) -> str:
    if not runs:
        return S("parity.none")
    base = next((r for r in runs if layout(r) == "TP1·PP1·DP1"), None)
    multi = [r for r in runs if layout(r) != "TP1·PP1·DP1"]
    if base is None or not multi:
        return S("parity.no_base")
    gaps = [max(abs(_f(r, k) - _f(base, k)) / abs(_f(base, k)) for k in ("loss_first", "loss_last")) for r in multi]
    ok = sum(r["counts_match_design"] == "true" for r in runs)
    degrees = sorted({layout(r) for r in multi})
    schedules = sorted({r["schedule"] for r in multi})
    return S("parity.ok" if max(gaps) < 1e-5 else "parity.off", n=len(multi), degrees=listing(degrees),
             schedules=listing(schedules), recompute=listing(sorted({r["recompute"] for r in multi})),
             gap=max(gaps), ok=ok, total=len(runs), hardware=runs[0]["hardware"])


def memory_sentence(rows: list[dict], device_gb: float, gpu: str) -> str:
    """Each study's busiest measured rank at the step's peak against the planner's pytorch stack (what it prices)."""
    if not rows:
        return S("memory.none")
    state = [abs(_f(r, "explained_state_bytes") / sum(_f(r, k) for k in ("param_bytes", "grad_bytes", "opt_bytes"))
                 - 1) for r in rows]
    busiest = peak_rows(rows)
    parts = [f"{study} {peak / GB:.1f} GB (planner {planned_peak(r) / GB:.1f}, {planned_peak(r) / peak - 1:+.0%})"
             for study, r, peak in busiest]
    text = S("memory", residual=max(state), parts=listing(parts))
    over = [(study, r, peak) for study, r, peak in busiest if peak / GB > device_gb]
    if over:
        text += " " + S("memory.over", over=listing([f"{study} at {peak / GB:.1f} GB" for study, _, peak in over]),
                        gpu=gpu, device=device_gb,
                        planner=listing([f"{planned_peak(r) / GB:.1f} GB" for _, r, _ in over]))
    else:
        text += " " + S("memory.fits", gpu=gpu, device=device_gb)
    return text


def why_sentence(rows: list[dict]) -> str:
    """What the paper's accounting (the planner's megatron stack) would have priced for the same plans."""
    busiest = [(study, r, peak) for study, r, peak in peak_rows(rows) if r.get("megatron_total_bytes")]
    if not busiest:
        return S("why.none")
    parts = [f"{planned_peak(r, 'megatron_total_bytes') / GB:.1f} GB for {study} ({peak / GB:.1f} measured)"
             for study, r, peak in busiest]
    return S("why", parts=listing(parts))


def missing_sentence(runs: list[dict]) -> str:
    gaps = []
    if not any(r["backend"] == "nccl" for r in runs):
        gaps.append(S("missing.gpu"))
    if not any(r["backend"] == "nccl" and int(r["world_size"]) >= 8 for r in runs):
        gaps.append(S("missing.eight"))
    if not any((r.get("cp") or "1") != "1" for r in runs):
        gaps.append(S("missing.cp"))
    return gaps_sentence(S, gaps)


def opening(runs: list[dict], at_scale: list[dict], device_gb: float, gpu: str) -> list[Finding]:
    return [Finding("Question", S("question")), Finding("Answer", parity_sentence(runs)),
            Finding("Memory", memory_sentence(at_scale, device_gb, gpu)),
            Finding("Why", why_sentence(at_scale)), Finding("What it means", S("meaning")),
            Finding("Not measured yet", missing_sentence(runs))]
