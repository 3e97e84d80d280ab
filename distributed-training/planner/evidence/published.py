"""The planner's predictions beside published measurements: the runs its constants are fitted on, and the held-out ones.

The rows below are large runs; published_small.py adds small models on one node and a few (issue 29), all held out.

Each row pins the configuration the authors ran (degrees, batch, micro-batch, recompute) and the
software they ran it with (fused kernels or eager, which attention, whether collectives overlap),
and lets the planner fill in only what the paper does not state; the error is that of per-GPU
throughput, (predicted - published) / published, whatever the source reports (hardware or model
TFLOP/s, tokens/s, or an iteration time read as its inverse).

`role` says what each row is for: "fit" rows are the only ones fit_compute.py sees when it fits
the three constants of calibration.py; every "held-out" row is a prediction the fit never saw.

Sources:
- Megatron SC21 (Narayanan et al., arXiv 2104.04473) Table 1 (fit): GPT 1.7B ... 1T on A100 80 GB
  (Selene: 8 GPUs per node, 8 x 200 Gb/s HDR), seq 2048, vocab 51,200, full recompute, no ZeRO,
  TFLOP/s per GPU counted with eq. 3 (recompute included). Micro-batch and interleaving are not in
  the table, so the planner picks them. Megatron of 2021: fp32 gradient buffers, dropout, scores
  materialised (no FlashAttention), fused kernels, TP and DP collectives on the critical path.
- Korthikanti et al. (arXiv 2205.05198) Table 5 iteration times (held out): full recompute vs
  sequence parallel + selective recompute, A100 80 GB; degrees, batch, micro-batch and interleaving
  as in Calculon's validation inputs (calculon-ai/calculon validation/seqsel/tab5/*.json), which also
  run TP collectives without overlap. (The MFU the Megatron-LM README quotes for the selective runs
  is the same measurement divided differently, so it is not a separate row.)
- MT-NLG 530B (Smith et al., arXiv 2201.11990 §2.4; held out): 105 layers, h 20480, 128 heads,
  vocab 50,272, seq 2048, batch 1920, TP 8 x PP 35 on 280 / 350 / 420 DGX A100 nodes, 60.1 /
  50.2 / 44.4 s per iteration = 126 / 121 / 113 TFLOP/s per GPU (eq. 3 counting). DeepSpeed's
  1F1B pipeline (no interleaving), micro-batch 1, full recompute, the 2021 kernels and no overlap.
- OPT-175B (Zhang et al., arXiv 2205.01068 §2.4; held out): "992 80GB A100 GPUs, by utilizing Fully
  Sharded Data Parallel with Megatron-LM Tensor Parallelism ... up to 147 TFLOP/s per GPU"; 96 layers,
  h 12288, 96 heads, vocab 50,272, seq 2048, batch 2M tokens. TP 8 with ZeRO-3 over the other 124
  GPUs, which do not divide the 1,024 sequences: the planner runs the nearest batch, 992. The paper
  does not say how it counted FLOPs; the row takes eq. 3's counting with full recompute (an assumption).
- BLOOM 176B (BigScience, arXiv 2211.05100 §3.4; held out): 70 layers, h 14336, 112 heads, vocab
  250,880, seq 2048, batch 2048, micro-batch 2, TP 4 x PP 12 x DP 8 with ZeRO-1 on 384 A100 80 GB
  (48 nodes of 8, 4 x 100 Gb/s Omni-Path per node: 50 Gb/s per GPU), bf16, no dropout, full
  recompute, "about 150 TFLOP/s" per GPU. 70 layers on 12 stages: the planner chooses the split
  (BLOOM counted the embeddings as stages' layers and ran 5 transformer layers on the first and last).
- Llama 3 405B (Llama 3 paper, arXiv 2407.21783, Table 4; held out): 126 layers, h 16384, 128
  heads, 8 kv heads, SwiGLU 53,248, vocab 128,256, H100 80 GB at 700 W, 400 Gb/s RoCE per GPU, 16M
  tokens per batch; TP 8 x PP 16 on 8,192 GPUs (430 TFLOP/s per GPU, BF16 MFU 43%) and 16,384 GPUs
  (400), and TP 8 x CP 16 x PP 16 at 131,072 tokens (380). 126 layers on 16 stages: the planner
  chooses the split (Meta ran one layer fewer on the first and last stage).
- torchtitan (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Dec 2024, and
  asyncTP_llama3_h100_2025-06_torchtitan.md, June 2025; the fit row is 8B FSDP + compile on 8 GPUs,
  the others are held out): Llama 3.1 8B with FSDP on 8 and 128 GPUs, eager and compiled, per-op
  selective AC, local batch 2; 70B FSDP 32 x TP 8 on 256 GPUs, compiled, full AC, local batch 16,
  vanilla TP; 8B FSDP 8 x TP 8 on 64 GPUs, compiled, per-op SAC, local batch 12, vanilla TP; all
  bf16, seq 8192. Their hosts are Grand Teton H100s: 96 GB HBM2e at 2.4 TB/s and a 500 W power limit
  (the `h100-gt` row of common/hardware.py). PyTorch's SDPA ran FlashAttention-2 on H100 then
  (cuDNN attention was opt-in: pytorch/pytorch#138522); FSDP reduces gradients in fp32.

A SwiGLU MLP of width F is modelled as a two-matrix MLP of width 1.5·F (same parameters and FLOPs).
Everything the planner prints here is a cost-model projection; nothing was measured on a GPU here.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from common.hardware import get_preset
from planner.model.calibration import FITTED, ComputeConstants
from planner.model.cluster import make_cluster
from planner.model.shapes import Shape
from planner.search.records import Plan
from planner.search.search import Pins, Workload, search

from . import published_small
from .kept import kept
from .cases import LLAMA3_STACK, MEGATRON_2021, MEGATRON_2022, TORCHTITAN, Case, Software, gpt, llama  # noqa: F401

SC21 = "Megatron SC21 Table 1"
KORTHIKANTI = "Korthikanti Table 5"
MTNLG = "MT-NLG 530B"
OPT = "OPT-175B"
BLOOM = "BLOOM 176B"
LLAMA3 = "Llama 3 405B"
TITAN = "torchtitan H100 benchmarks"
METRIC_RATES = ("hardware_tflops_per_gpu", "model_tflops_per_gpu", "tokens_per_s_per_gpu")


# (params B, heads, hidden, layers, TP, PP, GPUs, batch, achieved TFLOP/s per GPU)
SC21_TABLE1 = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
               (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
               (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
               (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
               (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163)]
# name, shape, TP, PP, batch, micro-batch, interleave (selective run / full run), seconds full / selective+SP
KORTHIKANTI_TABLE5 = [("22B", gpt(48, 6144, 64), 8, 1, 4, 4, (1, 1), 1.42, 1.10),
                      ("175B", gpt(96, 12288, 96), 8, 8, 64, 1, (3, 3), 18.13, 13.75),
                      ("530B", gpt(105, 20480, 128), 8, 35, 280, 1, (3, 3), 49.05, 37.83),
                      ("1T", gpt(128, 25600, 160), 8, 64, 512, 1, (1, 1), 94.42, 71.49)]
# Fig. 1 (GiB per GPU): params+optimizer, activations without recompute (TP, no SP), with SP + selective
KORTHIKANTI_FIG1 = {"22B": (45.5625, 59.25, 9.5625), "175B": (45.5625, 66.84375, 12.3515625),
                    "530B": (31.640625, 114.0234375, 23.076171875), "1T": (32.958984375, 131.25, 26.5625)}
# nodes of 8 A100s, seconds per iteration, TFLOP/s per GPU
MTNLG_RUNS = [(280, 60.1, 126), (350, 50.2, 121), (420, 44.4, 113)]
# GPUs, CP, sequence length, TFLOP/s per GPU (model FLOPs, BF16)
LLAMA3_RUNS = [(8192, 1, 8192, 430), (16384, 1, 8192, 400), (16384, 16, 131072, 380)]


def cases() -> list[Case]:
    out = []
    for params, heads, hidden, layers, tp, pp, gpus, batch, tflops in SC21_TABLE1:
        out.append(Case(SC21, f"GPT {params:g}B", gpt(layers, hidden, heads), "a100", gpus, batch,
                        Pins(tp=tp, pp=pp, dp=gpus // (tp * pp), cp=1, zero=0, recompute="full"),
                        "hardware_tflops_per_gpu", tflops, "fit"))
    for name, shape, tp, pp, batch, mb, (v_sel, v_full), full_s, sel_s in KORTHIKANTI_TABLE5:
        gpus = tp * pp
        base = dict(tp=tp, pp=pp, dp=1, cp=1, zero=0, microbatch=mb)
        out.append(Case(KORTHIKANTI, f"{name} full recompute", shape, "a100", gpus, batch,
                        Pins(**base, interleave=v_full, recompute="full"), "step_s", full_s, "held-out",
                        software=MEGATRON_2022))
        out.append(Case(KORTHIKANTI, f"{name} SP + selective", shape, "a100", gpus, batch,
                        Pins(**base, interleave=v_sel, recompute="selective"), "step_s", sel_s, "held-out",
                        software=replace(MEGATRON_2022, sequence_parallel=True)))
    mtnlg = Shape(105, 20480, 128, 128, 50272, 2048, 4 * 20480)
    for nodes, _, tflops in MTNLG_RUNS:
        gpus = 8 * nodes
        out.append(Case(MTNLG, f"530B on {gpus} GPUs", mtnlg, "a100", gpus, 1920,
                        Pins(tp=8, pp=35, dp=gpus // 280, cp=1, microbatch=1, interleave=1, recompute="full"),
                        "hardware_tflops_per_gpu", tflops, "held-out"))
    opt = Shape(96, 12288, 96, 96, 50272, 2048, 4 * 12288)
    out.append(Case(OPT, "175B on 992 GPUs", opt, "a100", 992, 1024, Pins(tp=8, pp=1, cp=1, zero=3, recompute="full"),
                    "hardware_tflops_per_gpu", 147, "held-out", software=replace(MEGATRON_2021, dp_overlap=True)))
    bloom = Shape(70, 14336, 112, 112, 250880, 2048, 4 * 14336)
    out.append(Case(BLOOM, "176B on 384 GPUs", bloom, "a100", 384, 2048,
                    Pins(tp=4, pp=12, dp=8, cp=1, zero=1, microbatch=2, recompute="full"), "hardware_tflops_per_gpu",
                    150, "held-out", software=replace(MEGATRON_2021, dropout=False), inter_node_gbps=50))
    for gpus, cp, seq, tflops in LLAMA3_RUNS:
        shape = llama(126, 16384, 128, 8, 53248, seq)
        out.append(Case(LLAMA3, f"405B on {gpus:,} GPUs" + (f", CP {cp}, {seq // 1024}K" if cp > 1 else ""), shape,
                        "h100", gpus, 2**24 // seq, Pins(tp=8, pp=16, cp=cp, dp=gpus // (128 * cp)),
                        "model_tflops_per_gpu", tflops, "fit" if gpus == 8192 else "held-out",
                        software=LLAMA3_STACK))
    l8, l70 = llama(32, 4096, 32, 8, 14336), llama(80, 8192, 64, 8, 28672)
    eager = replace(TORCHTITAN, fused_kernels=False, host="eager")
    for gpus, tps, compiled, role in ((8, 5762, False, "held-out"), (8, 6667, True, "fit"),
                                      (128, 5605, False, "held-out"), (128, 6514, True, "held-out")):
        out.append(Case(TITAN, f"Llama3 8B FSDP, {gpus} GPUs, " + ("compile" if compiled else "eager"), l8, "h100-gt",
                        gpus, 2 * gpus, Pins(tp=1, pp=1, cp=1, zero=3, microbatch=2, recompute="op"),
                        "tokens_per_s_per_gpu", tps, role, software=TORCHTITAN if compiled else eager))
    out.append(Case(TITAN, "Llama3 8B FSDP8 x TP8, 64 GPUs", l8, "h100-gt", 64, 96,
                    Pins(tp=8, pp=1, dp=8, cp=1, zero=3, microbatch=12, recompute="op"),
                    "tokens_per_s_per_gpu", 4378, "held-out", software=TORCHTITAN))
    out.append(Case(TITAN, "Llama3 70B FSDP32 x TP8, 256 GPUs", l70, "h100-gt", 256, 512,
                    Pins(tp=8, pp=1, dp=32, cp=1, zero=3, microbatch=16, recompute="full"),
                    "tokens_per_s_per_gpu", 597.3, "held-out", software=TORCHTITAN))
    return out + published_small.cases()


def workload(case: Case) -> Workload:
    return Workload(case.shape, case.batch, **case.software.__dict__)


def predict(case: Case, consts: ComputeConstants = FITTED) -> Plan | None:
    """The fastest configuration under the case's pins that fits (None if none does), with `consts`.

    What a paper leaves unstated (micro-batch, interleaving, ZeRO stage) its authors tuned for speed, so the
    comparison takes the fastest setting, not the one choose.py's rules would pick for a new plan.
    """
    cl = replace(make_cluster(get_preset(case.gpu), case.gpus, memory_gb=case.memory_gb,
                              inter_node_gbps=case.inter_node_gbps, gpus_per_node=case.gpus_per_node), compute=consts)
    return search(workload(case), cl, case.pins, top=1, max_rejected=0, rules=False).best


def throughput_error(case: Case, predicted: float) -> float:
    """Signed error of per-GPU throughput: rates as they are, an iteration time through its inverse."""
    if case.metric == "step_s":
        return case.published / predicted - 1
    return predicted / case.published - 1


@kept
def compare(consts: ComputeConstants = FITTED, role: str | None = None) -> list[dict]:
    """One row per case (of `role`, or all): published, predicted, signed throughput error, role."""
    rows = []
    for case in cases():
        if role is not None and case.role != role:
            continue
        best = predict(case, consts)
        rows.append({"source": case.source, "name": case.name, "gpus": case.gpus, "gpu": case.gpu,
                     "metric": case.metric, "published": case.published, "role": case.role,
                     "hidden": case.shape.hidden, "group": case.group,
                     "predicted": None if best is None else getattr(best, case.metric), "config": best,
                     "error": None if best is None else throughput_error(case, getattr(best, case.metric))})
    return rows


def summary(rows: list[dict]) -> dict:
    """Median and range of |error| per (GPU family, role), and overall."""
    out = {}
    groups = {"all": rows}
    for r in rows:
        groups.setdefault(("A100" if r["gpu"].startswith("a100") else "H100") + " " + r["role"], []).append(r)
        groups.setdefault("A100" if r["gpu"].startswith("a100") else "H100", []).append(r)
    for key, group in groups.items():
        errs = [r["error"] for r in group if r["error"] is not None]
        out[key] = {"n": len(errs), "median_abs": statistics.median(abs(e) for e in errs) if errs else None,
                    "min": min(errs) if errs else None, "max": max(errs) if errs else None}
    return out


if __name__ == "__main__":
    rows = compare()
    for r in rows:
        c = r["config"]
        plan = (f"Z{c.zero} b={c.microbatch} v={c.interleave} {c.recompute} stages={c.layers_per_stage} "
                f"mem={c.memory_gb.total}") if c else "no plan fits"
        print(f"{r['role']:8s} {r['source']:26s} {r['name']:36s} {r['published']:>9.3f} "
              f"{(r['predicted'] or float('nan')):>9.3f} {100 * (r['error'] or float('nan')):+6.1f}%  {plan}")
    for key, s in summary(rows).items():
        print(f"{key:16s} n={s['n']:2d} median |err| {s['median_abs']:.1%}  range {s['min']:+.1%} .. {s['max']:+.1%}")
