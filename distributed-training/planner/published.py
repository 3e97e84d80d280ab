"""The planner's predictions beside published measurements it can be compared with.

Each row pins the configuration the authors ran (degrees, batch, micro-batch, recompute) and lets the
planner fill in only what the paper does not state; the error is (predicted - published) / published.
The sources:

- Megatron SC21 (Narayanan et al., arXiv 2104.04473) Table 1: GPT 1.7B ... 1T on A100 80GB (Selene:
  8 GPUs per node, 8 x 200 Gb/s HDR per node), seq 2048, vocab 51,200, full activation recompute,
  achieved TFLOP/s per GPU counted with eq. 3 (recompute included: a hardware-FLOPs rate). The table is
  quoted from the paper (its aggregate column, TFLOP/s x GPUs, cross-checks every row); micro-batch and
  interleaving are not in the table, so the planner picks them.
- Korthikanti et al. (arXiv 2205.05198) Table 5 iteration times, full recompute vs sequence parallel +
  selective recompute, A100 80GB; the degrees, batch, micro-batch and interleaving are those of
  Calculon's validation inputs (calculon-ai/calculon validation/*.json), which reproduce that table.
  MFU/HFU of the selective runs are from the Megatron-LM README table (22B 41.5/43.7 % ... 1T 56.3/57.0 %).
  Fig. 1 memory (GiB) as transcribed in calculon/llm/validation.py checks the memory model.
- torchtitan (benchmarks/llama3_h100_202412_torchtitan.md, benchmarks/asyncTP_llama3_h100_2025-06):
  Llama 3 8B with FSDP on 8 and 128 GPUs, 70B with FSDP 32 x TP 8 on 256 GPUs, bf16, seq 8192.
  Their H100s are 500 W HBM2e 96 GB parts (below the 700 W SXM our h100 row describes) and their
  MFU uses the SXM peak: expect the planner to be optimistic there. SwiGLU ffn F is modelled as a
  two-matrix MLP of width 1.5·F (same parameters and FLOPs).

Megatron runs keep fp32 gradient buffers (Fig. 1's 45.6 GiB for 22B on 8 GPUs is 18 B per parameter):
the Megatron rows use --grad-bytes 4, dropout (Megatron's default 0.1) and no FlashAttention (2021-22
Megatron materialised the scores). torchtitan's selective AC saves fewer tensors than Korthikanti's
selective recompute (which FlashAttention already implies), so its 8B rows let the planner choose.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster import make_cluster
from common.hardware import get_preset
from search import Pins, Workload, search
from shapes import Shape



@dataclass(frozen=True)
class Case:
    source: str
    name: str
    shape: Shape
    gpu: str
    gpus: int
    batch: int
    pins: Pins
    metric: str  # "hardware_tflops_per_gpu" | "step_s" | "tokens_per_s_per_gpu" | "mfu" | "hfu"
    published: float
    megatron: bool = True  # fp32 grads, no FlashAttention
    sequence_parallel: bool = True
    memory_gb: float | None = None


def gpt(layers: int, hidden: int, heads: int, seq: int = 2048, vocab: int = 51200) -> Shape:
    return Shape(layers, hidden, heads, heads, vocab, seq, 4 * hidden)


def llama(layers: int, hidden: int, heads: int, kv: int, ffn: int) -> Shape:
    return Shape(layers, hidden, heads, kv, 128256, 8192, ffn * 3 // 2)  # SwiGLU F == GELU MLP of 1.5·F


SC21 = "Megatron SC21 Table 1"
# (params B, heads, hidden, layers, TP, PP, GPUs, batch, achieved TFLOP/s per GPU)
SC21_TABLE1 = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
               (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
               (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
               (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
               (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163)]
KORTHIKANTI = "Korthikanti Table 5"
# name, shape, TP, PP, batch, micro-batch, interleave (selective run / full run), seconds full / selective+SP
KORTHIKANTI_TABLE5 = [("22B", gpt(48, 6144, 64), 8, 1, 4, 4, (1, 1), 1.42, 1.10),
                      ("175B", gpt(96, 12288, 96), 8, 8, 64, 1, (3, 3), 18.13, 13.75),
                      ("530B", gpt(105, 20480, 128), 8, 35, 280, 1, (3, 3), 49.05, 37.83),
                      ("1T", gpt(128, 25600, 160), 8, 64, 512, 1, (1, 1), 94.42, 71.49)]
KORTHIKANTI_MFU = {"22B": (0.415, 0.437), "175B": (0.514, 0.528), "530B": (0.560, 0.570), "1T": (0.563, 0.570)}
# Fig. 1 (GiB per GPU): params+optimizer, activations without recompute (TP, no SP), with SP + selective
KORTHIKANTI_FIG1 = {"22B": (45.5625, 59.25, 9.5625), "175B": (45.5625, 66.84375, 12.3515625),
                    "530B": (31.640625, 114.0234375, 23.076171875), "1T": (32.958984375, 131.25, 26.5625)}
TITAN = "torchtitan H100 benchmarks"


def cases() -> list[Case]:
    out = []
    for params, heads, hidden, layers, tp, pp, gpus, batch, tflops in SC21_TABLE1:
        out.append(Case(SC21, f"GPT {params:g}B", gpt(layers, hidden, heads), "a100", gpus, batch,
                        Pins(tp=tp, pp=pp, dp=gpus // (tp * pp), cp=1, zero=0, recompute="full"),
                        "hardware_tflops_per_gpu", tflops, sequence_parallel=False))
    for name, shape, tp, pp, batch, mb, (v_sel, v_full), full_s, sel_s in KORTHIKANTI_TABLE5:
        gpus = tp * pp
        base = dict(tp=tp, pp=pp, dp=1, cp=1, zero=0, microbatch=mb)
        out.append(Case(KORTHIKANTI, f"{name} full recompute", shape, "a100", gpus, batch,
                        Pins(**base, interleave=v_full, recompute="full"), "step_s", full_s, sequence_parallel=False))
        out.append(Case(KORTHIKANTI, f"{name} SP + selective", shape, "a100", gpus, batch,
                        Pins(**base, interleave=v_sel, recompute="selective"), "step_s", sel_s))
        out.append(Case(KORTHIKANTI, f"{name} SP + selective", shape, "a100", gpus, batch,
                        Pins(**base, interleave=v_sel, recompute="selective"), "mfu", KORTHIKANTI_MFU[name][0]))
    l8, l70 = llama(32, 4096, 32, 8, 14336), llama(80, 8192, 64, 8, 28672)
    for gpus, tps in ((8, 5762), (128, 5605)):
        out.append(Case(TITAN, f"Llama3 8B FSDP, {gpus} GPUs", l8, "h100", gpus, 2 * gpus,
                        Pins(tp=1, pp=1, cp=1, zero=3, microbatch=2),
                        "tokens_per_s_per_gpu", tps, megatron=False, memory_gb=96))
    out.append(Case(TITAN, "Llama3 70B FSDP32 x TP8, 256 GPUs", l70, "h100", 256, 512,
                    Pins(tp=8, pp=1, dp=32, cp=1, zero=3, microbatch=16, recompute="full"),
                    "tokens_per_s_per_gpu", 597.3, megatron=False, memory_gb=96))
    return out


def predict(case: Case, matmul_scale: float = 1.0) -> dict | None:
    """The planner's best configuration under the case's pins (None if nothing fits).

    matmul_scale multiplies the GPU's achievable matmul rate (--matmul-tflops), for calibration.
    """
    w = Workload(case.shape, case.batch, grad_bytes=4.0 if case.megatron else 2.0,
                 sequence_parallel=case.sequence_parallel, flash_attention=not case.megatron, dropout=case.megatron)
    preset = get_preset(case.gpu)
    cl = make_cluster(preset, case.gpus, memory_gb=case.memory_gb,
                      matmul_tflops=matmul_scale * preset.achievable_matmul_tflops("bf16"))
    return search(w, cl, case.pins, top=1, max_rejected=0).best


def calibrate_matmul(case: Case) -> float:
    """The matmul-rate scale at which the planner reproduces one case's published step time (bisection)."""
    lo, hi = 0.3, 1.5
    for _ in range(30):  # step time falls as the rate rises
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predict(case, mid)["step_s"] > case.published else (lo, mid)
    return round((lo + hi) / 2, 3)


def compare(matmul_scale: float = 1.0) -> list[dict]:
    """One row per case: published, predicted, signed error."""
    rows = []
    for case in cases():
        best = predict(case, matmul_scale)
        pred = None if best is None else best[case.metric]
        rows.append({"source": case.source, "name": case.name, "gpus": case.gpus, "metric": case.metric,
                     "published": case.published, "predicted": pred, "config": best,
                     "error": None if pred is None else (pred - case.published) / case.published})
    return rows


if __name__ == "__main__":
    for r in compare():
        c = r["config"] or {}
        print(f"{r['source']:28s} {r['name']:36s} {r['metric']:24s} {r['published']:>9.3f} "
              f"{(r['predicted'] or float('nan')):>9.3f} {100 * (r['error'] or float('nan')):+6.1f}%  "
              f"b={c.get('microbatch')} v={c.get('interleave')} mem={c.get('memory_gb', {}).get('total')}")
