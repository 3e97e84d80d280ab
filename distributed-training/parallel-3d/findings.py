"""parallel-3d's answer, from its CSVs: does the GPT trained with TP x PP x DP reproduce one process exactly, and
does the planner account for what PyTorch really holds and sends? The wording is findings_template.md's, picked
by what the rows show (common.findings); report.py puts these lines first and draws the peak-memory plot.

    lines = opening(runs, at_scale, device_gb, activation_ratios)
"""

from __future__ import annotations

from pathlib import Path

from common.findings import Finding, Sentences, listing

LAB = Path(__file__).resolve().parent
S = Sentences(LAB / "findings_template.md")
GB = 1e9


def _f(row: dict, key: str) -> float:
    return float(row[key]) if row.get(key, "") not in ("", "nan", None) else float("nan")


def peak_bytes(r: dict) -> float:
    """PyTorch's state plus everything the step held at once (at_scale.csv's peak_bytes is the step's extra)."""
    return sum(_f(r, k) for k in ("param_bytes", "grad_bytes", "opt_bytes", "peak_bytes"))


def label(r: dict) -> str:
    return f"{r['study']}" + (f" ({r['role']} stage)" if r["role"] != "first" or int(r["pp"]) > 1 else "")


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
    if not rows:
        return S("memory.none")
    state = [abs(_f(r, "explained_state_bytes") / sum(_f(r, k) for k in ("param_bytes", "grad_bytes", "opt_bytes"))
                 - 1) for r in rows]
    over = [r for r in rows if peak_bytes(r) / GB > device_gb]
    parts = [f"{label(r)} {peak_bytes(r) / GB:.1f} GB (planner {_f(r, 'planner_total_bytes') / GB:.1f})" for r in rows]
    text = S("memory", residual=max(state), parts=listing(parts))
    if over:
        text += " " + S("memory.over", over=listing([f"{label(r)} at {peak_bytes(r) / GB:.1f} GB" for r in over]),
                        gpu=gpu, device=device_gb, planner=listing([f"{_f(r, 'planner_total_bytes') / GB:.1f} GB"
                                                                    for r in over]))
    else:
        text += " " + S("memory.fits", gpu=gpu, device=device_gb)
    return text


def why_sentence(rows: list[dict], ratios: dict[str, float]) -> str:
    if not ratios:
        return S("why.none")
    worst = max(rows, key=lambda r: ratios.get(label(r), 0))
    return S("why", parts=listing([f"{ratios[label(r)]:.2f}x (t = {r['tp']})" for r in rows if label(r) in ratios
                                   and r["role"] == "first"]), study=label(worst))


def missing_sentence(runs: list[dict]) -> str:
    gaps = []
    if not any(r["backend"] == "nccl" for r in runs):
        gaps.append(S("missing.gpu"))
    if not any(r["backend"] == "nccl" and int(r["world_size"]) >= 8 for r in runs):
        gaps.append(S("missing.eight"))
    with_cp = any((r.get("cp") or "1") != "1" for r in runs)
    gaps.append(S("missing.cp_planner" if with_cp else "missing.cp"))
    text = S("missing.lead", gaps="; ".join(gaps))
    return text[:1].upper() + text[1:]


def opening(runs: list[dict], at_scale: list[dict], device_gb: float, gpu: str,
            ratios: dict[str, float]) -> list[Finding]:
    return [Finding("Question", S("question")), Finding("Answer", parity_sentence(runs)),
            Finding("Memory", memory_sentence(at_scale, device_gb, gpu)),
            Finding("Why", why_sentence(at_scale, ratios)), Finding("What it means", S("meaning")),
            Finding("Not measured yet", missing_sentence(runs))]
