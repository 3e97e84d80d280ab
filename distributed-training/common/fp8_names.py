"""The FP8 backends by name: the one list that fp8-train's run-time registry and the planner's cost records share.

fp8-train runs each of these (fp8-train/precision/backends.py: one record per backend, one file per library) and the
planner prices those whose GEMMs run in FP8 on tensor cores (planner/model/fp8_cost.py: what each does around its
GEMMs). The names are what the CSVs' `precision_backend` column holds and what --fp8-backend takes. Both
registries are tested to cover exactly these names (fp8-train/tests/test_backends.py), so a backend added in
one and forgotten in the other fails there. The planner never imports a lab, so the names live here.
"""

from __future__ import annotations

from typing import NamedTuple


class Fp8Name(NamedTuple):
    name: str
    description: str  # one line: what runs
    fp8_gemms: bool  # its GEMMs run in FP8 on tensor cores (the planner prices it); False: fp32 GEMMs, any hardware


FP8_BACKENDS = (
    Fp8Name("te", "NVIDIA TransformerEngine: te.Linear in place of each mapped nn.Linear", True),
    Fp8Name("te-fused", "TransformerEngine's fused modules (LayerNormLinear with fused QKV, LayerNormMLP)", True),
    Fp8Name("torchao", "torchao.float8's convert_to_float8_training, tensorwise or rowwise dynamic scaling", True),
    Fp8Name("native", "the lab's Fp8Linear over torch._scaled_mm (fp8-train/precision/fp8_linear.py)", True),
    Fp8Name("emulated", "quantize-dequantize with fp32 GEMMs (Fp8Linear's emulator, mx.py's block formats)", False),
)
NAMES = tuple(b.name for b in FP8_BACKENDS)
PRICED = tuple(b.name for b in FP8_BACKENDS if b.fp8_gemms)  # the planner's cost records


def fp8_name(name: str) -> Fp8Name:
    for b in FP8_BACKENDS:
        if b.name == name:
            return b
    raise ValueError(f"unknown FP8 backend {name!r}; valid: {', '.join(NAMES)}")
