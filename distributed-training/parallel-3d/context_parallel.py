"""Context parallelism (CP) for the common GPT: each sequence split over the cp ranks of a replica, attention as one
of the three hand-rolled designs (common/cp_attention.py, the cp-attention lab's: the ring, the all-gather, Ulysses;
--cp-kind), everything else unchanged.

What changes with cp > 1 (Megatron-Core's context parallelism; torchtitan's; picotron's 4D):
    the batch      every CP rank of a replica gets the same rows (data.py splits rows over dp only) and keeps
                   the tokens of balanced_positions(s, cp, rank): chunks r and 2cp-1-r of 2cp, the load-
                   balanced split of Llama 3 and Megatron, for inputs and targets alike (engine.py)
    positions      the first stage looks its position embeddings up at those positions, not 0..s/cp-1
                   (StageModule.positions; a RoPE model would shard its tables the same way)
    attention      each block's Attention is swapped for CPAttention (below), which keeps the projections
                   (the same modules, so the parameter names stay layers.{i}.attn.wq, ...) and runs the design
                   over the CP group between them; with TP its heads are this rank's heads, so the ring and the
                   all-gather carry n_kv/t K/V heads between ranks of the same TP rank, and Ulysses needs n/t and
                   n_kv/t divisible by cp (settings.check)
    its group      a process group of its own over the same ranks as the mesh's cp dimension (attention_group):
                   at dp = 1 FSDP2's dp x cp group is the cp group, and the all-gather design issues FSDP2's kinds
                   of collective; comms.py tells CP's from FSDP2's by the group's name
    the rest       per token (linears, norms, MLP, LM head, loss): nothing to change; the loss is each
                   rank's mean over its s/cp tokens, and FSDP2 over dp x cp averages the gradients, which
                   is the gradient of the mean over the whole batch (equal tokens per rank)

Why not PyTorch's context_parallel: on CPU it refuses (its dispatcher has no rule for the CPU SDPA kernel;
cp-attention/torch_cp.py), and this lab's CPU runs are where parity is checked. The ring here is the one
the cp-attention lab verifies and benchmarks against PyTorch's. The shapes come from one config on every rank, so
the attentions' agreement all-reduce is skipped (check_ranks=False); their local checks still run.

Recompute: full recompute runs the block's forward again in backward, its CP communication included (the ring's
N-1 K/V hops, the all-gather's gather, Ulysses' two all-to-alls: as the planner prices it). Selective recompute is refused with CP (settings.check): its
policy keeps the outputs of c10d ops instead of running them again, the ring's receives among them, and
with torch 2.13 on gloo the recomputation then hangs until the collective timeout (tried: a CP2 step).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from torch.distributed.device_mesh import DeviceMesh

from common.cp_attention import cp_attention
from common.cp_layout import balanced_positions
from common.model import Attention

_GROUPS: dict[int, dist.ProcessGroup] = {}  # id(mesh) -> this rank's CP attention group


class CPAttention(nn.Module):
    """The GPT's Attention with its core as context-parallel attention (`kind`) over `group`; its projections are the
    original modules."""

    def __init__(self, attn: Attention, group: dist.ProcessGroup, kind: str = "ring"):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = attn.wq, attn.wk, attn.wv, attn.wo
        self.head_dim, self.group, self.kind = attn.head_dim, group, kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape  # T = s/cp: this rank's tokens
        q, k, v = (w(x).view(B, T, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = cp_attention(self.kind, q, k, v, self.group, kernel="fused", check_ranks=False)  # (B, H[/t], T, hd)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


def attention_group(mesh: DeviceMesh) -> dist.ProcessGroup:
    """This rank's CP attention group: the ranks of its mesh cp dimension, as a process group of its own (every rank
    creates all of them, once per mesh, collectively)."""
    if id(mesh) not in _GROUPS:
        grid = mesh.mesh.movedim(mesh.mesh_dim_names.index("cp"), -1)
        _GROUPS[id(mesh)], _ = dist.new_subgroups_by_enumeration(grid.reshape(-1, grid.shape[-1]).tolist())
    return _GROUPS[id(mesh)]


def registered_group(mesh: DeviceMesh) -> dist.ProcessGroup | None:
    """The CP attention group made for `mesh`, if any (comms.mesh_groups names its collectives "cp")."""
    return _GROUPS.get(id(mesh))


def apply_cp(stage: nn.Module, group: dist.ProcessGroup, kind: str = "ring") -> None:
    """Swap every block's attention core for design `kind` over `group`, in place (before TP: the plan's names hold)."""
    for block in stage.layers.values():
        block.attn = CPAttention(block.attn, group, kind)


def positions(seq_len: int, cp: int, cp_rank: int, device) -> torch.Tensor:
    """(1, s/cp): the positions of this rank's tokens."""
    return balanced_positions(seq_len, cp, cp_rank, device=device).unsqueeze(0)


def shard_tokens(t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """(rows, s) token ids or targets -> (rows, s/cp): this rank's tokens at `pos` (1, s/cp)."""
    return t.index_select(1, pos[0])
