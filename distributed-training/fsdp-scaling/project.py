"""A PROJECTION, not a measurement: step time and scaling efficiency per strategy at 8 ... 1024 GPUs.

    t_step(N) = t_compute(tokens per rank) (+ or max) t_comm(N)

t_compute is the measured one-rank step time of the same strategy and model (scaling_<hw>.csv, world
size 1: no collective runs there), scaled linearly with tokens per rank. Where no GPU has been
measured, it is FLOPs / (peak x an assumed MFU of 0.40, within torchtitan's published 33-42% for
1-D FSDP on 8-128 H100s, arXiv 2410.06511) and every row says so. t_comm sums, over the
collectives of one optimizer step (memory_model.comm_plan, the plan the fake-PG study and the
tests check count for count and byte for byte), an alpha-beta ring cost:

    t = base + steps(n) x hop + payload x bus_factor(n) / busbw

(nccl-tests' bus bandwidth, so busbw is what allreduce-bench measures; steps = n-1, or 2(n-1) for
all-reduce). busbw comes from allreduce-bench's results/sweep_*.csv for the same preset when they
exist (largest busbw per collective, one node and across nodes), else the hardware table: NVLink
per direction inside a node, the per-GPU NIC across nodes. Latency defaults are NCCL's own ring
Simple-protocol figures (src/graph/tuning.cc, an older version: base 8.4 us, 3.4 us per NVLink
ring step, 9.6 us per network step); NCCL's tree and PAT algorithms lower this term at large N, so
the projection is pessimistic there. Two bounds are written: no overlap (compute + communication)
and full overlap (the larger of the two). The GPU profile (overlap.py) says where a real step falls.

Efficiency, T = tokens/s: weak scaling T(N) / (N T(1)) = t(1) / t(N) with tokens per rank fixed;
strong scaling with the global batch fixed (1024 sequences, one per rank at 1024).

    make fsdp-scaling-report          # runs this, then report.py
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

import memory_model as mm
from common.config import config_dict, parse_config
from common.dist import DistInfo
from common.hardware import PRESETS, GPUPreset, get_preset
from common.model import GPTConfig, flops_per_token
from common.results import ResultsWriter, provenance
from settings import MODELS, Config, describe_model, parse_model

LAB = Path(__file__).resolve().parent
ALLREDUCE = LAB.parent / "allreduce-bench" / "results"
GPU_N = (1, 8, 16, 32, 64, 128, 256, 512, 1024)
CPU_N = (1, 2, 4, 8)
ASSUMED_MFU = 0.40
STRONG_GLOBAL = 1024  # sequences per step in the projected strong scaling
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "hsdp")
# The lab's GPU model, and an 8B dense model shaped like Llama 3.1 8B (d 4096, 32 layers, GQA 8;
# d_ff 21504 gives SwiGLU's 3 x 14336 parameters in two matrices), for torchtitan's published anchor.
PROJECTED = {"medium": (GPTConfig(vocab_size=256, **MODELS["medium"]), 8),
             "8b": (GPTConfig(vocab_size=128256, seq_len=8192, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                              d_ff=21504), 2)}  # (model, sequences per GPU per step): torchtitan local bs 2
COLUMNS = ["target", "model", "n_params", "strategy", "mode", "n_gpus", "nodes", "tokens_per_rank", "compute_ms",
           "comm_ms", "step_ms_no_overlap", "step_ms_full_overlap", "efficiency_no_overlap",
           "efficiency_full_overlap", "state_GB_per_rank", "fits_in_memory", "compute_source", "bandwidth_source"]
WORKED_COLUMNS = ["example", "psi", "n_d", "k", "baseline_GB", "zero1_GB", "zero2_GB", "zero3_GB"]


@dataclass(frozen=True)
class Links:
    intra_GBps: float  # bus bandwidth inside a node (NVLink domain)
    inter_GBps: float  # bus bandwidth when a group spans nodes (per-GPU NIC)
    hop_intra_us: float
    hop_inter_us: float
    base_us: float
    node_size: int
    source: str


def table_links(p: GPUPreset, node_size: int) -> Links | None:
    if p.nvlink_gbps is None or p.net_gbits is None:
        return None
    return Links(p.nvlink_gbps, p.net_gbits / 8, 3.4, 9.6, 8.4, node_size,
                 f"hardware table {p.name}: NVLink {p.nvlink_gbps:.0f} GB/s per direction, network "
                 f"{p.net_gbits / 8:.0f} GB/s per GPU; NCCL ring latencies")


def _fit(df: pd.DataFrame) -> tuple[float, float]:
    """(largest busbw in GB/s, latency per ring step in us from the smallest message)."""
    small = df[df["size_bytes"] == df["size_bytes"].min()]
    steps = small["world_size"].sub(1) * small["collective"].map(lambda c: 2 if c == "all_reduce" else 1)
    return float(df["busbw_GBps"].max()), float((small["time_us"] / steps).median())


def measured_links(preset: str, node_size: int, fallback: Links | None) -> Links | None:
    """Bus bandwidth and per-hop latency from allreduce-bench's sweeps of `preset`, else `fallback`."""
    files = sorted(glob.glob(str(ALLREDUCE / "sweep_*.csv")))
    if not files:
        return fallback
    df = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    tag = df["preset"] if "preset" in df else df["backend"].map({"gloo": "cpu"})
    df = df[(tag == preset) & (df["world_size"] > 1)
            & df["collective"].isin(["all_reduce", "all_gather", "reduce_scatter"])]
    intra, inter = df[df["nnodes"] == 1], df[df["nnodes"] > 1]
    if intra.empty:
        return fallback
    bw, hop = _fit(intra)
    bw_x, hop_x = _fit(inter) if not inter.empty else (
        (fallback.inter_GBps, fallback.hop_inter_us) if fallback else (bw, hop))
    return Links(bw, bw_x, hop, hop_x, 0.0, node_size,
                 f"allreduce-bench sweep_*.csv ({preset}): busbw {bw:.2f} GB/s in a node"
                 + (f", {bw_x:.2f} GB/s across nodes" if not inter.empty else "") + f"; {hop:.1f} us per ring step")


def comm_time_s(strategy: str, gcfg: GPTConfig, n: int, prec: mm.Precision, links: Links) -> float:
    """Alpha-beta ring time of one optimizer step's collectives (one micro-step, no accumulation).

    Latency as NCCL models a ring (tuning.cc): base + intra-node steps x NVLink hop + inter-node
    steps x network hop, a ring over k nodes crossing the network k-1 times per pass."""
    mesh = (max(1, n // links.node_size), min(n, links.node_size)) if strategy == "hsdp" else None
    total = 0.0
    for c in mm.comm_plan(strategy, gcfg, n, prec, mesh=mesh, n_buckets=1):
        g, passes = c["group_size"], 2 if c["collective"] == "all_reduce" else 1
        across = strategy == "hsdp" and c["collective"] == "all_reduce"  # one rank per node
        nodes = g if across else -(-g // links.node_size)
        inter = passes * (nodes - 1)
        intra = passes * (g - 1) - inter
        bw = links.inter_GBps if nodes > 1 else links.intra_GBps
        total += c["count"] * (links.base_us + intra * links.hop_intra_us + inter * links.hop_inter_us) * 1e-6
        total += c["payload_bytes"] * mm.bus_factor(c["collective"], g) / (bw * 1e9)
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


def project(t: Target, links: Links, ns: tuple[int, ...]) -> list[dict]:
    prec = mm.precision_for("adamw", compute_bytes=4 if t.name == "cpu" else 2)
    n_params = sum(map(mm.numel, mm.all_shapes(t.gcfg)))
    capacity = PRESETS[t.name].memory_gb if t.name in PRESETS else None
    rows = []
    for (strategy, mode), per_seq in sorted(t.per_seq_s.items()):
        seqs = {n: t.weak_seqs if mode == "weak" else t.strong_global / n for n in ns}
        t1 = per_seq * (t.weak_seqs if mode == "weak" else t.strong_global)  # one rank: no communication
        for n in ns:
            tc, tm = per_seq * seqs[n], comm_time_s(strategy, t.gcfg, n, prec, links)
            no, full = tc + tm, max(tc, tm)
            rows.append({"target": t.name, "model": t.model, "n_params": n_params, "strategy": strategy,
                         "mode": mode, "n_gpus": n, "nodes": -(-n // links.node_size),
                         "tokens_per_rank": seqs[n] * t.gcfg.seq_len, "compute_ms": tc * 1e3, "comm_ms": tm * 1e3,
                         "step_ms_no_overlap": no * 1e3, "step_ms_full_overlap": full * 1e3,
                         # T(N) / (N T(1)) with T = tokens/s: both modes reduce to this ratio of step times
                         "efficiency_no_overlap": t1 * seqs[n] / (no * seqs[1]),
                         "efficiency_full_overlap": t1 * seqs[n] / (full * seqs[1]),
                         "state_GB_per_rank": (gb := state_gb(strategy, t.gcfg, n, prec, links.node_size)),
                         "fits_in_memory": None if capacity is None else gb < capacity,
                         "compute_source": t.compute_source, "bandwidth_source": links.source})
    return rows


def measured_targets(csv: Path, strong_global: int | None) -> list[Target]:
    """One Target per model in a scaling CSV, from its world-size-1 rows."""
    hw = csv.stem.split("_", 1)[1]
    df = pd.read_csv(csv)
    df = df[(df["world_size"] == 1) & df["strategy"].isin(STRATEGIES)]
    out = []
    for model, g in df.groupby("model"):
        per_seq = {(r.strategy, r.mode): r.step_time_ms / 1e3 / r.effective_batch for r in g.itertuples()}
        weak = g[g["mode"] == "weak"]["effective_batch"]
        strong = g[g["mode"] == "strong"]["effective_batch"]
        out.append(Target(hw, model, parse_model(model), int(weak.iloc[0]) if len(weak) else 1,
                          strong_global or (int(strong.iloc[0]) if len(strong) else 1), per_seq,
                          f"measured 1-rank step, scaling_{hw}.csv"))
    return out


def assumed_target(p: GPUPreset, name: str, gcfg: GPTConfig, seqs: int) -> Target:
    per_seq = flops_per_token(gcfg) * gcfg.seq_len / (p.bf16_tflops * 1e12 * ASSUMED_MFU)
    return Target(p.name, name, gcfg, seqs, STRONG_GLOBAL, {(s, m): per_seq for s in STRATEGIES
                                                           for m in ("strong", "weak")},
                  f"ASSUMED MFU {ASSUMED_MFU:.2f} of {p.bf16_tflops:.0f} TFLOP/s (no GPU measured yet)")


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(Config, argv, description=__doc__)
    rows: list[dict] = []
    measured_gpus = set()
    for csv in sorted((LAB / "results").glob("scaling_*.csv")):
        cpu = csv.stem == "scaling_cpu"
        for t in measured_targets(csv, None if cpu else STRONG_GLOBAL):
            if cpu:  # one core per rank at the measured gloo bandwidth: only with allreduce-bench's CPU sweep
                links = measured_links("cpu", 10**6, None)
            else:
                p = PRESETS.get(t.name)
                links = p and measured_links(t.name, cfg.node_size, table_links(p, cfg.node_size))
                measured_gpus.add((t.name, t.model))
            rows += project(t, links, CPU_N if cpu else GPU_N) if links else []
    what_if = get_preset(cfg.gpu if cfg.gpu not in ("auto", "cpu") else "h100")
    links = measured_links(what_if.name, cfg.node_size, table_links(what_if, cfg.node_size))
    for name, (gcfg, seqs) in PROJECTED.items():
        if (what_if.name, describe_model(gcfg)) not in measured_gpus:
            rows += project(assumed_target(what_if, name, gcfg, seqs), links, GPU_N)
    env = DistInfo(0, 0, 1, 1, torch.device("cpu"), "model")
    prov = {**provenance(env, "1"), "hardware": "projection (analytic model)", "world_size": "", "nnodes": ""}
    writer = ResultsWriter(LAB / "results" / "projection.csv", COLUMNS,
                           ["target", "model", "strategy", "mode", "n_gpus"], prov, config=config_dict(cfg))
    for r in rows:
        writer.write(r)
    # The ZeRO paper's Figure 1 example (7.5B parameters, 64-way DP, K = 12): 120 / 31.4 / 16.6 / 1.9 GB.
    worked = ResultsWriter(LAB / "results" / "zero_worked_example.csv", WORKED_COLUMNS, ["example"], prov)
    paper = mm.zero_paper_table(7.5e9, 64)
    worked.write({"example": "ZeRO Figure 1", "psi": 7.5e9, "n_d": 64, "k": mm.ZERO_PAPER.opt,
                  **{f"{k}_GB": v for k, v in paper.items()}})
    print(f"projection.csv: {len(rows)} rows, a model labelled as such (targets "
          f"{', '.join(sorted({r['target'] for r in rows}))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
