"""Context parallelism (CP) for the common GPT: each sequence split over the cp ranks of a replica, attention as
the hand-rolled ring (common/ring_attention.py, the cp-attention lab's), everything else unchanged.

What changes with cp > 1 (Megatron-Core's context parallelism; torchtitan's; picotron's 4D):
    the batch      every CP rank of a replica gets the same rows (data.py splits rows over dp only) and keeps
                   the tokens of balanced_positions(s, cp, rank): chunks r and 2cp-1-r of 2cp, the load-
                   balanced split of Llama 3 and Megatron, for inputs and targets alike (engine.py)
    positions      the first stage looks its position embeddings up at those positions, not 0..s/cp-1
                   (StageModule.positions; a RoPE model would shard its tables the same way)
    attention      each block's Attention is swapped for RingAttention (below), which keeps the projections
                   (the same modules, so the parameter names stay layers.{i}.attn.wq, ...) and runs the ring
                   over the CP group between them; with TP its heads are this rank's heads, so the ring
                   carries n_kv/t K/V heads between ranks of the same TP rank
    the rest       per token (linears, norms, MLP, LM head, loss): nothing to change; the loss is each
                   rank's mean over its s/cp tokens, and FSDP2 over dp x cp averages the gradients, which
                   is the gradient of the mean over the whole batch (equal tokens per rank)

Why not PyTorch's context_parallel: on CPU it refuses (its dispatcher has no rule for the CPU SDPA kernel;
cp-attention/torch_cp.py), and this lab's CPU runs are where parity is checked. The ring here is the one
the cp-attention lab verifies and benchmarks against PyTorch's.

Recompute: full recompute runs the block's forward again in backward, the ring included (its N-1 K/V
hops again, as the planner prices it). Selective recompute is refused with CP (settings.check): its
policy keeps the outputs of c10d ops instead of running them again, the ring's receives among them, and
with torch 2.13 on gloo the recomputation then hangs until the collective timeout (tried: a CP2 step).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from common.model import Attention
from common.cp_layout import balanced_positions
from common.ring_attention import ring_attention


class RingAttention(nn.Module):
    """The GPT's Attention with its core as ring attention over `group`; its projections are the original modules."""

    def __init__(self, attn: Attention, group: dist.ProcessGroup):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = attn.wq, attn.wk, attn.wv, attn.wo
        self.head_dim, self.group = attn.head_dim, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape  # T = s/cp: this rank's tokens
        q, k, v = (w(x).view(B, T, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = ring_attention(q, k, v, self.group, kernel="fused", check_ranks=False)  # (B, H[/t], T, hd)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


def apply_cp(stage: nn.Module, group: dist.ProcessGroup) -> None:
    """Swap every block's attention core for the ring over `group`, in place (before TP: the plan's names hold)."""
    for block in stage.layers.values():
        block.attn = RingAttention(block.attn, group)


def positions(seq_len: int, cp: int, cp_rank: int, device) -> torch.Tensor:
    """(1, s/cp): the positions of this rank's tokens."""
    return balanced_positions(seq_len, cp, cp_rank, device=device).unsqueeze(0)


def shard_tokens(t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """(rows, s) token ids or targets -> (rows, s/cp): this rank's tokens at `pos` (1, s/cp)."""
    return t.index_select(1, pos[0])
