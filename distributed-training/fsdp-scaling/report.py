"""REPORT.md and its plots, from results/*.csv alone (make fsdp-scaling-report).

Metrics are defined once, here and in the runners' docstrings: scaling efficiency
E(N) = T(N) / (N T(1)) with T = tokens/s of the same strategy and mode at world size 1; memory per
rank = the largest rank's bytes; bus bytes per rank as nccl-tests defines them (measure.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from common import measured_on
from common.config import parse_config
from common.csvread import BadResults, Schema, check_configs, guard_report, read_tables, report_path, results_folder
from common.findings import block, fill
from common.hardware import PRESETS
from common.markdown import frame, number
import findings
import measured
import report_plots
from findings import ORDER, S
from published import WEAK_SCALING_8B, ZERO_FIGURE_1, ZERO_SOURCE

LAB = Path(__file__).resolve().parent
RES = LAB / "results"  # rebound by main() to --results
MiB = 2**20
_PROV = {"hardware": str, "backend": str, "torch_version": str}
# What the report reads from each kind of file (common.csvread checks it before pandas does); each key is the one its
# writer replaces rows by (bench.py, at_scale.py, overlap.py, project.py).
SCHEMAS = {
    "scaling_*.csv": Schema("fsdp-scaling sweep", {
        **_PROV, "strategy": str, "mode": str, "model": str, "world_size": int, "tokens_per_s": float,
        "step_time_ms": float, "step_time_min_ms": float, "step_time_max_ms": float, "peak_mem_bytes": float,
        "loss_last": float, "mfu": float, "effective_batch": int, "grad_accum": int, "mem_method": str}, finite=True,
        key=("strategy", "mode", "world_size", "nnodes")),
    "at_scale.csv": Schema("fsdp-scaling at-scale study", {
        "strategy": str, "world_size": int, "model": str, "n_params": int, "param_bytes": float,
        "grad_bytes": float, "opt_bytes_worst_rank": float, "model_param_bytes": float, "model_grad_bytes": float,
        "model_opt_bytes": float, "exact_model_state_bytes": float, "paper_model_state_bytes": float,
        "unsharded_peak_bytes": float,
        "model_unsharded_bytes": float, "all_gathers": int, "reduce_scatters": int, "all_reduces": int,
        "broadcasts": int, "bus_bytes_per_rank": float, "model_bus_bytes_per_rank": float}, finite=True,
        key=("strategy", "world_size")),
    "comms_*.csv": Schema("fsdp-scaling collectives", {  # header only when every launch had one rank
        "strategy": str, "collective": str, "group_size": int, "grad_accum": int, "count": int,
        "payload_bytes": float, "model_count": int, "model_payload_bytes": float, "world_size": int, "nnodes": int},
        allow_empty=True, finite=True, key=("strategy", "collective", "group_size", "world_size", "nnodes")),
    "projection.csv": Schema("fsdp-scaling projection", {
        "target": str, "model": str, "n_params": float, "strategy": str, "mode": str, "n_gpus": int,
        "efficiency_no_overlap": float, "efficiency_full_overlap": float, "fits_in_memory": bool,
        "compute_source": str, "bandwidth_source": str}, finite=True,
        key=("target", "model", "strategy", "mode", "n_gpus")),
    "zero_worked_example.csv": Schema("ZeRO worked example", {
        "psi": float, "n_d": int, "k": float, "baseline_GB": float, "zero1_GB": float, "zero2_GB": float,
        "zero3_GB": float}, finite=True, key=("example",)),
    "overlap_*.csv": Schema("fsdp-scaling overlap", {
        "hardware": str, "world_size": int, "strategy": str, "prefetch": bool, "step_time_ms": float,
        "compute_ms": float, "comm_ms": float, "exposed_comm_ms": float, "exposed_fraction": float}, finite=True,
        key=("strategy", "prefetch", "world_size", "nnodes")),
}


@dataclass(frozen=True)
class ReportConfig:
    results: str = field(default=str(RES), metadata={"help": "folder holding the CSVs (plots are written there)"})
    out: str = field(default=str(LAB / "REPORT.md"), metadata={"help": "the report to write"})


def read(pattern: str) -> pd.DataFrame:
    """The rows of every file matching `pattern`; a pattern of several files (scaling_*.csv: one per
    result set, scaling_<preset>_ws<N>[_n<nodes>]) adds the column `set`, the file's stem."""
    df = read_tables(RES, pattern, SCHEMAS[pattern], required=False, source="set" if "*" in pattern else "")
    # a file that is not there (e.g. no projection yet) reads as no rows, with the columns it would have
    return df if len(df.columns) else pd.DataFrame(columns=[*SCHEMAS[pattern].columns, "set"])


def table(df: pd.DataFrame, spec: str = ".3g") -> str:
    return frame(df, fmt=lambda v: number(v, spec))


def section_memory(a: pd.DataFrame, worked: pd.DataFrame) -> list[str]:
    a = findings.states(a).assign(exact=a["exact_model_state_bytes"])
    pick = a[a["world_size"].isin([8, 128, int(a["world_size"].max())])]
    t = pd.DataFrame({"strategy": pick["strategy"], "ranks": pick["world_size"],
                      "measured MiB/rank": pick["held"] / MiB, "ZeRO formula, as held MiB": pick["formula"] / MiB,
                      "paper's stage MiB": pick["paper_model_state_bytes"] / MiB,
                      "vs formula": (pick["held"] / pick["formula"] - 1).map("{:+.1%}".format),
                      "vs exact model": (pick["held"] / pick["exact"] - 1).map("{:+.1%}".format),
                      "gathered params peak MiB": pick["unsharded_peak_bytes"] / MiB,
                      "model (largest unit, padded) MiB": pick["model_unsharded_bytes"] / MiB})
    upto = a[a["strategy"].isin(["ddp", "zero2", "zero3", "hsdp"]) & (a["world_size"] <= 128)]
    out = [S("memory.lead", model=a["model"].iloc[0], params=int(a["n_params"].iloc[0]),
             worst=findings.bound((upto["held"] / upto["formula"] - 1).abs().max()),
             exact=findings.bound((a["held"] / a["exact"] - 1).abs().max()),
             n=int(a["world_size"].max()), width=a["model"].iloc[0].split("-")[0].removeprefix("d")), "", table(t), "",
           f"![memory](results/{report_plots.memory_at_scale(a, RES / 'memory_at_scale.png').name})", "",
           findings.memory_caption(a), ""]
    if not worked.empty:
        w = worked.iloc[0]
        rows = [["published", *ZERO_FIGURE_1],
                ["common/zero_memory.py", *(w[f"{k}_GB"] for k in ZERO_FIGURE_1._fields)]]
        out += [S("worked", source=ZERO_SOURCE, psi=w["psi"] / 1e9, n_d=int(w["n_d"]), k=int(w["k"])), "",
                table(pd.DataFrame(rows, columns=["", "baseline", "ZeRO-1", "ZeRO-2", "ZeRO-3"])), ""]
    return out


def section_comms(a: pd.DataFrame, c: pd.DataFrame) -> list[str]:
    w = 64 if 64 in set(a["world_size"]) else int(a["world_size"].min())
    g = a[a["world_size"] == w]
    unit = 4 * g["n_params"]  # one fp32 element per parameter = "1 Psi" of traffic
    out = [S("comms.lead", n=w), "", table(pd.DataFrame({
        "strategy": g["strategy"], "all-gathers": g["all_gathers"], "reduce-scatters": g["reduce_scatters"],
        "all-reduces": g["all_reduces"], "broadcasts": g["broadcasts"],
        "bus bytes/rank (Ψ)": g["bus_bytes_per_rank"] / unit, "model (Ψ)": g["model_bus_bytes_per_rank"] / unit})), ""]
    if not c.empty:
        fake = (a["bus_bytes_per_rank"] - a["model_bus_bytes_per_rank"]).abs() <= 1e-6 * a[
            "model_bus_bytes_per_rank"].abs().clip(lower=1)
        out += [S("comms.real", accum=int(c["grad_accum"].iloc[0]), rows=len(c),
                  ok=int(((c["count"] == c["model_count"]) & (c["payload_bytes"] == c["model_payload_bytes"])).sum()),
                  fake=int(fake.sum()), fake_rows=len(a),
                  worlds=f"{a['world_size'].min()}-{a['world_size'].max()}"), ""]
    return out


def comms_grid(c: pd.DataFrame) -> list[str]:
    """Every counted collective on real ranks beside the plan (the appendix)."""
    if c.empty:
        return [S("comms_grid.none")]
    c = c.assign(cell=c["count"].astype(str) + " / " + c["model_count"].astype(str))
    piv = c.pivot_table(index=["strategy", "collective", "group_size"], columns=["world_size", "nnodes"],
                        values="cell", aggfunc="first")  # one column per world size and node count
    piv.columns = [f"N={n}" + (f" on {k} nodes" if k > 1 else "") + ": measured / model" for n, k in piv.columns]
    return [table(piv.reset_index().fillna("–"))]


def weak_scaling_anchor(p: pd.DataFrame) -> list[str]:
    """The published 8B FSDP weak-scaling run beside the projection's zero3 bounds (per-GPU rate kept)."""
    small, large = WEAK_SCALING_8B
    lo, hi = small.gpus, large.gpus
    z = p[(p["strategy"] == "zero3") & (p["mode"] == "weak")].set_index("n_gpus")
    if not {lo, hi} <= set(z.index):
        return []
    pub = large.tokens_per_s_per_gpu / small.tokens_per_s_per_gpu
    bounds = ("no_overlap", "full_overlap")
    kept = {b: z.loc[hi, f"efficiency_{b}"] / z.loc[lo, f"efficiency_{b}"] for b in bounds}
    rows = [[f"published: {small.setting} ({small.source})", f"{small.tokens_per_s_per_gpu:,.0f} tok/s/GPU",
             f"{large.tokens_per_s_per_gpu:,.0f} tok/s/GPU", f"{pub:.1%}"]]
    rows += [[f"PROJECTION, zero3, {b.replace('_', ' ')}", f"E = {z.loc[lo, f'efficiency_{b}']:.3f}",
              f"E = {z.loc[hi, f'efficiency_{b}']:.3f}", f"{kept[b]:.1%}"] for b in bounds]
    return [S("anchor.lead", lo=lo, hi=hi), "",
            table(pd.DataFrame(rows, columns=["", f"{lo} GPUs", f"{hi} GPUs", "kept"])), "",
            findings.anchor_verdict(pub, kept), ""]


def _batch(p: pd.DataFrame) -> str:
    """The projection's batch, from its rows: strong keeps the global batch, weak the tokens per GPU."""
    parts = []
    for mode, g in p.groupby("mode"):
        per = g.sort_values("n_gpus")["tokens_per_rank"]
        lo, hi = int(g["n_gpus"].min()), int(g["n_gpus"].max())
        parts.append(f"{mode}: {per.iloc[0] * lo:,.0f} tokens per step in all (from {per.iloc[0]:,.0f} tokens per GPU "
                     f"at {lo} to {per.iloc[-1]:,.0f} at {hi} GPUs)" if mode == "strong" else
                     f"{mode}: {per.iloc[0]:,.0f} tokens per GPU per step at every GPU count")
    return "; ".join(parts)


def section_projection(proj: pd.DataFrame) -> list[str]:
    out = []
    for (target, model), p in proj[proj["target"] != "cpu"].groupby(["target", "model"]):
        pick = p[p["n_gpus"].isin([8, 64, 1024])]
        piv = pick.assign(eff=pick["efficiency_no_overlap"].map("{:.2f}".format) + " .. "
                          + pick["efficiency_full_overlap"].map("{:.2f}".format)
                          + pick["fits_in_memory"].map({False: " (OOM)"}).fillna(""))
        piv = piv.pivot_table(index=["mode", "n_gpus"], columns="strategy", values="eff", aggfunc="first")
        png = report_plots.projection(proj, target, model, RES / f"projection_{target}_{model}.png")
        out += [S("projection.lead", model=model, params=p["n_params"].iloc[0] / 1e9, target=target,
                  compute=findings.tidy(p["compute_source"].iloc[0]), bandwidth=p["bandwidth_source"].iloc[0],
                  batch=_batch(p)), "", table(piv.reset_index()), "", f"![projection, {model}](results/{png.name})",
                "", findings.projection_caption(p), ""]
        out += weak_scaling_anchor(p) if model == WEAK_SCALING_8B[0].model else []
    return out or ["No projection rows (run project.py)."]


def section_overlap(ov: pd.DataFrame, s: pd.DataFrame) -> list[str]:
    """The profiled overlap; a table of zeros (one rank: nothing to overlap) is one sentence instead."""
    if ov.empty:
        return [S("overlap.none")]
    timed = s[(s["backend"] == "nccl") & (s["world_size"] == 1) & (s["mode"] == "strong")]["step_time_ms"]
    note = S("overlap.profiled", lo=ov["step_time_ms"].min(), hi=ov["step_time_ms"].max(), t_lo=timed.min(),
             t_hi=timed.max()) if len(timed) else ""
    if (ov["comm_ms"] == 0).all() and (ov["world_size"] == 1).all():
        return [S("overlap.one_rank", n=len(ov), strategies=", ".join(sorted(set(ov["strategy"]))),
                  hardware=ov["hardware"].iloc[0]) + " " + note]
    return [table(ov[["hardware", "world_size", "strategy", "prefetch", "step_time_ms", "compute_ms", "comm_ms",
                      "exposed_comm_ms", "exposed_fraction"]]), "", note]


def answer(a: pd.DataFrame, s: pd.DataFrame, proj: pd.DataFrame) -> list[str]:
    """The projected memory plot and one row per strategy: what the answer rests on, from each CSV (measured or
    PROJECTION, said per column)."""
    gp = proj[proj["target"] != "cpu"]
    if gp.empty:
        return []
    model = gp.groupby("model")["n_params"].first().idxmax()
    target = gp[gp["model"] == model]["target"].iloc[0]
    cap = PRESETS[target].memory_gb if target in PRESETS else None
    png = report_plots.memory_per_gpu(proj, target, model, RES / f"memory_per_gpu_{target}_{model}.png")
    gp = gp[(gp["model"] == model) & (gp["mode"] == "weak")]
    counts = [n for n in (8, 64, 1024) if n in set(gp["n_gpus"])]
    held = findings.states(a[a["world_size"] <= 128])
    one = findings.gpu_one_rank(s)
    cost = findings.step_spreads(one) if "single" in set(one["strategy"]) else {}
    rows = []
    for strat in ORDER[1:]:
        g = gp[gp["strategy"] == strat].set_index("n_gpus")
        if g.empty:
            continue
        h = held[held["strategy"] == strat]
        rows.append([strat, *(f"{g.loc[n, 'state_GB_per_rank']:.0f}" + ("" if str(g.loc[n, "fits_in_memory"]) == "True"
                                                                         else " (OOM)") for n in counts),
                     f"{(h['held'] / h['formula'] - 1).abs().max():.2%}" if len(h) else "–",
                     *(cost[(m, strat)].pct() if (m, strat) in cost else "–" for m in ("strong", "weak"))])
    where = one["hardware"].iloc[0] if len(one) else "GPU"
    return [f"![model states per GPU against the GPU's memory](results/{png.name})", "",
            findings.answer_caption(proj, cap), "", S("decision.lead"), "",
            table(pd.DataFrame(rows, columns=["strategy", *[f"PROJECTION {model} states GB/GPU at {n} {target} GPUs"
                                                            for n in counts],
                                              "measured vs ZeRO formula (<= 128 ranks)",
                                              f"1-rank step vs plain, strong ({where})", "same, weak"]))]


@guard_report
def main(argv: list[str] | None = None) -> int:
    global RES
    cfg = parse_config(ReportConfig, argv, description=__doc__, prog="report.py")
    default, RES = RES, results_folder(cfg.results, "run `make fsdp-scaling-run`")  # the plots go there too
    try:
        check_configs(RES)
        return _report(cfg)
    finally:
        RES = default


def _report(cfg: ReportConfig) -> int:
    out = report_path(cfg.out)
    s, a, c = read("scaling_*.csv"), read("at_scale.csv"), read("comms_*.csv")
    proj, worked, ov = read("projection.csv"), read("zero_worked_example.csv"), read("overlap_*.csv")
    if s.empty and a.empty and proj.empty:
        raise BadResults(f"no scaling_*.csv, at_scale.csv or projection.csv in {RES}; run `make fsdp-scaling-run`")
    text = fill(LAB / "report_template.md",
                findings=block(findings.opening(s, a, c, proj, ov), one_screen=True), answer=answer(a, s, proj),
                memory=section_memory(a, worked) if not a.empty else ["No at_scale.csv yet (make fsdp-scaling-run)."],
                comms=section_comms(a, c) if not a.empty else [],
                measured=measured.section_measured(s, RES) if not s.empty else ["No scaling CSV yet."],
                projection=section_projection(proj), overlap=section_overlap(ov, s),
                across_nodes=findings.across_nodes(proj),
                measured_on=measured_on.paragraph(RES, ["scaling_*.csv", "comms_*.csv", "overlap_*.csv", "at_scale.csv",
                                                        "projection.csv"],
                                                  "`make fsdp-scaling-gpu` (one GPU) or `make fsdp-scaling`"),
                caveats=["### CPU caveats", "", findings.cpu_caveat(s)] if (s["backend"] == "gloo").any() else [],
                losses=[line for name, g in s.groupby("set", sort=False) for line in
                        [f"`{name}.csv` ({g['hardware'].iloc[0]}):", "", *loss_table(g), ""]],
                comms_grid=comms_grid(c))
    out.write_text(text)
    print(f"wrote {out}")
    return 0


def loss_table(s: pd.DataFrame) -> list[str]:
    spread = s.groupby(["world_size", "mode"])["loss_last"].agg(["min", "max"]).reset_index()
    spread["spread"] = spread["max"] - spread["min"]
    spread["agree"] = spread["spread"].map(lambda v: "yes" if v <= findings.LOSS_AGREE else "**no**")
    return [table(spread, ".6g"), "", *findings.loss_flags(s)]


if __name__ == "__main__":
    raise SystemExit(main())
