"""A PROJECTION, not a measurement: step time and scaling efficiency per strategy at 8 ... 1024 GPUs.

    t_step(N) = t_compute(tokens per rank) (+ or max) t_comm(N)

t_compute is the measured one-rank step time of the same strategy and model (scaling_<hw>*.csv,
world size 1: no collective runs there), scaled linearly with tokens per rank: the run's measured MFU
carried to every GPU count. Where no run of that model was measured on that GPU, it is the planner's
compute model for the same one-rank step (planner/evidence/explain_rows.py, the function that prices every
measured GPU row beside its measurement in the reports), and every row says which it is. t_comm sums, over the
collectives of one optimizer step (memory_model.comm_plan, the plan the fake-PG study and the
tests check count for count and byte for byte), the cost of common/collective_cost.py: the model the
planner prices collectives with (a test checks the two agree), nccl-tests' bus factors, ring steps
inside a node and tree levels across, NVLink inside a node and min(NVLink, GPUs per node x NIC)
across (NCCL runs one ring per NIC), with its documented efficiencies and latencies. The network
comes from allreduce-bench's results/sweep_*.csv for the same preset when they exist (the fit of
their all_reduce rows, common/collective_fit.calibrate: the planner's --calibrate rule), else from
the hardware table. Two bounds are written: no overlap (compute + communication) and full overlap
(the larger of the two). The GPU profile (overlap.py) says where a real step falls.

Efficiency, T = tokens/s: weak scaling T(N) / (N T(1)) = t(1) / t(N) with tokens per rank fixed;
strong scaling with the global batch fixed (1024 sequences, one per rank at 1024).

    make fsdp-scaling-report          # runs this, then report.py
"""

from __future__ import annotations

import glob
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

import memory_model as mm
from common.collective_cost import Network, collective_time_s, latency_s, members_per_domain, preset_network
from common.collective_fit import calibrate
from common.config import parse_preset
from common.csvread import Schema, read_table
from common.dist import DistInfo, fail
from common.failures import entrypoint
from common.hardware import PRESETS, GPUPreset, get_preset
from common.model import GPTConfig, flops_per_token
from common.results import provenance
from common.runner import RunPlan, Table, check_before_launch, experiment, open_run, saved_config
from common.zero_memory import ZERO_PAPER
from planner.evidence.explain_rows import one_gpu_step_s
from settings import LAB, MODELS, OPERATIONAL, Config, describe_model, parse_model, preset

ALLREDUCE = LAB.parent / "allreduce-bench" / "results"
GPU_N = (1, 8, 16, 32, 64, 128, 256, 512, 1024)
CPU_N = (1, 2, 4, 8)
STRONG_GLOBAL = 1024  # sequences per step in the projected strong scaling
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "hsdp")
ZERO = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "hsdp": 3}  # each strategy's ZeRO stage, for the planner
# The lab's GPU model, and an 8B dense model shaped like Llama 3.1 8B (d 4096, 32 layers, GQA 8;
# d_ff 21504 gives SwiGLU's 3 x 14336 parameters in two matrices), for torchtitan's published anchor.
PROJECTED = {"medium": (GPTConfig(vocab_size=256, **MODELS["medium"]), 8),
             "8b": (GPTConfig(vocab_size=128256, seq_len=8192, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                              d_ff=21504), 2)}  # (model, sequences per GPU per step): torchtitan local bs 2
COLUMNS = ["target", "model", "n_params", "strategy", "mode", "n_gpus", "nodes", "tokens_per_rank", "compute_ms",
           "comm_ms", "step_ms_no_overlap", "step_ms_full_overlap", "efficiency_no_overlap",
           "efficiency_full_overlap", "state_GB_per_rank", "fits_in_memory", "compute_source", "bandwidth_source"]
WORKED_COLUMNS = ["example", "psi", "n_d", "k", "baseline_GB", "zero1_GB", "zero2_GB", "zero3_GB"]
# The inputs it reads, checked (common.csvread): this lab's sweep and allreduce-bench's (its stable columns).
SCALING = Schema("fsdp-scaling sweep", {"strategy": str, "mode": str, "model": str, "world_size": int,
                                        "step_time_ms": float, "effective_batch": int, "hardware": str,
                                        "git_commit": str}, key=("strategy", "mode", "world_size", "nnodes"))
SWEEP = Schema("allreduce-bench sweep", {"collective": str, "size_bytes": int, "world_size": int, "nnodes": int,
                                         "backend": str, "hardware": str, "time_us": float},
               key=("collective", "dtype", "size_bytes", "world_size", "nnodes"))


def table_network(p: GPUPreset, node_size: int) -> Network | None:
    """The hardware table's network for `node_size` GPUs per node (common/collective_cost.py)."""
    if p.nvlink_gbps is None or p.net_gbits is None:
        return None
    return preset_network(node_size, p.nvlink_gbps, p.net_gbits,
                          f"hardware table {p.name}: NVLink {p.nvlink_gbps:.0f} GB/s per direction, network "
                          f"{p.net_gbits / 8:.0f} GB/s per GPU, at the shared model's efficiencies and latencies")


def measured_network(preset: str, node_size: int, fallback: Network | None, across_nodes: bool = True
                     ) -> Network | None:
    """The network calibrated from allreduce-bench's sweeps of `preset` (the planner's rule), else `fallback`.
    across_nodes=False ignores multi-node sweeps (the CPU projection stays on one machine)."""
    files = sorted(glob.glob(str(ALLREDUCE / "sweep_*.csv")))
    if not files:
        return fallback
    df = pd.concat([read_table(f, SWEEP) for f in files], ignore_index=True)
    tag = df["preset"] if "preset" in df else df["backend"].map({"gloo": "cpu"})
    df = df[(tag == preset) & (df["world_size"] > 1) & (df["collective"] == "all_reduce")
            & ((df["nnodes"] == 1) | across_nodes)]
    if df[df["nnodes"] == 1].empty:
        return fallback
    base = fallback or Network(node_size, math.nan, math.nan)
    try:
        net, notes = calibrate(base.calibrated(domain=node_size), df)
    except ValueError as e:  # a sweep that shows no bandwidth regime: say so, keep the table's figures
        print(f"note: allreduce-bench sweeps of {preset} not used: {e}")
        return fallback
    hardware = ", ".join(sorted(df["hardware"].astype(str).unique()))
    return net.calibrated(source=f"allreduce-bench sweep_*.csv ({preset}; measured on {hardware}), all_reduce fits: "
                          + "; ".join(notes))


def comm_time_s(strategy: str, gcfg: GPTConfig, n: int, prec: mm.Precision, net: Network) -> float:
    """Seconds for one optimizer step's collectives (one micro-step, no accumulation) on `net`.

    Every call of a kind pays the model's latency; the bytes of all its calls pay the bandwidth once.
    HSDP shards inside a node and all-reduces across replicas with one GPU per node."""
    node = net.domain
    mesh = (max(1, n // node), min(n, node)) if strategy == "hsdp" else None
    total = 0.0
    for c in mm.comm_plan(strategy, gcfg, n, prec, mesh=mesh, n_buckets=1):
        g = c["group_size"]
        stride = node if strategy == "hsdp" and c["collective"] == "all_reduce" else 1
        local = members_per_domain(g, stride, node)
        total += float(collective_time_s(c["collective"], c["payload_bytes"], g, local, net)
                       + (c["count"] - 1) * latency_s(c["collective"], g, local, net))
    return total


@dataclass(frozen=True)
class Target:
    name: str  # hardware preset
    model: str
    gcfg: GPTConfig
    weak_seqs: int  # sequences per rank per step, weak scaling
    strong_global: int  # sequences per step, strong scaling
    per_seq_s: dict  # (strategy, mode) -> compute seconds per sequence, one rank
    compute_source: str


def state_gb(strategy: str, gcfg: GPTConfig, n: int, prec: mm.Precision, node_size: int) -> float:
    """Model states per rank plus gathered parameters at the peak (memory_model); activations excluded."""
    shard = min(n, node_size) if strategy == "hsdp" else n
    return (sum(mm.model_states(strategy, gcfg, n, prec, shard=shard, padded=True).values())
            + mm.unsharded_peak(strategy, gcfg, prec, shard)) / mm.GB


def project(t: Target, net: Network, ns: tuple[int, ...]) -> list[dict]:
    prec = mm.precision_for("adamw", compute_bytes=4 if t.name == "cpu" else 2)
    n_params = sum(map(mm.numel, mm.all_shapes(t.gcfg)))
    capacity = PRESETS[t.name].memory_gb if t.name in PRESETS else None
    rows = []
    for (strategy, mode), per_seq in sorted(t.per_seq_s.items()):
        seqs = {n: t.weak_seqs if mode == "weak" else t.strong_global / n for n in ns}
        t1 = per_seq * (t.weak_seqs if mode == "weak" else t.strong_global)  # one rank: no communication
        for n in ns:
            tc, tm = per_seq * seqs[n], comm_time_s(strategy, t.gcfg, n, prec, net)
            no, full = tc + tm, max(tc, tm)
            rows.append({"target": t.name, "model": t.model, "n_params": n_params, "strategy": strategy,
                         "mode": mode, "n_gpus": n, "nodes": -(-n // net.domain),
                         "tokens_per_rank": seqs[n] * t.gcfg.seq_len, "compute_ms": tc * 1e3, "comm_ms": tm * 1e3,
                         "step_ms_no_overlap": no * 1e3, "step_ms_full_overlap": full * 1e3,
                         # T(N) / (N T(1)) with T = tokens/s: both modes reduce to this ratio of step times
                         "efficiency_no_overlap": t1 * seqs[n] / (no * seqs[1]),
                         "efficiency_full_overlap": t1 * seqs[n] / (full * seqs[1]),
                         "state_GB_per_rank": (gb := state_gb(strategy, t.gcfg, n, prec, net.domain)),
                         "fits_in_memory": None if capacity is None else gb < capacity,
                         "compute_source": t.compute_source, "bandwidth_source": net.source})
    return rows


def hardware_tag(csv: Path) -> str:
    """The preset a scaling file was measured on: scaling_h100.csv, scaling_h100_ws1.csv -> h100."""
    return re.sub(r"_ws\d+(_n\d+)?$", "", csv.stem.split("_", 1)[1])


def _mfu(gcfg: GPTConfig, per_seq_s: float, peak_tflops: float | None) -> float | None:
    return None if not peak_tflops else flops_per_token(gcfg) * gcfg.seq_len / per_seq_s / (peak_tflops * 1e12)


def measured_targets(csv: Path, strong_global: int | None) -> list[Target]:
    """One Target per model in a scaling CSV, from its world-size-1 rows: their measured MFU, per strategy."""
    hw = hardware_tag(csv)
    df = read_table(csv, SCALING)
    df = df[(df["world_size"] == 1) & df["strategy"].isin(STRATEGIES)]
    peak = PRESETS[hw].bf16_tflops if hw in PRESETS else None
    out = []
    for model, g in df.groupby("model"):
        gcfg = parse_model(model)
        per_seq = {(r.strategy, r.mode): r.step_time_ms / 1e3 / r.effective_batch for r in g.itertuples()}
        weak = g[g["mode"] == "weak"]["effective_batch"]
        strong = g[g["mode"] == "strong"]["effective_batch"]
        mfus = [m for m in (_mfu(gcfg, v, peak) for v in per_seq.values()) if m is not None]
        mfu = f"MFU {min(mfus):.2f}-{max(mfus):.2f} by strategy and mode, " if mfus else ""
        commits = ", ".join(sorted(g["git_commit"].astype(str).unique()))
        out.append(Target(hw, model, gcfg, int(weak.iloc[0]) if len(weak) else 1,
                          strong_global or (int(strong.iloc[0]) if len(strong) else 1), per_seq,
                          f"measured 1-rank steps ({mfu}{csv.name}, {g['hardware'].iloc[0]}, commit {commits})"))
    return out


def planner_target(p: GPUPreset, name: str, gcfg: GPTConfig, seqs: int) -> Target:
    """No run of this model on this GPU: the planner's compute model for each strategy's one-rank step."""
    per_seq = {(s, m): one_gpu_step_s(gcfg, p.name, ZERO[s], seqs) / seqs for s in STRATEGIES
               for m in ("strong", "weak")}
    mfus = [x for x in (_mfu(gcfg, v, p.bf16_tflops) for v in per_seq.values()) if x is not None]
    return Target(p.name, name, gcfg, seqs, STRONG_GLOBAL, per_seq,
                  f"PLANNER's compute model (no run of this model measured on {p.name}): predicted MFU "
                  f"{min(mfus):.2f}-{max(mfus):.2f} of {p.bf16_tflops:.0f} TFLOP/s")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_preset(Config, argv, preset, description=__doc__, prog="project.py")
    plan = RunPlan.beside(cfg.results_dir(LAB), "projection", [
        Table("projection.csv", COLUMNS, ["target", "model", "strategy", "mode", "n_gpus"]),
        # The ZeRO paper's Figure 1 example (7.5B parameters, 64-way DP, K = 12): 120 / 31.4 / 16.6 / 1.9 GB.
        Table("zero_worked_example.csv", WORKED_COLUMNS, ["example"], config=False)], config=saved_config(cfg))
    try:
        rows = projection_rows(cfg)
        check_before_launch(plan, cfg, mode="fresh")  # a model of what the CSVs say: computed afresh every time
    except ValueError as e:  # BadResults, RunError
        fail(str(e), 2)
    env = DistInfo(0, 0, 1, 1, torch.device("cpu"), "model")
    prov = {**provenance(env, "1"), "hardware": "projection (analytic model)", "world_size": "", "nnodes": ""}
    changed = experiment(cfg, preset(cfg.gpu), OPERATIONAL)  # a flag of the sweep's ARGS: an experiment here too
    with open_run(plan, cfg, None, prov, changed, mode="fresh") as run:
        writer, worked = run.writers
        writer.write_many(rows)
        paper = mm.zero_paper_table(7.5e9, 64)
        worked.write({"example": "ZeRO Figure 1", "psi": 7.5e9, "n_d": 64, "k": ZERO_PAPER.optimizer,
                      **{f"{k}_GB": v for k, v in paper.items()}})
        print(f"projection.csv: {len(rows)} rows, a model labelled as such (targets "
              f"{', '.join(sorted({r['target'] for r in rows}))})")
    return 0


def projection_rows(cfg: Config) -> list[dict]:
    """Every projected row, from the measured CSVs (checked) and the hardware table."""
    rows: list[dict] = []
    measured_gpus, measured_cpu = set(), set()
    for csv in sorted(cfg.results_dir(LAB).glob("scaling_*.csv")):
        cpu = hardware_tag(csv) == "cpu"
        for t in measured_targets(csv, None if cpu else STRONG_GLOBAL):
            seen = measured_cpu if cpu else measured_gpus
            if (t.name, t.model) in seen:  # two sweeps (to 1 and to 8 ranks) share their world-size-1 rows' meaning
                continue
            seen.add((t.name, t.model))
            if cpu:  # one machine, one core per rank at the measured gloo rate: only with allreduce-bench's CPU sweep
                net = measured_network("cpu", max(CPU_N), None, across_nodes=False)
            else:
                p = PRESETS.get(t.name)
                net = p and measured_network(t.name, cfg.node_size, table_network(p, cfg.node_size))
            rows += project(t, net, CPU_N if cpu else GPU_N) if net else []
    what_if = get_preset(cfg.gpu if cfg.gpu not in ("auto", "cpu") else "h100")
    net = measured_network(what_if.name, cfg.node_size, table_network(what_if, cfg.node_size))
    for name, (gcfg, seqs) in PROJECTED.items():
        if (what_if.name, describe_model(gcfg)) not in measured_gpus:
            rows += project(planner_target(what_if, name, gcfg, seqs), net, GPU_N)
    return rows


if __name__ == "__main__":
    raise SystemExit(entrypoint(main))
