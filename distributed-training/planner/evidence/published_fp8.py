"""Published FP8 against BF16 pairs, fully specified, beside the planner's FP8 model (held out: nothing is fitted).

The FP8 model (fp8_cost.py, compute.py) is checked on this repository's own H100 rows (explain_rows.py) and on
the published pairs whose setup is stated completely enough to price (fp8-anchors.md sections 1.10 and 2):

- torchao's float8 training docs (docs/source/workflows/training.md): torchtitan, Llama 3 8B on 8 H100s, local
  batch 1, sequence 8192, torch.compile, FSDP2, per-op selective AC: 6,150 tokens/s/GPU in bf16, 7,689.5 with
  tensorwise scaling and FP8 all-gather (+25.0%). Their hosts are taken as torchtitan's Grand Teton H100s
  (`h100-gt`, published.py).
- TransformerEngine's getting-started benchmark (docs/getting_started): one transformer layer, hidden 4096,
  FFN 16384, 32 heads, sequence 2048, batch 8, forward + backward on an H100: 35.71 ms with TE's unfused
  modules (one te.Linear for q, k and v) and TE attention in bf16, 23.41 ms in FP8 (DelayedScaling), 22.96 ms
  with TE's fused modules in FP8.

The other published gains (PyTorch's FP8 + FSDP2 blog: 1.8B +18% to 405B +52%; NeMo, Databricks) do not state
the degrees, batch or GPU count they ran, so they are quoted in the guide's prose, not priced.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from common.hardware import get_preset
from planner.model.cluster import make_cluster
from planner.model.compute import Kernels, layer_times
from planner.model.costs import rates_for
from planner.model.shapes import Shape
from planner.search.search import Pins, Workload, search

from .published import TORCHTITAN, llama


class Pair(NamedTuple):
    source: str
    run: str
    bf16: float  # published, in `metric`
    fp8: float
    predicted_bf16: float
    predicted_fp8: float
    metric: str

    @property
    def published_gain(self) -> float:
        return self.fp8 / self.bf16 if self.metric == "tokens/s/GPU" else self.bf16 / self.fp8

    @property
    def predicted_gain(self) -> float:
        if self.metric == "tokens/s/GPU":
            return self.predicted_fp8 / self.predicted_bf16
        return self.predicted_bf16 / self.predicted_fp8

    @property
    def error(self) -> float:
        return self.predicted_gain / self.published_gain - 1


def torchao_8b() -> Pair:
    shape = llama(32, 4096, 32, 8, 14336)
    pins = Pins(tp=1, pp=1, cp=1, zero=3, microbatch=1, recompute="op")
    out = []
    for precision in ("bf16", "fp8"):
        sw = replace(TORCHTITAN, fp8_backend="torchao", fp8_recipe="tensorwise")
        w = Workload(shape, 8, precision, **sw.__dict__)
        out.append(search(w, make_cluster(get_preset("h100-gt"), 8, precision), pins, top=1, max_rejected=0,
                          rules=False).best.tokens_per_s_per_gpu)
    return Pair("torchao docs (torchtitan)", "Llama 3 8B, FSDP on 8 GPUs, tensorwise + FP8 all-gather", 6150.0, 7689.5,
                out[0], out[1], "tokens/s/GPU")


def te_layer(backend: str, fp8_ms: float) -> Pair:
    shape = Shape(1, 4096, 32, 32, 256, 2048, 16384)
    times = []
    for precision in ("bf16", "fp8"):
        k = Kernels(fused=True, fp8=precision == "fp8", fp8_backend=backend, fp8_recipe="delayed", qkv_fused=True)
        lt = layer_times(shape, 1, 1, 8, k, rates_for(make_cluster(get_preset("h100"), 1, precision), k))
        times.append(float(np.asarray(lt["fwd"] + lt["bwd"])) * 1e3)
    name = "TE fused modules" if backend == "te-fused" else "te.Linear"
    return Pair("TransformerEngine getting started", f"1 layer, hidden 4096, {name}", 35.71, fp8_ms, times[0],
                times[1], "ms")


def compare() -> list[Pair]:
    return [torchao_8b(), te_layer("te", 23.41), te_layer("te-fused", 22.96)]
