"""What one FP8 training step compiles to, for whichever fp8_linear.py a tree holds: runs here and in an older tree.

The kernels Inductor generates for one compiled block's FP8 forward and backward, and the operators the eager scale
update dispatches (a proxy for GPU launches that any machine measures). kernels.py counts this tree's layer in
process, and an older commit's by copying this file into that commit's tree (common/at_commit.py) and running it
there, so the older layer runs with its own formats, scaling and common, never this tree's:

    python -m kernel_count fp8_linear              # 2fbc6b4: the layer at the lab's top (fp8-train/fp8_linear.py)
    python -m kernel_count precision.fp8_linear    # since the lab has rooms (fp8-train/precision/fp8_linear.py)
                                                   # -> {"inductor_kernels": K, "update_ops": N} on stdout

The layer and its scaling module are imported by name (importlib), so that no import of this file names a module
that one of the two trees lacks: the block is common.model's, whose arithmetic is the same in both.
"""

from __future__ import annotations

import importlib
import json
import sys
from types import ModuleType

import torch

from common.model import Block, GPTConfig

LAYERS = ("fp8_linear", "precision.fp8_linear")  # where a tree holds the layer: before the lab had rooms, since


def layer(name: str) -> tuple[ModuleType, type]:
    """The fp8_linear module `name` names (one of LAYERS) and the DelayedScaling recipe beside it."""
    if name not in LAYERS:
        raise ValueError(f"the FP8 layer is one of {', '.join(LAYERS)}, got {name!r}")
    package = name.rpartition(".")[0]
    scaling = importlib.import_module(f"{package}.scaling" if package else "scaling")
    return importlib.import_module(name), scaling.DelayedScaling


def count_kernels(fp8mod: ModuleType, recipe: type, d: int = 128, tokens: int = 256) -> tuple[int, int]:
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
            setattr(parent, name, fp8mod.Fp8Linear(child, "native", recipe()))
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


def main(argv: list[str]) -> int:
    kernels, ops = count_kernels(*layer(argv[0] if argv else LAYERS[-1]))
    print(json.dumps({"inductor_kernels": kernels, "update_ops": ops}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
