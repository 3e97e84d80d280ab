"""The one-process GPT's initial weights, written shard by shard into a model built on the meta device.

One process builds GPT(cfg) after torch.manual_seed(seed) and draws its weights from the CPU generator in
two passes (common/model.py):
    1. construction: every nn.Linear and nn.Embedding initialises itself as it is built (kaiming-uniform,
       normal), in the order the modules are created;
    2. GPT.reset_parameters: every parameter again, by name (LayerNorm gains 1, wo/w2 N(0, 0.02/sqrt(2L)),
       the rest N(0, 0.02)).
Pass 2 overwrites pass 1's values, but pass 1's draws move the generator, so pass 2's values depend on them.

A model above engine.FULL_INIT_LIMIT_BYTES is built on the meta device (nothing drawn) and sharded before
it holds any memory. Drawing its shards from the device's generator would give other weights than the
one-process model's (another generator, another order), so a 3D run would not start where the reference
starts. Instead both passes are replayed here on the CPU generator with the same seed, one parameter at a
time (a full CPU tensor of one parameter, never the whole model): pass 1 by calling each module's own
reset_parameters (what its constructor calls) on a throwaway CPU copy, pass 2 by running
GPT.reset_parameters itself over those tensors. Each parameter this rank holds receives its shard: a
DTensor (TP, FSDP2 or both) gets the slice its placements give, by DTensor's redistribute from Replicate
(a local slice, no communication); a plain tensor the whole.

Cost: every rank draws every parameter up to the last one it holds, twice: about 10 ns per element on one
core (this machine: 90-110 M normal and 185 M uniform draws per second), so seconds up to 1B parameters,
a few minutes per rank at 8B, and it grows linearly beyond (the fake-tensor study, at_scale.py, draws
nothing). tests/test_parity.py forces this path on a tiny model and checks every weight against GPT(cfg).
"""

from __future__ import annotations

import copy
from typing import Callable, Iterator

import torch
from torch.distributed.tensor import DTensor, Replicate

from common.model import GPT, GPTConfig


def _construction_draws(meta_gpt: GPT) -> None:
    """Pass 1: move the CPU generator as building GPT(cfg) does, module by module in creation order."""
    for module in meta_gpt.modules():  # registration order = creation order in common/model.py
        if module is meta_gpt or not list(module.parameters(recurse=False)):
            continue
        reset = getattr(module, "reset_parameters", None)
        if reset is not None:  # nn.Linear, nn.Embedding, nn.LayerNorm: what their __init__ calls
            copy.deepcopy(module).to_empty(device="cpu").reset_parameters()


class _OneAtATime:
    """Stands in for the GPT in GPT.reset_parameters: its parameters are full CPU tensors made one at a time;
    after the init has written one, `sink` receives it. Stops after `last` (nothing after it is needed)."""

    def __init__(self, meta_gpt: GPT, sink: Callable[[str, torch.Tensor], None], last: str):
        self.cfg, self._meta, self._sink, self._last = meta_gpt.cfg, meta_gpt, sink, last

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, p in self._meta.named_parameters():
            full = torch.empty(p.shape, dtype=p.dtype)
            yield name, full  # GPT.reset_parameters initialises it, then asks for the next one
            self._sink(name, full)
            if name == self._last:
                return


@torch.no_grad()
def copy_shard(dst: torch.Tensor, full: torch.Tensor) -> None:
    """Write this rank's part of `full` (the whole parameter) into `dst` (a plain tensor or a DTensor)."""
    full = full.to(device=dst.device, dtype=dst.dtype)
    if isinstance(dst, DTensor):
        mesh = dst.device_mesh
        src = DTensor.from_local(full, mesh, [Replicate()] * mesh.ndim, run_check=False)
        dst.to_local().copy_(src.redistribute(mesh, dst.placements).to_local())
    else:
        dst.copy_(full)


def init_like_one_process(gcfg: GPTConfig, seed: int, params: dict[str, torch.Tensor]) -> None:
    """Give `params` (the one-process GPT's names -> this rank's materialised parameters) the values GPT(gcfg)
    has after torch.manual_seed(seed) on the CPU."""
    with torch.device("meta"):
        meta_gpt = GPT(gcfg)
    order = [name for name, _ in meta_gpt.named_parameters()]
    unknown = set(params) - set(order)
    if unknown:
        raise ValueError(f"parameters {sorted(unknown)[:3]} are not the GPT's")
    last = max(params, key=order.index)

    def sink(name: str, full: torch.Tensor) -> None:
        if name in params:
            copy_shard(params[name], full)

    torch.manual_seed(seed)
    _construction_draws(meta_gpt)
    GPT.reset_parameters(_OneAtATime(meta_gpt, sink, last))
