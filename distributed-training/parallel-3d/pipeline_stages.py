"""Pipeline stages cut out of the common GPT: which layers go where, and the module each stage runs.

The GPT (common/model.py) is one sequence: embeddings, n_layers blocks, final norm, LM head. A pipeline
of S = pp x v stages (v virtual stages per rank with interleaving) gives each stage a contiguous run of
blocks; the first also holds the embeddings, the last the final norm and the LM head. Stage s lives on
pipeline rank s mod pp (the looped placement of Megatron's interleaved schedule and of
torch.distributed.pipelining's ScheduleInterleaved1F1B), so a rank holds stages r, r + pp, r + 2pp, ...

Uneven stages. When S does not divide n_layers, the extra layers go to the middle stages first: the
first and last stages already carry the embedding and the LM head (Llama 3 405B on 16 stages: 126
layers, one fewer on the first and last); then to the first stage (a table lookup costs less than
the LM head's matmul and loss). --stage-layers gives any split by hand.

The stage module keeps the GPT's own parameter names (layers.{i}.attn.wq.weight, ...), so a stage's
gradients compare name by name with the one-process model's.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn

from common.model import GPT, GPTConfig


def split_layers(n_layers: int, n_stages: int, explicit: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Layers per stage, in stage order; ValueError when the split is impossible or inconsistent."""
    if explicit:
        if len(explicit) != n_stages or sum(explicit) != n_layers or min(explicit) < 1:
            raise ValueError(f"--stage-layers {','.join(map(str, explicit))} must list {n_stages} positive counts "
                             f"(pp x interleave) that add up to the {n_layers} layers")
        return tuple(explicit)
    if n_stages > n_layers:
        raise ValueError(f"{n_stages} pipeline stages (pp x interleave) need at least as many layers, "
                         f"the model has {n_layers}")
    base, extra = divmod(n_layers, n_stages)
    edges = {0, n_stages - 1}
    # Middle stages first (from the centre outwards), the edge stages last.
    order = sorted(range(n_stages), key=lambda s: (s in edges, abs(2 * s - (n_stages - 1)), s))
    counts = [base] * n_stages
    for s in order[:extra]:
        counts[s] += 1
    return tuple(counts)


class StageSpec(NamedTuple):
    index: int  # stage index in the pipeline, 0 .. n_stages-1
    n_stages: int
    layers: tuple[int, ...]  # global block indices

    @property
    def is_first(self) -> bool:
        return self.index == 0

    @property
    def is_last(self) -> bool:
        return self.index == self.n_stages - 1


def stage_specs(n_layers: int, pp: int, v: int, pp_rank: int, explicit: tuple[int, ...] = ()) -> list[StageSpec]:
    """The stages pipeline rank `pp_rank` holds, in schedule order (r, r + pp, ...)."""
    counts = split_layers(n_layers, pp * v, explicit)
    starts = [sum(counts[:s]) for s in range(pp * v)]
    return [StageSpec(s, pp * v, tuple(range(starts[s], starts[s] + counts[s]))) for s in range(pp_rank, pp * v, pp)]


class StageModule(nn.Module):
    """One pipeline stage of the GPT: [embeddings] -> blocks -> [final norm -> LM head].

    Takes token ids (B, T) on the first stage, the hidden states (B, T/tp, d) otherwise (sequence-parallel
    shards once TP is applied); returns the hidden states, or the logits (B, T, V) on the last stage.
    """

    def __init__(self, gpt: GPT, spec: StageSpec):
        super().__init__()
        self.spec = spec
        self.tok_emb = gpt.tok_emb if spec.is_first else None
        self.pos_emb = gpt.pos_emb if spec.is_first else None
        # A ModuleDict keyed by the global index keeps the GPT's names: layers.{i}.attn.wq.weight
        self.layers = nn.ModuleDict({str(i): gpt.layers[i] for i in spec.layers})
        self.norm = gpt.norm if spec.is_last else None
        self.lm_head = gpt.lm_head if spec.is_last else None
        self.positions: torch.Tensor | None = None  # (1, T/cp): the tokens' positions with CP (context_parallel.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_emb is not None:
            # (1, T) positions: under TP the position table is vocab-parallel like the token table and both
            # outputs arrive as this rank's sequence shard (parallelize.py).
            pos = self.positions if self.positions is not None else torch.arange(x.shape[1], device=x.device)[None]
            x = self.tok_emb(x) + self.pos_emb(pos)  # (B, T[/tp], d)
        for block in self.layers.values():
            x = block(x)
        if self.lm_head is not None:
            x = self.lm_head(self.norm(x))  # (B, T, V)
        return x


def build_stages(gpt: GPT, specs: list[StageSpec]) -> list[StageModule]:
    """Stage modules sharing the GPT's submodules (no copies); the GPT itself is not used afterwards."""
    return [StageModule(gpt, s) for s in specs]


def boundary_shapes(cfg: GPTConfig, spec: StageSpec, microbatch: int, tp: int, cp: int = 1) -> tuple[tuple, tuple]:
    """(input shape, output shape) of a stage for one micro-batch: what pipelining sends between stages.
    With context parallelism a rank holds T/cp tokens; with sequence parallelism the hidden states between
    stages are this rank's T/(cp tp) rows."""
    tokens = cfg.seq_len // cp
    hidden = (microbatch, tokens // tp, cfg.d_model)
    inp = (microbatch, tokens) if spec.is_first else hidden
    out = (microbatch, tokens, cfg.vocab_size) if spec.is_last else hidden
    return inp, out
