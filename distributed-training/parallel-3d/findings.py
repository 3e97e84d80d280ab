"""parallel-3d's sentences, picked by what the CSVs show (the words: findings_template.md).

    opening(runs, at_scale, device_gb, gpu)    # the report's first lines
    peak_caption(at_scale, device_gb, gpu)     # the peak plot's caption: which plan fits as run
    activations_caption(rows, name)            # where PyTorch's activations equal, exceed or undercut the formula
    at_scale_caption(at_scale)                 # how far the planner is from PyTorch, bar by bar

Byte counts from a fake process group are exact (no noise): a comparison there is decided by the numbers alone.
The two planner stacks (docs/glossary.md): `pytorch` prices what parallel-3d runs, `megatron` the papers' count.
"""

from __future__ import annotations

from pathlib import Path

from common.findings import Finding, Sentences, gaps_sentence, listing, short_hardware, spread
from planner.evidence.against_pytorch import QUANTITIES, peak_rows, planned_peak, values

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
    count = lambda key: len({key(r) for r in multi})  # noqa: E731
    return S("parity.ok" if max(gaps) < 1e-5 else "parity.off", n=len(multi), degrees=count(layout),
             schedules=count(lambda r: r["schedule"]), recompute=count(lambda r: r["recompute"]), gap=max(gaps),
             ok=sum(r["counts_match_design"] == "true" for r in runs), total=len(runs),
             hardware=short_hardware(runs[0]["hardware"]))


def _errors(busiest, key: str = "planner_total_bytes") -> str:
    return "within " + spread([planned_peak(r, key) / peak - 1 for _, r, peak in busiest], "{:+.0%}")


def _over(busiest, device_gb: float) -> list[str]:
    return [study for study, _, peak in busiest if peak / GB > device_gb]


def memory_sentence(rows: list[dict], device_gb: float, gpu: str) -> str:
    """Each study's busiest measured rank at the step's peak, its fit, and the pytorch stack's price for it."""
    if not rows:
        return S("memory.none")
    busiest = peak_rows(rows)
    parts = listing([f"{peak / GB:.1f}{' GB' if i == 0 else ''} ({study})"
                     for i, (study, _, peak) in enumerate(busiest)])
    over = _over(busiest, device_gb)
    fit = S("memory.over", over=listing(over), gpu=gpu, device=device_gb) if over else \
        S("memory.fits", gpu=gpu, device=device_gb)
    return S("memory", parts=parts, fit=fit, err=_errors(busiest))


def papers_sentence(rows: list[dict], device_gb: float) -> str:
    """The papers' accounting (the megatron stack) for the same plans: does it judge any plan's fit otherwise than
    PyTorch's measured peak, and is it closer or farther than the pytorch stack?"""
    busiest = [(study, r, peak) for study, r, peak in peak_rows(rows) if r.get("megatron_total_bytes")]
    if not busiest:
        return S("papers.none")
    flips = [study for study, r, peak in busiest
             if (planned_peak(r, "megatron_total_bytes") / GB <= device_gb) != (peak / GB <= device_gb)]
    if flips:
        return S("papers.flips", err=_errors(busiest, "megatron_total_bytes"), flips=listing(flips))
    worst = lambda key: max(abs(planned_peak(r, key) / peak - 1) for _, r, peak in busiest)  # noqa: E731
    closer = worst("megatron_total_bytes") > worst("planner_total_bytes")
    return S("papers.same", err=_errors(busiest, "megatron_total_bytes"), closer=S("papers.closer") if closer else "")


def missing_sentence(runs: list[dict]) -> str:
    gaps = []
    if not any(r["backend"] == "nccl" for r in runs):
        gaps.append(S("missing.gpu"))
    if not any(r["backend"] == "nccl" and int(r["world_size"]) >= 8 for r in runs):
        gaps.append(S("missing.eight"))
    if not any((r.get("cp") or "1") != "1" for r in runs):
        gaps.append(S("missing.cp"))
    return gaps_sentence(S, gaps)


def peak_caption(rows: list[dict], device_gb: float, gpu: str) -> str:
    over = _over(peak_rows(rows), device_gb)
    return S("peak.caption", gpu=gpu, device=device_gb,
             fit=S("peak.over", over=listing(over)) if over else S("peak.fits"))


def activations_caption(rows: list[dict], name: str) -> str:
    kinds: dict[str, list[str]] = {"equal": [], "more": [], "less": []}
    for r in rows:
        ratio = float(r["measured_over_planner"])
        kind = "equal" if abs(ratio - 1) <= 0.01 else "more" if ratio > 1 else "less"
        kinds[kind].append(f"t = {r['tp']} {r['recompute']}")
    verdict = "; ".join(S(f"activations.{k}", which=listing(v)) for k, v in kinds.items() if v)
    return S("activations.caption", name=name, verdict=verdict)


def at_scale_caption(rows: list[dict]) -> str:
    gaps = [(abs(p / m - 1), p / m - 1, label, r) for r in rows for q, label in QUANTITIES
            for m, p, _ in [values(r, q)] if m]
    worst = max(gaps, key=lambda g: g[0])
    verdict = S("at_scale.close", worst=worst[0]) if worst[0] <= 0.05 else S(
        "at_scale.far", label=worst[2], study=worst[3]["study"], role=worst[3]["role"], err=f"{worst[1]:+.1%}")
    return S("at_scale.caption", verdict=verdict)


def opening(runs: list[dict], at_scale: list[dict], device_gb: float, gpu: str) -> list[Finding]:
    lines = [Finding("Answer", parity_sentence(runs)), Finding("Memory", memory_sentence(at_scale, device_gb, gpu))]
    if at_scale:
        lines.append(Finding("Papers", papers_sentence(at_scale, device_gb)))
    return lines + [Finding("What it means", S("meaning")), Finding("Not measured yet", missing_sentence(runs))]
