"""A proxy for GPU launches that any machine can measure: what one FP8 training step compiles to.

On a GPU, bench.py counts the kernels a step launches with the profiler. On a CPU the same question
has a measurable stand-in: the kernels Inductor generates for one compiled block's FP8 forward and
backward, and the operators the eager scale update dispatches. Counting both for this tree's
fp8_linear.py and for an earlier commit's shows what a change to the layer did to its launches
(the shared scaling state turned a per-layer update into one batched one).

    PYTHONPATH=distributed-training python distributed-training/fp8-train/bench.py --gpu cpu \
        --parts kernels --kernels-baseline 2fbc6b4      # -> results/cpu_ws1/bench_kernels.csv
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from common.dist import print0
from common.model import Block, GPTConfig
from common.results import REPO_ROOT, ResultsWriter
from precision.scaling import DelayedScaling

LAB = Path(__file__).resolve().parents[1]


def load_fp8_linear(commit: str):
    """fp8_linear.py as it was at `commit` (and its helper modules as they are now), as a module.

    Before the lab had rooms the file sat at the lab's top (LAB/fp8_linear.py) and imported formats and
    scaling by those bare names: an older file is looked up there, and those two are lent to it under them."""
    from precision import formats, fp8_linear, scaling
    for path in (Path(fp8_linear.__file__).resolve(), LAB / "fp8_linear.py"):
        rel = path.relative_to(REPO_ROOT)
        src = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=REPO_ROOT, capture_output=True, text=True)
        if not src.returncode:
            break
    else:
        raise ValueError(f"--kernels-baseline {commit}: git cannot show {rel} there ({src.stderr.strip()[:120]})")
    path = Path(tempfile.mkdtemp()) / f"fp8_linear_{commit}.py"
    path.write_text(src.stdout)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod  # dataclasses look their module up while the class is created
    lent = {name: m for name, m in (("formats", formats), ("scaling", scaling)) if name not in sys.modules}
    sys.modules.update(lent)
    try:
        spec.loader.exec_module(mod)
    finally:
        for name in lent:
            del sys.modules[name]
    return mod


def count_kernels(fp8mod, d: int = 128, tokens: int = 256) -> tuple[int, int]:
    """(Inductor kernels for one compiled block's FP8 forward+backward, ops dispatched by the scale update)."""
    from torch._inductor import metrics
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    torch._dynamo.reset()
    torch.manual_seed(0)
    block = Block(GPTConfig(d_model=d, n_heads=max(1, d // 64)))
    for parent in (block.attn, block.mlp):
        for name, child in list(parent.named_children()):
            setattr(parent, name, fp8mod.Fp8Linear(child, "native", DelayedScaling()))
    if hasattr(fp8mod, "share_scaling_state"):
        fp8mod.share_scaling_state(block)
    mods = [m for _, m in fp8mod.fp8_modules(block)]
    block.compile()
    metrics.reset()
    block(torch.randn(2, tokens // 2, d)).sum().backward()
    kernels = metrics.generated_kernel_count
    with Count():
        fp8mod.update_scales(mods)
    torch._dynamo.reset()
    return kernels, Count.n


def kernel_counts(baseline, baseline_label: str, writer: ResultsWriter) -> None:
    from precision import fp8_linear
    versions = [("this tree", fp8_linear)]
    if baseline is not None:
        versions.insert(0, (baseline_label, baseline))
    for label, mod in versions:
        kernels, ops = count_kernels(mod)
        writer.write(dict(fp8_linear_version=label, fp8_linears=6, inductor_kernels=kernels, update_ops=ops))
        print0(f"fp8_linear.py ({label}): {kernels} Inductor kernels for one block's forward+backward, "
               f"{ops} operators in the scale update of its 6 FP8 linears")
