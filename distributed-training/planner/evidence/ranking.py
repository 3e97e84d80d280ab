"""The planner as it is used: does it rank measured layouts in their measured order, and is its pick near the best?

    PYTHONPATH=distributed-training python -m planner.evidence.ranking  # layouts measured and predicted, the verdict
    section()                                                          # the markdown the validation document embeds

parallel-3d's ranking set (parallel-3d/ranking.py, `make parallel-3d-ranking`) trains the tiny GPT in 39 layouts of six
groups (4 and 8 gloo ranks, global batch 4 to 32) on this repository's CPU machine and measures, in the same session,
what the planner may know of that machine: the alpha-beta fit of an all_reduce sweep at each world size, a GEMM rate at
the model's shape, a memory rate, the cores, and the host's cost per unit of the work the framework issues. The planner
prices every layout from those alone (no step time enters it), with the cost model `make plan` uses
(costs.step_costs) on a machine described by them:

- compute: GEMMs at the measured rate with no tiles or waves to quantize (a CPU core: tile 1), memory-bound kernels
  at the measured memory rate, attention at the GEMM rate, no fixed cost per kernel;
- the framework's floor (model/floor.py): the aten ops, DTensor ops, optimizer ops and FSDP2 unshards that parallel-3d
  issues per block and micro-batch, per micro-batch and per step, counted by running its code (parallel-3d/
  host_ops.py), each at the cost the calibration measured. On a CPU the host is the device: a rank runs its ops' host
  work and their compute one after the other;
- collectives: common/collective_cost.py on a network of the fit at that world size (alpha / 2(n-1) per ring step,
  the fitted bus rate, gloo's one protocol), every call at c10d's measured host cost, the loss's all-reduces too;
- the pipeline's (m + p - 1) critical path (stages.pipeline_step) on those serialised times;
- shared cores, explicitly: the ranks working at once (every rank, less a pipeline's idle share) share the measured
  cores, each running at cores / busy ranks of one core while they outnumber them; a rank waiting in a gloo
  collective sleeps and leaves its core to the others.

Groups are the layouts of one world size and global batch. Reported per group: Spearman's rank correlation of
predicted and measured step time, whether the planner's fastest layout is within 10% of the measured fastest, and
the median error, absolute and signed (a bias is not scatter). Nothing here is fitted; the calibration is a
measurement of the machine, taken before the layouts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from common import markdown
from common.collective_cost import Network, collective_time_s
from common.csvread import Schema, read_table
from planner.model.calibration import ComputeConstants
from planner.model.cluster import Cluster
from planner.model.compute import Kernels, Rates
from planner.model import host
from planner.model.costs import step_costs
from planner.model.degrees import RECOMPUTE, Degrees
from planner.model.floor import FSDP_EVENTS, HostCosts, layer_host_s, pytorch_floor
from planner.model.stages import pipeline_step

from .own_runs import LABS, parse_model

RESULTS = LABS / "parallel-3d" / "results"
PICK_WITHIN = 0.10  # the planner's pick counts as right when its measured step is within 10% of the measured best
ROWS = Schema("parallel-3d ranking set", {
    "group": str, "world": int, "model": str, "global_batch": int, "tp": int, "pp": int, "dp": int, "zero": int,
    "recompute": str, "interleave": int, "microbatch": int, "num_microbatches": int, "step_time_ms": float,
    "step_time_min_ms": float, "step_time_max_ms": float, "loadavg_1m": float, "hardware": str, "git_commit": str,
    "torch_version": str},
    key=("group", "tp", "pp", "dp", "zero", "recompute", "interleave", "microbatch"))  # parallel-3d/ranking.py's
CALIBRATION = Schema("parallel-3d ranking calibration", {"quantity": str, "world": int, "value": float,
                                                         "hardware": str}, key=("quantity", "world"))


class Machine(NamedTuple):
    """What the calibration measured (ranking_calibration_<hw>.csv)."""
    gemm_flops: float  # at the tiny GPT's own GEMM shape (small_gemm_flops_per_s)
    memory_Bps: float
    costs: HostCosts  # the host's cost per op, DTensor op, optimizer op, FSDP2 event, c10d call
    alpha_us: dict[int, float]  # all_reduce latency by world size
    busbw_GBps: dict[int, float]
    cores: int
    load: float = float("nan")  # the 1-minute load average the calibration was taken at


CALIBRATED = ("small_gemm_flops_per_s", "memory_bytes_per_s", "op_us", "dtensor_op_us", "optimizer_op_us",
              "fsdp_unit_us", "collective_call_us", "cores")


def read_machine(path: Path) -> Machine:
    cal = read_table(path, CALIBRATION)
    one = {r.quantity: r.value for r in cal.itertuples() if r.world == 1}
    missing = [q for q in CALIBRATED if q not in one]
    if missing:
        raise ValueError(f"{path.name}: no {', '.join(missing)} (measured by an older ranking.py): rerun "
                         "make parallel-3d-ranking")
    by_world = {q: {int(r.world): r.value for r in cal.itertuples() if r.quantity == q}
                for q in ("allreduce_alpha_us", "allreduce_busbw_GBps")}
    us = 1e-6
    # FSDP2's unit overhead was timed for a ZeRO-3 unit (two unshards per micro-batch): half of it per event.
    costs = HostCosts(one["op_us"] * us, one["dtensor_op_us"] * us, one["optimizer_op_us"] * us,
                      one["fsdp_unit_us"] * us / FSDP_EVENTS[3], one["collective_call_us"] * us,
                      f"measured on {cal['hardware'].iloc[0]} ({path.name})")
    return Machine(one["small_gemm_flops_per_s"], one["memory_bytes_per_s"], costs, by_world["allreduce_alpha_us"],
                   by_world["allreduce_busbw_GBps"], int(one["cores"]), one.get("loadavg_1m", float("nan")))


def rates(machine: Machine) -> Rates:
    """A CPU core as the compute model sees it: measured rates, no tile or wave quantization, and no fixed cost per
    kernel (the host's cost per op is the floor's: on a CPU the host is the device)."""
    consts = ComputeConstants(1.0, 1.0, 1.0, kernel_us=0.0, wave_allowance=0.0, k_overhead=0.0)
    g = machine.gemm_flops
    return Rates(matmul=g, bf16_matmul=g, attention=g, hbm=machine.memory_Bps, sms=1, consts=consts, tile=1)


def cluster(machine: Machine, world: int) -> Cluster:
    """The gloo world as one domain with the fitted latency per ring step and bus rate (Simple: gloo's one protocol)."""
    bus = machine.busbw_GBps[world]
    net = Network(domain=world, intra_GBps=bus, nic_GBps=bus, alpha_step_us=machine.alpha_us[world] / (2 * (world - 1)),
                  alpha_level_us=0.0, source="allreduce-bench fit (gloo)")
    return Cluster("cpu", "CPU (gloo)", world, "fp32", machine.gemm_flops / 1e12, machine.gemm_flops / 1e12,
                   machine.gemm_flops / 1e12, 1e3, machine.memory_Bps / 1e9, net)


def kernels(tp: int) -> Kernels:
    """parallel-3d on CPU: fp32, eager, SDPA, learned positions, three q/k/v Linears, SP with TP, torch's AdamW; its
    host work is the pytorch stack's counted floor (floor.py)."""
    return Kernels(flash=True, fused=False, sequence_parallel=tp > 1, fp8=False, rope=False, attention="fa2",
                   qkv_fused=False, autocast=False, optimizer="foreach", host="graphs", framework="pytorch")


class Predicted(NamedTuple):
    step_ms: float
    busy_ms: float  # one rank's own work (compute and host) per step, on a core of its own
    comm_ms: float  # its collectives' latency and transfer
    dilation: float  # how much slower its work runs with the ranks sharing the cores


def predict(row, machine: Machine) -> Predicted:
    """The planner's step for one measured layout (module docstring)."""
    shape = parse_model(row.model)
    fsdp = row.zero if row.dp > 1 else 0  # fp32 at dp = 1 runs without FSDP (parallel-3d/engine.py)
    rec = RECOMPUTE.index(row.recompute)
    deg = Degrees.of(t=row.tp, p=row.pp, d=row.dp, b=row.microbatch, v=row.interleave, m=row.num_microbatches,
                     zero=fsdp, recompute=rec)
    r, ker, m, v, p = rates(machine), kernels(row.tp), row.num_microbatches, row.interleave, row.pp
    out = step_costs(shape, cluster(machine, row.world), deg, grad_bytes=4.0, kernels=ker, tp_overlap=False,
                     dp_overlap=False, tp_layout_copies=True, fsdp_copies=fsdp >= 2, rates=r)
    layers = float(np.max([out.split.first, out.split.middle, out.split.last]))
    fl = pytorch_floor("fp32", row.tp, fsdp, rec)
    f, b, extra = layer_host_s(fl, machine.costs)
    c = machine.costs
    head_host = fl.per_microbatch.ops * c.op_s + fl.per_microbatch.dtensor_ops * c.dtensor_op_s
    once_host = (fl.per_step.ops + layers * fl.per_layer_step.ops) * c.optimizer_op_s \
        + (fl.per_step.dtensor_ops + layers * fl.per_layer_step.dtensor_ops) * c.dtensor_op_s
    # On a CPU the host is the device: per micro-batch a stage runs its ops' host work and their compute in turn.
    compute_mb = (float(out.compute_s) - float(out.optimizer_s)) / m
    host_mb = float(layers * (f + b + extra) + head_host)
    calls_mb = float(layers * host.layer_collectives(deg, ker) + (2 * v if p > 1 else 0)) * c.collective_s
    comm_mb = float(out.tp_comm_s + out.pp_comm_s) / m + calls_mb
    # Once per step the loss is averaged (engine.mean_loss): an all-reduce over the pipeline, one over data parallelism.
    loss = sum(float(collective_time_s("all_reduce", 4.0, n, n, cluster(machine, row.world).net)) + c.collective_s
               for n in (p, row.dp) if n > 1)
    dp_comm = float(out.dp_comm_s) + loss
    # Shared cores: the ranks that are working at once (every rank, less a pipeline's idle share: 1F1B keeps a stage
    # busy m of its m + (p - 1)/v slots) share the machine's cores, each at cores / busy ranks of one while more are
    # busy than there are cores. A rank waiting in a collective sleeps (gloo) and leaves its core to the others.
    busy_ranks = row.world * m / (m + (p - 1) / v)
    dilation = max(1.0, busy_ranks / machine.cores)
    work_mb = (compute_mb + host_mb) * dilation
    span = float(pipeline_step(m, v, work_mb + comm_mb, p * (work_mb + comm_mb)))
    once = (float(out.optimizer_s) + float(once_host)) * dilation + dp_comm
    busy = (compute_mb + host_mb) * m + float(out.optimizer_s) + float(once_host)
    return Predicted(1e3 * (span + once), 1e3 * busy, 1e3 * (comm_mb * m + dp_comm), dilation)


def predict_ms(row, machine: Machine) -> float:
    """The planner's step time for one measured layout (module docstring), in ms."""
    return predict(row, machine).step_ms


def spearman(a, b) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    ra, rb = pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


class Group(NamedTuple):
    name: str
    n: int
    rho: float
    pick: str  # the planner's fastest layout
    pick_vs_best: float  # its measured step over the measured best, - 1
    best: str
    median_abs: float  # median |predicted / measured - 1| over the group's layouts
    median_signed: float  # median predicted / measured - 1 (negative: the planner's steps too short)
    load: float  # the highest 1-minute load average its rows ran under


class Verdict(NamedTuple):
    """The ranking set against issue 38's targets."""
    groups: int
    rho_ok: int  # groups with rank correlation >= RHO_TARGET
    picks_ok: int  # groups whose pick is within PICK_WITHIN of the measured best
    median_abs: float  # over every layout
    median_signed: float

    @property
    def meets(self) -> bool:
        return (self.groups >= MIN_GROUPS and self.rho_ok == self.groups and self.picks_ok >= self.groups - 1
                and self.median_abs <= MEDIAN_TARGET)


RHO_TARGET, MIN_GROUPS, MEDIAN_TARGET = 0.8, 6, 0.25  # issue 38: every group, all picks but one, the median error


def layout(r) -> str:
    extra = [f"Z{r.zero}" if r.dp > 1 else "", r.recompute if r.recompute != "none" else "",
             f"v{r.interleave}" if r.interleave > 1 else "", f"b{r.microbatch}"]
    return f"{r.tp}·{r.pp}·{r.dp} " + " ".join(x for x in extra if x)


def compare(results: Path = RESULTS, hw: str = "cpu") -> tuple[pd.DataFrame, list[Group]]:
    rows_path, cal_path = results / f"ranking_{hw}.csv", results / f"ranking_calibration_{hw}.csv"
    rows = read_table(rows_path, ROWS)
    machine = read_machine(cal_path)
    rows = rows.assign(predicted_ms=[predict_ms(r, machine) for r in rows.itertuples()],
                       layout=[layout(r) for r in rows.itertuples()])
    rows = rows.assign(error=rows["predicted_ms"] / rows["step_time_ms"] - 1)
    groups = []
    for name, g in sorted(rows.groupby("group", sort=False), key=lambda kv: (kv[1]["world"].iloc[0],
                                                                              kv[1]["global_batch"].iloc[0])):
        pick = g.loc[g["predicted_ms"].idxmin()]
        best = g.loc[g["step_time_ms"].idxmin()]
        load = float(g["loadavg_1m"].max()) if "loadavg_1m" in g else float("nan")
        groups.append(Group(name, len(g), spearman(g["predicted_ms"], g["step_time_ms"]), pick["layout"],
                            pick["step_time_ms"] / best["step_time_ms"] - 1, best["layout"],
                            float(g["error"].abs().median()), float(g["error"].median()), load))
    return rows, groups


def verdict(rows: pd.DataFrame, groups: list[Group]) -> Verdict:
    return Verdict(len(groups), sum(g.rho >= RHO_TARGET for g in groups),
                   sum(g.pick_vs_best <= PICK_WITHIN for g in groups), float(rows["error"].abs().median()),
                   float(rows["error"].median()))


def load_sentence(rows: pd.DataFrame, machine: Machine) -> str:
    """Whether other work shared the cores while the layouts ran. A layout's own ranks make a load of about its world
    size; the predictions know only them (and the calibration, taken alone), so where the rows' median load beyond their
    world size exceeds half the cores, say so, with the rank correlation of that excess with the signed error and the
    error of the rows below and above its median. "" otherwise."""
    excess = rows["loadavg_1m"] - rows["world"]
    mid = float(excess.median())
    if not mid > machine.cores / 2:
        return ""
    low, high = rows[excess <= mid], rows[excess > mid]
    rho = spearman(excess, rows["error"])
    return (f"Other work shared the {machine.cores} cores while the layouts ran: their 1-minute load exceeded their "
            f"own ranks' (the world size) by a median {mid:.1f} (up to {excess.max():.1f}), where the calibration ran "
            f"at a load of {machine.load:.1f}. The prediction knows only the ranks; the more other work, the more it "
            f"undershoots (rank correlation of the excess load with the signed error {rho:+.2f}): "
            f"the layouts at or below the median excess are off by a median {low['error'].abs().median():.0%}, those "
            f"above it by {high['error'].abs().median():.0%}. Rerun `make parallel-3d-ranking` on an idle machine to "
            "separate the model's error from the sharing.")


def section(results: Path = RESULTS, heading: str = "###") -> str:
    """The ranking set as markdown: the verdict first, then the groups, then every layout."""
    head = f"{heading} Ranking: the planner's order against parallel-3d's measured layouts (CPU, gloo)"
    if not (results / "ranking_cpu.csv").is_file():
        return f"{head}\n\nNot measured yet: `make parallel-3d-ranking` (about 20 minutes on 2 cores)."
    try:
        rows, groups = compare(results)
    except ValueError as e:  # a calibration of an older ranking.py lacks what the floor needs
        return f"{head}\n\nNot comparable: {e}."
    v = verdict(rows, groups)
    said = (f"Over {v.groups} groups ({len(rows)} layouts), the planner's rank correlation with the measured step "
            f"times is at least {RHO_TARGET} in {v.rho_ok} of {v.groups} groups, its pick is within {PICK_WITHIN:.0%} "
            f"of the measured best in {v.picks_ok} of {v.groups}, and its step is off by a median "
            f"{v.median_abs:.0%} (signed {v.median_signed:+.0%}; targets: at least {MIN_GROUPS} groups, rank "
            f"correlation {RHO_TARGET} in each, the pick within {PICK_WITHIN:.0%} in all but one, median "
            f"{MEDIAN_TARGET:.0%}): {'all met' if v.meets else 'not all met'}.")
    hw = rows["hardware"].iloc[0]
    machine = read_machine(results / "ranking_calibration_cpu.csv")
    c = machine.costs
    lines = [head, "", said, "",
             f"Measured on {hw}, torch {rows['torch_version'].iloc[0]}, commit {rows['git_commit'].iloc[0]}, at a "
             f"1-minute load average of {rows['loadavg_1m'].min():.1f}-{rows['loadavg_1m'].max():.1f} "
             "(`parallel-3d/results/ranking_cpu.csv`); predicted by "
             "[`planner/evidence/ranking.py`](../planner/evidence/ranking.py) "
             "from this machine's calibration alone (`ranking_calibration_cpu.csv`: allreduce-bench's fit per world "
             f"size, a GEMM rate at the model's shape, a memory rate, {machine.cores} cores, and the host's cost per "
             f"unit of the framework's counted work: an op {c.op_s * 1e6:.1f} us, a DTensor op "
             f"{c.dtensor_op_s * 1e6:.0f} us, an optimizer op {c.optimizer_op_s * 1e6:.1f} us, an FSDP2 unshard "
             f"{c.fsdp_event_s * 1e6:.0f} us, a c10d call {c.collective_s * 1e6:.1f} us). Error = predicted / "
             "measured step - 1.", ""]
    shared = load_sentence(rows, machine)
    lines += [shared, ""] if shared else []
    lines += [
             markdown.table(["group", "layouts", "rank correlation", "planner's pick", "its measured step vs the best",
                             "measured best", "median abs. error", "median signed error"],
                            [[g.name, g.n, f"{g.rho:.2f}", g.pick, f"{g.pick_vs_best:+.1%}", g.best,
                              f"{g.median_abs:.0%}", f"{g.median_signed:+.0%}"] for g in groups],
                            align="lrrlrlrr"), ""]
    order = {g.name: i for i, g in enumerate(groups)}
    body = [[r.group, r.layout, f"{r.step_time_ms:,.0f}", f"{r.step_time_min_ms:,.0f}-{r.step_time_max_ms:,.0f}",
             f"{r.predicted_ms:,.0f}", f"{r.error:+.0%}"]
            for r in rows.assign(order=rows["group"].map(order)).sort_values(["order", "step_time_ms"]).itertuples()]
    lines += [markdown.table(["group", "TP·PP·DP, ZeRO, recompute, interleave, micro-batch", "measured ms",
                              "min-max ms", "predicted ms", "error"], body, align="llrrrr")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    print(section(Path(argv[0]) if argv else RESULTS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
