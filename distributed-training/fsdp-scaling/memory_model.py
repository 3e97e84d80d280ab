"""The analytic model the measurements are checked against: memory per rank and bytes per step.

Memory: the ZeRO stage formula (Rajbhandari et al., ZeRO, SC20, section 5 and Figure 1), written once in
common/zero_memory.py and shared with the planner, with bytes per element by category (`Precision`):
mixed-precision Adam's 2 + 2 + K (K = 12) bytes for the paper's accounting; FSDP2's own layout, whose
sharded fp32 parameter *is* the master copy (param 4 + grad 4 + AdamW 8 = 16 B, all divided by the
shard group). Per strategy, what a rank holds *between steps*: DDP stage 0, ZeRO-1 stage 1, and zero2,
zero3 and HSDP stage 3 over their shard group; zero2 (FSDP2 with reshard_after_forward=False) frees
its gathered parameters after backward, so between steps it is not the paper's ZeRO-2 (replicated
parameters, `paper_model_states`). FSDP adds what is gathered at once (Zhao et al., PyTorch FSDP,
VLDB 2023, section 3.2.1: peak parameter memory ~ sum(psi_i)/F + max(psi_i)): with
reshard_after_forward=True the root unit plus the largest block (the root is never resharded, see
common/fsdp.py); with False, every unit.

Communication (ZeRO section 7, in elements per rank; x bytes per element for bytes): DP all-reduce
2 Psi; ZeRO-2 reduce-scatter + all-gather 2 Psi; ZeRO-3 all-gathers twice (forward and backward)
+ reduce-scatter = 3 Psi, 1.5x DP. `comm_plan` lists the collectives one optimizer step issues; bus
bytes use nccl-tests' factors (common/collective_cost.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from common.collective_cost import busbw_factor
from common.model import GPTConfig
from common.zero_memory import FSDP2_BETWEEN_STEPS, STAGES, StateBytes, model_state_bytes
from common.zero_memory import GB, zero_paper_table  # noqa: F401  (re-exported for project.py and the report)


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter element, by what holds them."""
    param: int  # stored (sharded or replicated) parameter
    grad: int  # stored gradient, and the reduce-scatter / all-reduce dtype
    opt: int  # optimizer state
    compute: int  # the gathered (unsharded) parameter: compute and all-gather dtype

    @property
    def state(self) -> StateBytes:
        return StateBytes(self.param, self.grad, self.opt)


def precision_for(optimizer: str, compute_bytes: int = 4) -> Precision:
    """fp32 stored params and grads (FSDP2 and DDP both keep them fp32); AdamW holds 2 fp32 moments,
    plain SGD nothing."""
    return Precision(param=4, grad=4, opt=8 if optimizer == "adamw" else 0, compute=compute_bytes)


def unit_shapes(cfg: GPTConfig) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Parameter shapes of the FSDP units: (root, one block). The root holds what fully_shard(model)
    claims after the blocks: embeddings, final norm, LM head (common/fsdp.py)."""
    d, f, hd, b = cfg.d_model, cfg.ffn, cfg.head_dim, cfg.bias
    norm = [(d,), (d,)] if b else [(d,)]

    def lin(i: int, o: int) -> list[tuple[int, ...]]:
        return [(o, i), (o,)] if b else [(o, i)]

    root = [(cfg.vocab_size, d), (cfg.seq_len, d), *norm, (cfg.vocab_size, d)]
    block = [*norm, *lin(d, cfg.n_heads * hd), *lin(d, cfg.kv_heads * hd), *lin(d, cfg.kv_heads * hd),
             *lin(cfg.n_heads * hd, d), *norm, *lin(d, f), *lin(f, d)]
    return root, block


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def shard_numel(shapes: list[tuple[int, ...]], n: int) -> int:
    """Elements one rank stores under FSDP2's Shard(0): dim 0 split into n chunks of ceil(dim0/n)
    rows, padded so every rank's shard has the same size (FSDPParam's padded sharded data)."""
    return sum(math.ceil(s[0] / n) * numel(s[1:]) for s in shapes)


def all_shapes(cfg: GPTConfig) -> list[tuple[int, ...]]:
    root, block = unit_shapes(cfg)
    return root + block * cfg.n_layers


def zero1_worst_rank_numel(shapes: list[tuple[int, ...]], n: int) -> int:
    """ZeroRedundancyOptimizer's partition (torch docs: sorted-greedy over whole parameters): the
    largest rank's element count. It cannot go below the largest tensor, whatever n is."""
    sizes = [0] * n
    for s in sorted((numel(s) for s in shapes), reverse=True):
        sizes[sizes.index(min(sizes))] += s
    return max(sizes)


def model_states(strategy: str, cfg: GPTConfig, world: int, prec: Precision, shard: int | None = None,
                 padded: bool = False) -> dict[str, float]:
    """Bytes per rank of params, grads and optimizer state between steps (the ZeRO stage formula).

    `shard` is the shard-group size (HSDP; the world for zero2/zero3). padded=True counts FSDP2's
    padding and ZeroRedundancyOptimizer's whole-tensor partition (exact); False is the paper's Psi / N.
    zero2 holds sharded params *between* steps: FSDP2 frees the gathered copy after backward; its peak
    is in `unsharded_peak`."""
    shapes = all_shapes(cfg)
    psi = sum(numel(s) for s in shapes)
    stage = FSDP2_BETWEEN_STEPS[strategy]
    n = world if stage < 3 else (shard or world)
    held = None
    if padded and stage == 1:
        held = zero1_worst_rank_numel(shapes, n)
    elif padded and stage == 3:
        held = shard_numel(shapes, n)
    w, g, o = (float(x) for x in model_state_bytes(psi, n, stage, prec.state, sharded=held))
    return {"param": w, "grad": g, "opt": o}


def paper_model_states(strategy: str, cfg: GPTConfig, world: int, prec: Precision) -> float:
    """Bytes per rank the ZeRO paper's stage of this strategy's name holds (zero2: replicated parameters)."""
    psi = sum(numel(s) for s in all_shapes(cfg))
    return float(model_state_bytes(psi, world, STAGES.get(strategy, 3), prec.state).total)


def unsharded_peak(strategy: str, cfg: GPTConfig, prec: Precision, shard: int | None = None) -> float:
    """Bytes of gathered parameters alive at the peak (FSDP's max-unit term); 0 for DDP/ZeRO-1.
    With `shard`, the all-gather buffers' padding is counted (shard x the padded shard)."""
    root, block = unit_shapes(cfg)
    size = (lambda s: shard * shard_numel(s, shard)) if shard else (lambda s: sum(map(numel, s)))  # noqa: E731
    r, b = size(root), size(block)
    if strategy == "zero2":
        return prec.compute * (r + cfg.n_layers * b)
    if strategy in ("zero3", "hsdp"):
        return prec.compute * (r + b)
    return 0.0


def comm_plan(strategy: str, cfg: GPTConfig, world: int, prec: Precision, accum: int = 1,
              mesh: tuple[int, int] | None = None, n_buckets: int = 1) -> list[dict]:
    """The collectives of one optimizer step: kind, count, payload bytes (nccl-tests' S), group size.

    FSDP2: per unit (root + n_layers blocks) one all-gather per micro-step before forward, a second
    one before backward for resharded blocks, and on the last micro-step one reduce-scatter
    (+ one all-reduce across replicas for HSDP). A group of one rank issues nothing."""
    root, block = unit_shapes(cfg)
    psi = sum(map(numel, all_shapes(cfg)))
    L = cfg.n_layers
    out: list[dict] = []

    def add(kind: str, count: int, payload: float, n: int) -> None:
        if n > 1 and count > 0:
            out.append({"collective": kind, "count": count, "payload_bytes": payload, "group_size": n})

    if strategy in ("ddp", "zero1"):
        add("all_reduce", n_buckets, prec.grad * psi, world)  # DDP: the gradient buckets, once per step
        if strategy == "zero1":  # each updated parameter broadcast from its owner
            add("broadcast", len(all_shapes(cfg)), prec.param * psi, world)
        return out
    replicate, shard = mesh if strategy == "hsdp" and mesh else (1, world)
    r_pad, b_pad = shard * shard_numel(root, shard), shard * shard_numel(block, shard)  # gathered = padded
    gathers_per_block = 2 if strategy in ("zero3", "hsdp") else 1
    add("all_gather", accum * (1 + gathers_per_block * L),
        accum * prec.compute * (r_pad + gathers_per_block * L * b_pad), shard)
    add("reduce_scatter", 1 + L, prec.grad * (r_pad + L * b_pad), shard)
    add("all_reduce", 1 + L, prec.grad * (r_pad + L * b_pad) / shard, replicate)
    return out


def bus_bytes(plan: list[dict]) -> float:
    """Sum of payload x bus factor over a plan."""
    return sum(c["payload_bytes"] * busbw_factor(c["collective"], c["group_size"]) for c in plan)
