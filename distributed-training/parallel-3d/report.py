"""REPORT.md and its plots from parallel-3d's CSVs alone (results/runs_*, comms_*, activations_*, at_scale*).

    make parallel-3d-report
    PYTHONPATH=distributed-training python distributed-training/parallel-3d/report.py

The skeleton is report_template.md, the sentences findings_template.md (picked by findings.py from what the
CSVs show); this file fills the skeleton's {{sections}} with tables, plots and those sentences. One block per
preset file (runs_cpu.csv, runs_h100.csv, ...), so CPU and GPU runs sit side by side, each labelled with its
hardware.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from common import measured_on
from common.config import parse_config
from common.csvread import BadResults, check_configs, guard_report, report_path
from common.findings import block, cores, fill, shares_cores, signed
from common.hardware import get_preset
from common.plotting import new_figure, save
import findings
from findings import S
from planner.evidence import against_pytorch as ap
from settings import recompute_name

LAB = Path(__file__).resolve().parent
MIB = 2**20


def read(path: Path) -> list[dict]:
    """A results CSV's rows (against_pytorch.read's checks), recompute settings by their one name: a row written
    when this lab called per-op recompute 'selective' reads as op (settings.recompute_name)."""
    rows = ap.read(path)
    for r in rows:
        if "recompute" in r:
            r["recompute"] = recompute_name(r["recompute"])
        if "variant" in r:
            r["variant"] = r["variant"].replace("-selective-", "-op-")
    return rows


@dataclass(frozen=True)
class ReportConfig:
    results: str = field(default=str(LAB / "results"), metadata={"help": "folder holding the CSVs"})
    out: str = field(default=str(LAB / "REPORT.md"),
                     metadata={"help": "the report to write (plots in plots/ beside it)"})

    def __post_init__(self):
        if not Path(self.results).is_dir():
            raise ValueError(f"no results folder {self.results} (run make parallel-3d first)")


def _f(row: dict, key: str) -> float | None:
    v = row.get(key, "")
    return None if v in ("", "nan", None) else float(v)


def _num(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def provenance(rows: list[dict]) -> str:
    """The machine and versions of a file's rows; a file merged from several launches lists each commit."""
    def distinct(key: str, n: int = 12) -> str:
        return ", ".join(dict.fromkeys(x[key][:n] for x in rows))

    worlds = sorted({int(x["world_size"]) for x in rows})
    days = sorted(x["timestamp_utc"][:10] for x in rows)
    return (f"{distinct('hardware', 200)}; {', '.join(map(str, worlds))} rank{'s' if worlds != [1] else ''}; "
            f"{distinct('backend')}; torch "
            f"{distinct('torch_version', 40)}, CUDA {distinct('cuda_version')}, NCCL {distinct('nccl_version')}; "
            f"commit {distinct('git_commit')}, {' to '.join(dict.fromkeys((days[0], days[-1])))}")


def _mib(row: dict, key: str, spec: str) -> str:
    x = _f(row, key)
    return "-" if x is None else format(x / MIB, spec)


def _loss_gap(row: dict, base: dict | None) -> str:
    if base is None:
        return "-"
    gaps = [abs(float(row[k]) - float(base[k])) / abs(float(base[k])) for k in ("loss_first", "loss_last")]
    return f"{max(gaps):.1e}"


EMPTY_ON_CPU = ("MFU", "planner step s", "planner exposed comm s")  # columns a CPU run leaves empty


def runs_section(results: Path) -> list[str]:
    out = []
    for path in sorted(results.glob("runs_*.csv")):
        rows = read(path)
        if not rows:
            continue
        base = next((r for r in rows if findings.layout(r) == "TP1·PP1·DP1"), None)
        body = []
        for r in rows:
            mfu = _f(r, "mfu")
            body.append([findings.layout(r), r["schedule"], r["stage_layers"].replace(";", ","),
                         f"Z{r['zero']}" if int(r["dp"]) * int(r.get("cp") or 1) > 1 else "-", r["recompute"],
                         f"{r['microbatch']}×{r['num_microbatches']}",
                         f"{float(r['step_time_ms']):.0f}", f"{float(r['tokens_per_s']):.0f}",
                         "-" if mfu is None else f"{mfu:.1%}", f"{float(r['peak_mem_bytes']) / MIB:.2f}",
                         f"{(float(r['param_bytes']) + float(r['grad_bytes']) + float(r['opt_bytes'])) / MIB:.3f}",
                         _mib(r, "planner_state_bytes", ".3f"), _mib(r, "planner_total_bytes", ".0f"),
                         _num(_f(r, "planner_step_s"), ".3f"), _num(_f(r, "planner_exposed_comm_s"), ".3f"),
                         f"{float(r['loss_first']):.4f}→{float(r['loss_last']):.4f}", _loss_gap(r, base),
                         "yes" if r["counts_match_design"] == "true" else "**no**"])
        head = ["degrees", "schedule", "layers per stage", "ZeRO", "recompute", "micro-batch × m", "step ms",
                "tokens/s", "MFU", "peak MiB/rank", "state MiB/rank", "planner state MiB", "planner total MiB",
                "planner step s", "planner exposed comm s", "loss", "loss vs 1 rank", "collectives = design"]
        empty = [i for i, h in enumerate(head) if h in EMPTY_ON_CPU and all(row[i] == "-" for row in body)]
        note = (f" Not on this hardware: {', '.join(head[i] for i in empty)} (GPU rows only)." if empty else "")
        ranks = max(int(r["world_size"]) for r in rows)
        shared = S("runs.shared", name=path.stem, ranks=ranks, cores=cores(rows[0]["hardware"])) \
            if shares_cores(rows[0]["hardware"], ranks) else ""
        out += [f"**{path.stem}** ({provenance(rows)}; model {rows[0]['model']}, {rows[0]['precision']}, "
                f"{rows[0]['optimizer']}, {rows[0]['steps']} timed steps after {rows[0]['warmup']} warm-up).{note}",
                *(["", shared] if shared else []), "", *ap.table([h for i, h in enumerate(head) if i not in empty],
                              [[c for i, c in enumerate(row) if i not in empty] for row in body]), ""]
    return out or ["_No runs yet: `make parallel-3d`._"]


def comms_section(results: Path) -> list[str]:
    out = []
    for path in sorted(results.glob("comms_*.csv")):
        rows = read(path)
        if not rows:
            out += [f"**{path.stem}**: no collective in any launch's step (one rank), as the design predicts.", ""]
            continue
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            groups.setdefault((findings.layout(r), r["variant"], r["pp_rank"]), []).append(r)
        body = []
        for (degrees, variant, pp_rank), rs in groups.items():
            cells = [f"{r['dim']} {r['kind'].replace('_', '-')} {r['count']}"
                     + ("" if r["count"] == r["design_count"] else f" (design {r['design_count']})") for r in rs]
            sent = sum(float(r["bus_bytes"]) for r in rs)
            body.append([degrees, variant, pp_rank, "; ".join(cells), f"{sent / MIB:.2f}"])
        out += [f"**{path.stem}** ({provenance(rows)})", "",
                *ap.table(["degrees", "variant", "pipeline rank", "collectives per step (a design count in "
                           "parentheses where it differs)", "bus MiB"], body), ""]
    return out or ["_No runs yet._"]


def activations_section(results: Path, plots: list[str], out_dir: Path) -> list[str]:
    out = []
    for path in sorted(results.glob("activations_*.csv")):
        rows = read(path)
        body = [[r["tp"], r["recompute"], f"{float(r['measured_bytes']) / MIB:.3f}",
                 f"{float(r['torch_terms_bytes']) / MIB:.3f}", f"{float(r['planner_bytes']) / MIB:.3f}",
                 f"{float(r['measured_coef_bf16']):.2f}", f"{float(r['planner_coef_bf16']):.2f}",
                 f"{float(r['measured_over_planner']):.3f}"] for r in rows]
        r0 = rows[0]
        shape = (f"micro-batch {r0['microbatch']}, s {r0['seq']}, h {r0['hidden']}, {r0['heads']} heads "
                 f"({r0['kv_heads']} K/V), ffn {r0['ffn']}, {r0['dtype']}")
        png = plot_activations(rows, out_dir / f"{path.stem}.png")
        plots.append(png)
        out += [f"**{path.stem}** ({provenance(rows)}; {shape})", "",
                *ap.table(["t", "recompute", "measured MiB", "torch terms MiB", "planner MiB",
                           "measured bytes/sbh (bf16)", "planner bytes/sbh", "measured / planner"], body), "",
                f"![activation bytes per block, PyTorch against the planner](plots/{png})", "",
                findings.activations_caption(rows, path.stem), ""]
    return out or ["_Not measured yet: `make parallel-3d-activations`._"]


def plot_activations(rows: list[dict], path: Path) -> str:
    fig, ax = new_figure()
    labels = [f"t={r['tp']}\n{r['recompute']}" for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [float(r["measured_coef_bf16"]) for r in rows], 0.4, label="PyTorch (measured)")
    ax.bar([x + 0.2 for x in xs], [float(r["planner_coef_bf16"]) for r in rows], 0.4, label="planner (Korthikanti)")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("activation bytes per s·b·h per block (bf16 units)")
    ax.legend()
    save(fig, path, footer=f"{rows[0]['hardware']}, torch {rows[0]['torch_version']}, commit {rows[0]['git_commit']}")
    return path.name


def plot_at_scale(rows: list[dict], path: Path) -> str:
    fig, axes = new_figure(2, 2)
    for ax, (q, label) in zip(axes.flat, ap.QUANTITIES):
        names, meas, plan = [], [], []
        for r in rows:
            m, p, _ = ap.values(r, q)
            if m or p:
                names.append(f"{r['study']}\n{r['role']}")
                meas.append(m / ap.GB)
                plan.append(p / ap.GB)
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], meas, 0.4, label="PyTorch")
        ax.bar([x + 0.2 for x in xs], plan, 0.4, label="planner (pytorch stack)")
        ax.set_xticks(list(xs), names, fontsize=8)
        ax.set(title=label, ylabel="GB")
    axes[0][0].legend()
    save(fig, path, footer=f"{rows[0]['hardware']}, torch {rows[0]['torch_version']}, commit {rows[0]['git_commit']}")
    return path.name


def at_scale_section(results: Path, plots: list[str], out_dir: Path) -> list[str]:
    """A pointer to PLANNER_VALIDATION.md's section 5 (the tables live there, once) and the term-by-term plot."""
    if not (results / "at_scale.csv").exists() or not (results / "at_scale_terms.csv").exists():
        return ["_Not measured yet: run `make parallel-3d-at-scale`._"]
    rows = read(results / "at_scale.csv")
    png = plot_at_scale(rows, out_dir / "at_scale.png")
    plots.append(png)
    r0 = rows[0]
    return [S("at_scale.lead", provenance=f"{r0['hardware']}, torch {r0['torch_version']}, commit {r0['git_commit']}",
              match=sum(r["counts_match_design"] == "true" for r in rows), n=len(rows)), "",
            f"![PyTorch against the planner, term by term](plots/{png})", "", findings.at_scale_caption(rows)]


def cp_at_scale_section(results: Path) -> list[str]:
    """The CP plan at real size (at_scale_cp.csv) beside the no-CP plan it was carved from (at_scale.csv), and the
    planner's CP bytes and memory for it (against_pytorch.cp_section)."""
    path = results / "at_scale_cp.csv"
    if not path.exists():
        return ["_Not measured yet: `make parallel-3d-at-scale`._"]
    base = {(r["study"], r["role"]): r for r in read(results / "at_scale.csv")} \
        if (results / "at_scale.csv").exists() else {}
    lines = []
    for r in read(path):
        b = base.get((r["baseline_study"], r["role"]))
        if not b:
            continue
        state, b_state = (sum(float(x[k]) for k in ("param_bytes", "grad_bytes", "opt_bytes")) for x in (r, b))
        peak, b_peak = ap.measured_peak(r), ap.measured_peak(b)
        sent, formula = float(r["cp_payload_bytes"]), float(r["ring_formula_bytes"])
        planner = float(r["planner_cp_bus_bytes"]) if r.get("planner_cp_bus_bytes") else None
        lines.append(S("cp.row", study=r["study"], role=r["role"], cp=r["cp"], base=r["baseline_study"],
                       state=ap._pct(state, b_state), peak=ap._pct(peak, b_peak), delta=(peak - b_peak) / ap.GB,
                       sent=sent / ap.GB, exact="exactly" if sent == formula else "not",
                       planner="" if planner is None else S("cp.planner", gb=planner / ap.GB,
                                                            pct=ap._pct(planner, sent))))
    r0 = read(path)[0]
    return [S("cp.lead", provenance=f"{r0['hardware']}, torch {r0['torch_version']}, commit {r0['git_commit']}"), "",
            ap.cp_section(results), "", *lines]


def device(results: Path) -> tuple[float, str]:
    """The GPU the at-scale study planned for (its saved config; h100 by default) and its memory in GB."""
    cfg = results / "at_scale.config.json"
    try:
        gpu = json.loads(cfg.read_text()).get("gpu", "h100") if cfg.exists() else "h100"
        p = get_preset(gpu)
    except (ValueError, AttributeError) as e:
        raise BadResults(f"{cfg}: not the at-scale study's config ({e})") from None
    return p.memory_gb, p.label


def plot_peak(rows: list[dict], device_gb: float, gpu: str, path: Path) -> str:
    """Each study's busiest measured rank at the step's peak beside the planner's pytorch stack, against the
    device's memory."""
    busiest = ap.peak_rows(rows)
    fig, ax = new_figure()
    names = [f"{study}\n({r['role']} stage)" for study, r, _ in busiest]
    xs = range(len(busiest))
    torch_gb = [peak / 1e9 for _, _, peak in busiest]
    bars = ax.bar([x - 0.28 for x in xs], torch_gb, 0.28, label="PyTorch: params + optimizer + step peak (fake PG)")
    ax.bar(list(xs), [ap.planned_peak(r) / 1e9 for _, r, _ in busiest], 0.28, label="planner, pytorch stack")
    ax.bar([x + 0.28 for x in xs], [ap.planned_peak(r, "megatron_total_bytes") / 1e9 if r.get("megatron_total_bytes")
                                   else 0 for _, r, _ in busiest], 0.28, label="planner, megatron stack")
    ax.axhline(device_gb, color="tab:red", ls="--", lw=1, label=f"{gpu}: {device_gb:g} GB")
    ax.bar_label(bars, ["does not fit" if g > device_gb else "" for g in torch_gb], fontsize=8, color="tab:red")
    ax.set_xticks(list(xs), names, fontsize=8)
    ax.set(ylabel="memory per GPU (GB)", title="Peak memory per GPU: PyTorch as run vs the planner",
           ylim=(0, 1.35 * max(max(torch_gb), device_gb)))
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    save(fig, path, footer=f"{rows[0]['hardware']}, torch {rows[0]['torch_version']}, commit {rows[0]['git_commit']}")
    return path.name


def opening(results: Path) -> list[str]:
    runs = [r for p in sorted(results.glob("runs_*.csv")) for r in read(p)]
    rows = read(results / "at_scale.csv") if (results / "at_scale.csv").exists() else []
    device_gb, gpu = device(results)
    return block(findings.opening(runs, rows, device_gb, gpu), one_screen=True)


def answer(results: Path, plots: list[str], out_dir: Path) -> list[str]:
    """The peak-memory plot and its table: what carries the answer."""
    if not (results / "at_scale.csv").exists():
        return []
    rows = read(results / "at_scale.csv")
    device_gb, gpu = device(results)
    png = plot_peak(rows, device_gb, gpu, out_dir / "peak_memory.png")
    plots.append(png)
    body = [[f"{study} ({r['role']} stage)", ap.degrees(r), f"{peak / 1e9:.1f}", f"{ap.planned_peak(r) / 1e9:.1f}",
             signed("{:+.0%}", ap.planned_peak(r) / peak - 1), "yes" if peak / 1e9 <= device_gb else "**does not fit**"]
            for study, r, peak in ap.peak_rows(rows)]
    return [f"![peak memory per GPU against {gpu}](plots/{png})", "",
            findings.peak_caption(rows, device_gb, gpu), "",
            *ap.table(["study (busiest rank)", "layout", "PyTorch GB per GPU", "planner GB (pytorch stack)",
                       "planner vs PyTorch",
                       f"fits {device_gb:g} GB"], body), ""]


def render(results: Path, plots: list[str], out_dir: Path = LAB / "plots") -> str:
    runs = [r for r in sorted(results.glob("runs_*.csv")) for r in read(r)]
    return fill(LAB / "report_template.md", findings=opening(results), answer=answer(results, plots, out_dir),
                measured_on=measured_on.paragraph(results, ["runs_*.csv", "comms_*.csv", "activations_*.csv",
                                                            "at_scale.csv", "at_scale_cp.csv"],
                                                  "`make parallel-3d-gpu` (one GPU: the bf16 baseline and the "
                                                  "activation study) or `make parallel-3d TP=2 PP=2 DP=2 GPU=h100`"),
                runs=runs_section(results), comms=comms_section(results),
                activations=activations_section(results, plots, out_dir),
                at_scale=at_scale_section(results, plots, out_dir), cp_at_scale=cp_at_scale_section(results),
                caveats=["### CPU caveats", "", S("caveat.cpu")] if any(r["backend"] == "gloo" for r in runs) else [],
                predicted=S("predicted"))


@guard_report
def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(ReportConfig, argv, description=__doc__, prog="report.py")
    results = Path(cfg.results)
    report_path(cfg.out)
    for path in sorted(results.glob("*.csv")):  # every input checked before anything is drawn or written
        read(path)
    check_configs(results)
    plots: list[str] = []
    text = render(results, plots, Path(cfg.out).parent / "plots")
    Path(cfg.out).write_text(text.rstrip() + "\n")
    print(f"wrote {cfg.out} ({len(text.splitlines())} lines, {len(plots)} plots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
