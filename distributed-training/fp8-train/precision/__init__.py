"""Precision: how one GPT computes in fp32, bf16, fp16, FP8 and the block formats, through which backend.

The arithmetic and the backend records, with no loop around them: nothing here imports training, health,
benchmarks or reporting (common/tests/test_layering.py holds it so). The report reads names from the records
(modes, backends, formats), never the layers that run.

    records     modes.py          the precisions, the backends' names, RunSpec (a run's name), PrecisionSettings
                backend.py        one FP8 backend as a record: can it run here, how it converts a model, its state
                backends.py       the registry of backend records, `auto`, resolve
    formats     formats.py        E4M3/E5M2, per-tensor quantization
                scaling.py        delayed scaling, TransformerEngine's rule reimplemented
                mx.py             MXFP8, MXFP4, NVFP4 block formats, emulated
    layers      fp8_linear.py     the lab's own FP8 linear (native over torch._scaled_mm, or emulated)
                te_adapter.py     TransformerEngine: the te.Linear swap, the fused modules, TE's FP8 state
                backend_te.py, backend_torchao.py, backend_native.py, backend_emulated.py   the records, one per file
    a run       prepare.py        the precision map and one GPT made ready for a run in its precision
                amax_probe.py     amax hooks where a backend keeps no scale state the lab can read
                fp8_state.py      every FP8 tensor's amax and scale after a step, whichever backend ran it
"""
