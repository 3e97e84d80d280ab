"""The planner runs behind each rule of the guide (PLANNER_VALIDATION.md section 2; accuracy.py has its
accuracy tables).

Each function returns markdown (a table and, where the rule needs one, a sentence whose numbers come
from the same runs), so nothing quoted in the guide's prose is typed by hand. Settings shared by
every run (H100 SXM preset, 8-GPU NVLink domain, 400 Gb/s per GPU, seq 4096, vocab 51,200, the
batch rule of batch_for) are stated in guide_template.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

from common.hardware import get_preset
from planner.calibrate import calibrate
from planner.evidence.prose import prose, table
from planner.model.cluster import make_cluster
from planner.model.shapes import model_flops_per_token, model_shape
from planner.model.stacks import MEGATRON, Stack
from planner.search.choose import NEAR_TIE
from planner.search.search import Pins, Workload, default_batch, search

SEQ = 4096


@lru_cache(maxsize=None)
def shape_of(model: str, seq: int = SEQ):
    """The model `make plan ARGS="--params MODEL"` plans: a named model's published shape, else a standard one."""
    return model_shape(model, seq)


def batch_for(gpus: int, seq: int = SEQ) -> int:
    """Global batch in sequences: the CLI's default rule (search.default_batch), 1M tokens or 1K tokens per GPU."""
    return default_batch(gpus, seq)


@dataclass(frozen=True)
class Context:
    """What the guide is written for: the hardware table's H100 (the committed guide), or a GPU calibrated with
    the files of `make guide CALIBRATE=...` (calibrate.py), which then replace the table's figures."""

    gpu: str = "h100"
    calibrate: tuple[str, ...] = ()
    strict: bool = True  # False for CALIBRATE=results: sweeps that cannot calibrate are skipped, with a note
    stack: Stack = MEGATRON  # the stack the rules' tables are priced for (the answer and first matrix: PyTorch's)


CONTEXT = Context()


def set_context(ctx: Context) -> None:
    """Write the guide for `ctx` from now on. Plans made with calibration files are dropped (the files are read
    anew); the hardware table's plans are kept, by context: they read no file, so the same question gets the same
    plan however often a guide is written in one process."""
    global CONTEXT
    CONTEXT = ctx
    _calibrated_plan.cache_clear()
    _calibrated_node.cache_clear()


@lru_cache(maxsize=None)
def _calibrated_node(gpu: str, precision: str, domain: int | None, net: float | None):
    """One node of the context's GPU, calibrated with the context's files (read once per network variant)."""
    cl = make_cluster(get_preset(gpu), 8, precision, domain, inter_node_gbps=net)
    return calibrate.calibrated(cl, list(CONTEXT.calibrate), CONTEXT.strict)


def cluster_for(gpu: str, gpus: int, precision: str = "bf16", domain: int | None = None, net: float | None = None):
    """The hardware table's cluster, calibrated with the context's files where it is the context's GPU."""
    if CONTEXT.calibrate and gpu == CONTEXT.gpu:
        return replace(_calibrated_node(gpu, precision, domain, net), gpus=gpus)
    return make_cluster(get_preset(gpu), gpus, precision, domain, inter_node_gbps=net)


def plan(model: str, gpus: int, gpu: str | None = None, net: float | None = None, domain: int | None = None,
         seq: int = SEQ, tokens: int | None = None, precision: str = "bf16", pins: Pins = Pins(),
         stack: Stack | None = None):
    """One planner search with the guide's defaults (cached, by context); returns the Result. stack: the context's
    by default (`make plan --stack <name>` with the same model, GPUs and pins gives the same plan)."""
    cached = _calibrated_plan if CONTEXT.calibrate else _table_plan
    return cached(CONTEXT, model, gpus, gpu, net, domain, seq, tokens, precision, pins, stack)


def _plan(ctx: Context, model: str, gpus: int, gpu: str | None, net: float | None, domain: int | None, seq: int,
          tokens: int | None, precision: str, pins: Pins, stack: Stack | None):
    """plan() for `ctx`, the context set now (it is the caches' key)."""
    batch = batch_for(gpus, seq) if tokens is None else max(1, tokens // seq)
    cl = cluster_for(gpu or ctx.gpu, gpus, precision, domain, net)
    workload = Workload.of(stack or ctx.stack, shape_of(model, seq), batch, precision)
    return search(workload, cl, pins, top=1, max_rejected=1)


_table_plan = lru_cache(maxsize=None)(_plan)  # the hardware table's contexts: kept for the process
_calibrated_plan = lru_cache(maxsize=None)(_plan)  # a calibrated context's: dropped whenever a context is set


def degrees(c: dict) -> str:
    return f"{c.tp}·{c.pp}·{c.dp}" + (f"·{c.cp}" if c.cp > 1 else "")


def knobs(c: dict) -> str:
    v = f", v {c.interleave}" if c.interleave > 1 else ""
    return f"Z{c.zero}, {c.microbatch}×{c.num_microbatches}{v}, {c.recompute}"


def no_fit(res) -> str:
    """Why a cell is empty: the least memory any configuration needed."""
    need = re.search(r"needs ([0-9.]+) GB", res.rejected[0].reason) if res.rejected else None
    return f"does not fit (≥ {float(need.group(1)):.0f} GB/GPU)" if need else "no configuration divides"


def best_over(results) -> dict | None:
    """The highest-throughput best plan of several searches (plans may run slightly different batches)."""
    found = [r.best for r in results if r.best]
    return max(found, key=lambda c: c.tokens_per_s) if found else None


def rule_tp() -> str:
    """TP inside the NVLink domain: 175B on 512 H100 with TP pinned from 1 to 32, two networks."""
    rows, steps = [], {}
    for tp in (1, 2, 4, 8, 16, 32):
        row = [tp]
        for net in (400, 100):
            c = plan("175B", 512, net=net, pins=Pins(tp=tp)).best
            steps[tp, net] = c.step_s
            row += [f"{degrees(c)} ({knobs(c)})", f"{c.step_s:.2f}", f"{c.tp_comm_s - c.tp_hidden_s:.2f}"]
        rows.append(row)
    pcie = plan("175B", 512, domain=1, pins=Pins(tp=8)).best
    rows.append(["8, PCIe only", f"{degrees(pcie)} ({knobs(pcie)})", f"{pcie.step_s:.2f}",
                 f"{pcie.tp_comm_s - pcie.tp_hidden_s:.2f}", "", "", ""])
    best = {net: min((tp for tp, n in steps if n == net), key=lambda tp: steps[tp, net]) for net in (400, 100)}
    text = prose(
        f"At 400 Gb/s the fastest TP degree is {best[400]}; TP 16, half of each group on another node, takes "
        f"{steps[16, 400] / steps[8, 400]:.2f}x the step time of TP 8 and TP 32 (four nodes) "
        f"{steps[32, 400] / steps[8, 400]:.2f}x. At 100 Gb/s the fastest is {best[100]}, and TP 16 costs "
        f"{steps[16, 100] / steps[8, 100]:.2f}x, TP 32 {steps[32, 100] / steps[8, 100]:.2f}x. On a PCIe-only "
        f"machine even TP 8 takes {pcie.step_s / steps[8, 400]:.2f}x as long as with NVLink.")
    return table(["TP", "400 Gb/s: TP·PP·DP (ZeRO, micro-batch×m, recompute)", "step s", "exposed TP s",
                  "100 Gb/s: TP·PP·DP (...)", "step s", "exposed TP s"], rows) + "\n\n" + text


def rule_pp() -> str:
    """PP once the model does not fit: 512 H100, best with PP pinned to 1 vs the free best."""
    rows = []
    for model in ("8B", "70B", "405B", "1T"):
        for net in (100, 400):
            free, flat = plan(model, 512, net=net).best, plan(model, 512, net=net, pins=Pins(pp=1)).best
            rows.append([model, net, degrees(free) if free else "no fit", knobs(free) if free else "",
                         f"{free.step_s:.2f}" if free else "",
                         f"{degrees(flat)} ({knobs(flat)})" if flat else "does not fit",
                         f"{flat.step_s / free.step_s:.2f}x" if flat and free else "-"])
    return table(["model", "Gb/s", "best TP·PP·DP", "ZeRO, micro-batch×m, recompute", "step s",
                  "best without PP", "its step / best"], rows)


def rule_dp() -> str:
    """DP for the rest: 8B from 8 to 16384 H100, tokens per GPU and how much DP traffic hides."""
    rows = []
    for gpus in (8, 64, 512, 4096, 16384):
        c = plan("8B", gpus).best
        rows.append([gpus, degrees(c), knobs(c), batch_for(gpus) * SEQ // gpus, f"{c.dp_comm_s:.3f}",
                     f"{c.dp_hidden_s / c.dp_comm_s:.0%}" if c.dp_comm_s else "-", f"{c.mfu:.1%}"])
    return table(["GPUs", "TP·PP·DP", "ZeRO, micro-batch×m, recompute", "tokens/GPU/step", "DP comm s", "hidden",
                  "MFU"], rows)


def rule_zero3_vs_pp() -> str:
    """ZeRO-3 (FSDP, no PP) against PP with a ZeRO-1 optimizer, 70B and 405B, by scale and network."""
    rows, close = [], []
    for model, counts in (("70B", (64, 512, 4096)), ("405B", (512, 4096))):
        for gpus in counts:
            for net in (100, 400):
                fsdp = plan(model, gpus, net=net, pins=Pins(pp=1, zero=3)).best
                pp = best_over(plan(model, gpus, net=net, pins=Pins(pp=p, zero=1)) for p in (2, 4, 8, 16))
                win = "ZeRO-3" if pp is None or (fsdp and fsdp.tokens_per_s > pp.tokens_per_s) else "PP"
                if fsdp and pp and min(fsdp.tokens_per_s, pp.tokens_per_s) >= \
                        (1 - NEAR_TIE) * max(fsdp.tokens_per_s, pp.tokens_per_s):
                    win += " (near-tie)"
                    close.append(net)
                rows.append([model, gpus, net, batch_for(gpus) * SEQ // gpus,
                             f"{degrees(fsdp)}: {fsdp.step_s:.2f} s" if fsdp else "no fit",
                             f"{degrees(pp)}: {pp.step_s:.2f} s" if pp else "no fit", win])
    zero3 = sum(r[-1].startswith("ZeRO-3") for r in rows)
    ties = f"{len(close)} is a near-tie" if len(close) == 1 else f"{len(close)} are near-ties"
    text = prose(f"ZeRO-3 is the faster option in {zero3} of these {len(rows)} cases; {ties} (within {NEAR_TIE:.0%}, "
                 "the model's own error), where the rules of the guide's recipe (its section 2) decide: the fewest "
                 "pipeline stages, so ZeRO-3.")
    return table(["model", "GPUs", "Gb/s", "tokens/GPU", "ZeRO-3, no PP", "PP + ZeRO-1", "faster"], rows) \
        + "\n\n" + text


def rule_bubble() -> str:
    """Micro-batch and interleaving against the bubble: 175B, TP 8 x PP 8 x DP 8 on 512 H100."""
    rows = []
    for b in (1, 2, 4):
        for v in (1, 2, 3, 6, 12):
            res = plan("175B", 512, pins=Pins(tp=8, pp=8, cp=1, microbatch=b, interleave=v))
            c = res.best
            if c is None:
                rows.append([b, v, "", "", "", no_fit(res), ""])
                continue
            rows.append([b, v, c.num_microbatches, f"{c.bubble_fraction:.1%}", f"{c.step_s:.2f}",
                         f"{c.memory_gb.total:.0f}", c.recompute])
    return table(["micro-batch", "v", "m", "bubble (p-1)/(v·m + p-1)", "step s", "GB/GPU", "recompute"], rows)


def rule_long_context() -> str:
    """Context parallelism and recompute as the sequence grows at a fixed 4M tokens per step."""
    rows = []
    for model, gpus in (("8B", 64), ("70B", 512)):
        for seq in (4096, 16384, 65536, 131072):
            shape = shape_of(model, seq)
            attn = 12 * shape.layers * shape.hidden * seq / model_flops_per_token(shape)
            res = plan(model, gpus, seq=seq, tokens=2**22)
            c = res.best
            if c is None:
                rows.append([model, gpus, seq, f"{attn:.0%}", no_fit(res), "", "", "", ""])
                continue
            rows.append([model, gpus, seq, f"{attn:.0%}", degrees(c), knobs(c), f"{c.memory_gb.total:.0f}",
                         f"{c.tokens_per_s_per_gpu:,.0f}", f"{c.mfu:.1%}"])
    return table(["model", "GPUs", "seq", "attention share of FLOPs", "TP·PP·DP·CP",
                  "ZeRO, micro-batch×m, recompute", "GB/GPU", "tokens/s/GPU", "MFU"], rows)


def rule_fp8() -> str:
    """What FP8 changes: the bf16 plan run in FP8, and the best FP8 plan, on H100."""
    rows = []
    for model, gpus in (("8B", 64), ("70B", 512), ("405B", 4096)):
        bf = plan(model, gpus).best
        same = plan(model, gpus, precision="fp8", pins=Pins(bf.tp, bf.pp, bf.dp, bf.cp, bf.zero, bf.microbatch,
                                                             bf.interleave, bf.recompute)).best
        f8 = plan(model, gpus, precision="fp8").best
        rows.append([model, gpus, f"{degrees(bf)} ({knobs(bf)})", f"{bf.memory_gb.total:.1f} → "
                     f"{same.memory_gb.total:.1f}", f"{bf.step_s / same.step_s:.2f}x",
                     f"{degrees(f8)} ({knobs(f8)})", f"{bf.step_s / f8.step_s:.2f}x",
                     f"{bf.model_tflops_per_gpu:.0f} → {f8.model_tflops_per_gpu:.0f}",
                     f"{bf.mfu:.1%} → {f8.mfu:.1%}"])
    return table(["model", "GPUs", "bf16 plan", "its GB/GPU, bf16 → FP8", "FP8 speed-up, same plan", "best FP8 plan",
                  "speed-up", "model TFLOP/s/GPU", "MFU (each vs its own peak)"], rows)


SECTIONS = {"rule_tp": rule_tp, "rule_pp": rule_pp, "rule_dp": rule_dp, "rule_zero3_vs_pp": rule_zero3_vs_pp,
            "rule_bubble": rule_bubble, "rule_long_context": rule_long_context, "rule_fp8": rule_fp8}
