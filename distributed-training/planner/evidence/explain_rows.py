"""The planner beside what this repository measured: every GPU row with the cost model's prediction.

    PYTHONPATH=distributed-training python -m planner.evidence.explain_rows            # every lab's GPU rows
    PYTHONPATH=distributed-training python -m planner.evidence.explain_rows fp8-train  # one lab

`predict` is the one function that prices a measured row: own_runs.py reads each row's own columns
(model shape, precision, FP8 backend and recipe, torch.compile, degrees, micro-batch) into a Run, and
predict hands them to the same cost model `make plan` uses (costs.step_costs for a training step,
compute.layer_times for one block, compute.gemm_time for one GEMM, common/collective_cost.py for one
collective). Nothing is fitted to these rows: they are held out, like the evidence document's held-out published
runs. Two of a row's columns enter as measured facts of what ran, not as fits: the Adam step its lab's code
runs (own_runs.Stack.optimizer: fused AdamW with the clip folded in, or torch's default foreach AdamW), and,
where the step's profiler counted its kernels (fp8-train's kernels_per_step), the per-kernel fixed cost paid
for that count instead of the model's shorter op list. vs_measured.section(lab) is the markdown a lab's report
embeds ("predicted vs measured"), vs_measured.guide_table() the guide's "measured here" table; both come from
`compare`, so a GPU run that lands in a results folder appears in both with no hand work, and unexplained.py
says which rows the model does not claim, and why.

Every prediction is a cost-model projection; every measured number is the row's own.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from common.collective_cost import collective_time_s, members_per_domain
from common.hardware import get_preset
from planner.calibrate import gemm_rates
from planner.model.calibration import FITTED, ComputeConstants
from planner.model.cluster import Cluster, make_cluster
from planner.model.compute import Kernels, gemm_time, layer_times
from planner.model.costs import StepCosts, rates_for, step_costs
from planner.model.degrees import RECOMPUTE, Degrees
from planner.model.stages import StageSplit

from . import own_runs
from .own_runs import Run

# How this repository's labs run: PyTorch's SDPA (FlashAttention-2 kernels on Hopper), learned positions, no
# dropout; DTensor / hand-rolled TP without asynchronous overlap; FSDP2 and DDP overlap their collectives.
TP_OVERLAP, DP_OVERLAP = False, True


class Prediction(NamedTuple):
    value: float  # in the Run's unit
    step_s: float  # seconds of what the row timed
    note: str = ""
    gpu_s: float = float("nan")  # of a training step: the GPU's time alone (the step is the larger of it and the host's)


def kernels_of(run: Run) -> Kernels:
    """The compute model's kernel flags for the software a row ran (own_runs.Stack)."""
    s = run.stack
    fp8 = s.precision == "fp8"
    return Kernels(flash=True, fused=s.compiled, sequence_parallel=run.layout.sequence_parallel, dropout=False,
                   fp8=fp8, rope=False, attention="fa2", fp8_backend=s.backend if fp8 else "te-fused",
                   fp8_recipe=s.recipe or "delayed", qkv_fused=False,
                   autocast=s.weights == "fp32" and run.layout.zero < 2, fp8_eager=s.fp8_eager,
                   optimizer=s.optimizer if s.optimizer != "none" else "megatron",
                   host="compiled" if s.compiled else "eager", framework="pytorch")


def cluster_of(run: Run, consts: ComputeConstants | None = None) -> Cluster:
    """The hardware table's cluster for a row (its GPU, its world size), with `consts` if given."""
    precision = "fp8" if run.stack.precision == "fp8" else "bf16"
    cl = make_cluster(get_preset(run.gpu), run.layout.world, precision)
    return cl if consts is None else replace(cl, compute=consts)


def degrees_of(run: Run) -> Degrees:
    lay = run.layout
    return Degrees.of(t=lay.tp, p=lay.pp, c=1, d=lay.dp, b=lay.microbatch, v=lay.interleave, m=lay.micro_batches,
                      zero=lay.zero, recompute=RECOMPUTE.index(lay.recompute))


def split_of(run: Run) -> StageSplit | None:
    """The stage split a pipelined row ran (its stage_layers), as the planner's StageSplit; None = the planner's."""
    lay = run.layout
    if lay.pp == 1 or not lay.stage_layers:
        return None
    per_rank = [sum(lay.stage_layers[r::lay.pp]) for r in range(lay.pp)]
    middle = max(per_rank[1:-1], default=0)
    return StageSplit(*(np.asarray(float(x)) for x in (per_rank[0], middle, per_rank[-1])))


def _times(run: Run, cl: Cluster) -> StepCosts:
    grad_bytes = 4.0 if run.stack.weights == "fp32" else 2.0
    return step_costs(run.shape, cl, degrees_of(run), grad_bytes=grad_bytes, kernels=kernels_of(run),
                      tp_overlap=TP_OVERLAP, dp_overlap=DP_OVERLAP, tp_layout_copies=True,
                      fsdp_copies=run.layout.zero >= 2)


HOST_PACED = 0.05  # a row whose GPU idled for this share of its step or more was paced by its host


def host_paced(run: Run) -> bool:
    """True if the row measured its GPU's busy time (fp8-train's gpu_busy_ms) and the GPU idled HOST_PACED or more."""
    busy, step = run.detail.get("gpu_busy_ms"), run.detail.get("step_ms")
    return bool(busy and step and busy < (1 - HOST_PACED) * step)


def _step(run: Run, cl: Cluster) -> Prediction:
    lay = run.layout
    times = _times(run, cl)
    step, gpu = float(times.step_s), float(times.gpu_step_s)
    counted = run.detail.get("kernels_per_step")
    if counted:
        # The row counted the kernels its step launched (the profiler): the per-kernel fixed cost is paid for
        # those, not for the kernels the model's op list has (it knows the big ones, not every small one).
        # The model's GPU time with the counted kernels' fixed cost spread over its own op list, so that host and
        # GPU are serialised as in any other step (costs.serialised_step).
        no_fixed = float(_times(run, replace(cl, compute=replace(cl.compute, kernel_us=0.0))).gpu_step_s)
        per_kernel = (gpu - no_fixed) / cl.compute.kernel_us if cl.compute.kernel_us else 0.0  # kernels x 1e-6
        scaled = cl.compute.kernel_us * counted * 1e-6 / per_kernel if per_kernel > 0 else cl.compute.kernel_us
        times = _times(run, replace(cl, compute=replace(cl.compute, kernel_us=scaled)))
        step, gpu = float(times.step_s), float(times.gpu_step_s)
    note = ""
    if run.detail.get("gpu_busy_ms"):
        # host.py: a step is the larger of the GPU's time and the host's. The row measured the GPU's busy time, so a
        # host-paced row is judged on it: the model's GPU time against the GPU's (error).
        note = (f"GPU busy {run.detail['gpu_busy_ms']:.1f} of {run.detail['step_ms']:.1f} ms; predicted GPU "
                f"{gpu * 1e3:.1f} ms, host {float(times.host_s) * 1e3:.1f} ms")
    tokens = lay.microbatch * lay.micro_batches * lay.dp * run.shape.seq
    if run.unit == "ms":
        return Prediction(step * 1e3, step, note, gpu)
    return Prediction(tokens / step / lay.world, step, note, gpu)


def _block(run: Run, cl: Cluster) -> Prediction:
    """One block forward + backward (tp-attention): the layer's compute and its TP collectives, no optimizer."""
    lay, sh = run.layout, run.shape
    deg = degrees_of(run)
    lt = layer_times(sh, deg.t, deg.c, deg.b, kernels_of(run), rates_for(cl, kernels_of(run)))
    tp_bytes = 2.0 * lay.microbatch * sh.seq * sh.hidden
    comm = 4 * collective_time_s("all_reduce", tp_bytes, lay.tp, members_per_domain(lay.tp, 1, cl.domain), cl.net)
    step = float(lt["fwd"] + lt["bwd"] + comm)
    return Prediction(step * 1e3, step)


def _gemm(run: Run, cl: Cluster) -> Prediction:
    """One GEMM timed alone (best of its iterations): the model's burst rate, sustained fraction 1."""
    d = run.detail
    burst = replace(cl, compute=replace(cl.compute, sustained_ampere=1.0, sustained_hopper=1.0))
    rt = rates_for(burst, Kernels(fp8=run.stack.precision == "fp8"))
    rate = rt.matmul if run.stack.precision == "fp8" else rt.bf16_matmul
    in_bytes = 1.0 if run.stack.precision == "fp8" else 2.0
    t = float(gemm_time(d["m"], d["n"], d["k"], rate, rt, in_bytes=in_bytes))
    return Prediction(t * 1e6, t)


def _collective(run: Run, cl: Cluster) -> Prediction:
    d, n = run.detail, run.layout.dp
    n_local = members_per_domain(n, 1, cl.domain)
    t = float(collective_time_s(d["collective"], d["bytes"], n, n_local, cl.net))
    note = "one rank: no byte crosses a link; the model prices no transfer" if n == 1 else ""
    return Prediction(t * 1e6, t, note)


def _bound(run: Run, cl: Cluster) -> Prediction:
    """fp8-train's FP8 bound (bound.csv): the BF16 step with its linear layers' GEMMs run in FP8 and nothing else
    changed, over the BF16 step (Amdahl). The model's step, its GEMM share and its FP8 GEMMs, from the row's shape."""
    bf16 = replace(run, kind="step", unit="tokens/s", stack=replace(run.stack, precision="bf16", backend="torch"))
    bf16_cl = cluster_of(bf16, cl.compute)
    step = _step(bf16, bf16_cl).step_s
    deg, sh = degrees_of(run), run.shape
    gemm = {}
    for precision, c in (("bf16", bf16_cl), ("fp8", cl)):
        ker = replace(kernels_of(bf16), fp8=precision == "fp8")
        lt = layer_times(sh, deg.t, deg.c, deg.b, ker, rates_for(c, ker))
        gemm[precision] = float(sh.layers * (lt["gemm_fwd"] + lt["gemm_bwd"])) * run.layout.micro_batches
    bound = step / (step - gemm["bf16"] + gemm["fp8"])
    return Prediction(bound, step, f"GEMM share of the BF16 step: predicted {gemm['bf16'] / step:.0%}, measured "
                                   f"{run.detail.get('gemm_share', float('nan')):.0%}")


PRICERS = {"step": _step, "block": _block, "gemm": _gemm, "collective": _collective, "bound": _bound}


def predict(run: Run, consts: ComputeConstants | None = None) -> Prediction:
    """The cost model's number for a measured row, from the row's own columns (see the module docstring);
    `consts` replaces calibration.py's constants (a calibration measured on the row's GPU)."""
    return PRICERS[run.kind](run, cluster_of(run, consts))


def error(run: Run, pred: Prediction) -> float | None:
    """Signed error of the model in throughput terms: + means the model is faster than measured. A host-paced row that
    measured its GPU's busy time is judged on that time, which is what the model's GPU time predicts."""
    if host_paced(run) and pred.gpu_s == pred.gpu_s:
        return run.detail["gpu_busy_ms"] / (pred.gpu_s * 1e3) - 1
    if not pred.value or not run.measured:
        return None
    if run.higher_is_better:
        return pred.value / run.measured - 1
    return run.measured / pred.value - 1


class Compared(NamedTuple):
    run: Run
    predicted: Prediction
    error: float | None


def one_gpu_step_s(gcfg, gpu: str, zero: int, sequences: int) -> float:
    """A one-GPU training step of the labs' GPT (common.model.GPTConfig) as fsdp-scaling runs it (eager bf16 over
    fp32 master weights, AdamW), one micro-batch of `sequences`, ZeRO stage `zero` on one rank, priced as predict
    prices a measured fsdp-scaling row: for projections of runs nobody measured (fsdp-scaling/project.py)."""
    shape = own_runs.Shape(gcfg.n_layers, gcfg.d_model, gcfg.n_heads, gcfg.kv_heads, gcfg.vocab_size, gcfg.seq_len,
                           gcfg.ffn)
    run = Run("fsdp-scaling", "step", "", "projection", gpu, "tokens/s", float("nan"), shape,
              own_runs.Stack("bf16", optimizer=own_runs.TORCH_ADAMW), own_runs.Layout(zero=zero, microbatch=sequences))
    return predict(run).step_s


class Calibration(NamedTuple):
    """Compute constants measured per GPU (gemm_rates.py), with a note each; empty = the table's."""

    consts: dict[str, ComputeConstants]
    notes: dict[str, str]


def measured_calibration(paths: list[str] | None = None) -> Calibration:
    """Per GPU, the sustained matmul fraction of its GEMM benchmark rows (default: every bench_gemm.csv under
    fp8-train/results/), or, for a GPU without any, of the GEMMs its FP8-bound rows timed inside a training step
    (bound.csv: the H200's own rate, never an H100's); the rest of calibration.py's constants unchanged."""
    results = own_runs.LABS / "fp8-train" / "results"
    if paths is None:
        paths = [str(p) for p in sorted(results.glob("*/bench_gemm.csv"))]
    consts, notes = {}, {}
    for gpu, rows in gemm_rates.gpu_rows(paths).items():
        found = gemm_rates.calibrated_constants(gpu, FITTED, rows)
        if found:
            consts[gpu], notes[gpu] = found
    bounds = [str(p) for p in sorted(results.glob("*/bound.csv"))]
    for gpu, rows in gemm_rates.gpu_bound_rows(bounds).items():
        found = None if gpu in consts else gemm_rates.calibrated_constants(gpu, FITTED, rows, in_step=True)
        if found:
            consts[gpu], notes[gpu] = found
    return Calibration(consts, notes)


def gemm_tflops(run: Run) -> float:
    """A GEMM row's measured rate: 2 m n k FLOPs over its time."""
    d = run.detail
    return 2 * d["m"] * d["n"] * d["k"] / (run.measured * 1e-6) / 1e12


def gemm_size_note(run: Run, runs: list[Run]) -> str:
    """Why a GEMM row is slower than priced, where its own file says so: a smaller GEMM of the same op and GPU ran at a
    higher rate. The model's GEMM rate only rises with size (fewer partial tiles and waves), so it cannot price a larger
    GEMM running slower; the benchmark records no clock or power draw, so the cause is not measured. "" otherwise."""
    if run.kind != "gemm":
        return ""
    op, size = run.name.rsplit(" ", 1)[0], run.detail["m"] * run.detail["n"] * run.detail["k"]
    smaller = [r for r in runs if r.kind == "gemm" and r.file == run.file and r.name.rsplit(" ", 1)[0] == op
               and r.detail["m"] * r.detail["n"] * r.detail["k"] < size]
    faster = max(smaller, key=gemm_tflops, default=None)
    if faster is None or gemm_tflops(faster) <= gemm_tflops(run):
        return ""
    return (f"slower than a smaller GEMM: {gemm_tflops(run):,.0f} TFLOP/s where {faster.name.rsplit(' ', 1)[1]} ran at "
            f"{gemm_tflops(faster):,.0f} in the same benchmark; the model's GEMM rate only rises with size, and the "
            "benchmark records no clock or power draw, so why the larger GEMM ran slower is not measured")


def compare(runs: list[Run], cal: Calibration | None = None) -> list[Compared]:
    """Every run beside its prediction; steps and blocks with `cal`'s constants for their GPU where it has some. A GEMM
    row slower than a smaller GEMM of its own benchmark carries a note saying so (gemm_size_note)."""
    out = []
    for run in runs:
        consts = cal.consts.get(run.gpu) if cal is not None and run.kind in ("step", "block", "bound") else None
        pred = predict(run, consts)
        why = gemm_size_note(run, runs)
        if why and not pred.note:
            pred = pred._replace(note=why)
        out.append(Compared(run, pred, error(run, pred)))
    return out


def main(argv: list[str] | None = None) -> int:
    labs = (argv if argv is not None else sys.argv[1:]) or list(own_runs.READERS)
    for lab in labs:
        rows = compare(own_runs.runs(lab), measured_calibration())
        for c in rows:
            err = "" if c.error is None else f"{c.error:+7.1%}"
            print(f"{lab:15s} {c.run.name:48s} {c.run.measured:>12,.1f} {c.predicted.value:>12,.1f} {c.run.unit:8s} "
                  f"{err}")
        errs = [abs(c.error) for c in rows if c.error is not None and c.run.kind != "collective"]
        if errs:
            print(f"{lab}: {len(errs)} rows, median |error| {statistics.median(errs):.1%}, max {max(errs):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
