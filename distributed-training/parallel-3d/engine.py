"""One rank's share of a 3D-parallel GPT and its training step, built from PyTorch's own parts.

    engine = Engine(gcfg, layout, variant, mesh, device)   # this rank's stages, parallelised
    losses = engine.forward_backward(batch)                # m micro-batches: one pipeline schedule
    engine.optimizer_step()
    engine.step(batch) -> mean loss of the step (every rank gets it)

Construction, per rank: the full GPT is built from the seed (or on the meta device when it is too big
for one rank's memory, then materialised shard by shard with the same values: init_weights.py), cut into
this pipeline rank's stages (pipeline_stages.py), and each stage gets TP, recompute and FSDP2
(parallelize.py). With pp > 1 each stage becomes a torch.distributed.pipelining PipelineStage with
static input/output shapes (no shape-inference pass), driven by Schedule1F1B (one stage per rank) or
ScheduleInterleaved1F1B (v > 1). With fewer micro-batches than stages (m < pp), which Schedule1F1B refuses,
ScheduleGPipe runs them: every forward, then every backward, the same (p-1)/(m+p-1) bubble as 1F1B has there.
With pp = 1 there is no pipeline: the micro-batches run one after the other (gradient accumulation), as
torchtitan does without PP.

Gradients: every micro-batch's loss is the mean over its tokens, the gradients are divided by m (the
schedule's scale_grads; the loss / m without PP) and FSDP2 averages them over dp: the gradient of the
mean loss over the global batch, exactly what one process computes on the whole batch.

FSDP2 and micro-batches. Without PP, FSDP2 reduce-scatters each micro-batch's gradients (its default,
and the planner's ZeRO-2/3 assumption): the gradients stay sharded. With PP, pipelining drives FSDP2
itself: it turns gradient reduction and resharding after backward off for every micro-batch and reduces
once after the last (PipelineStage.backward_maybe_with_nosync, perform_reduce_grad): one reduce-scatter
per unit per step, but the stage's gradients are held unsharded, in fp32, for the whole step.

bf16: FSDP2's MixedPrecisionPolicy casts (bf16 compute, fp32 reduce), so with bf16 every stage is
fully_shard-ed, at dp = 1 too (parallelize.fsdp_policy; on a 1-rank group FSDP2 issues no collective).
The pipeline's send and receive buffers take the policy's output dtype (parallelize.boundary_dtype). In
fp32 at dp = 1 there is no FSDP, and the TP-replicated LayerNorm weights' Partial gradients are
all-reduced here, once per step, as FSDP2 does when it is there.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
from torch.distributed.tensor import DTensor, Partial, Replicate

from common.model import GPT, GPTConfig, count_params, lm_loss
from context_parallel import positions, shard_tokens
from design import schedule_orders
from footprint import state_bytes
from init_weights import init_like_one_process
from parallelize import boundary_dtype, fsdp_policy, local_params, parallelize, plain_name
from settings import Layout, Variant
from pipeline_stages import StageModule, boundary_shapes, build_stages, stage_specs

FULL_INIT_LIMIT_BYTES = 2 << 30  # above this the model is built on the meta device and initialised per shard


class Batch(NamedTuple):
    x: torch.Tensor  # (rows, T) token ids of this data-parallel replica
    y: torch.Tensor  # (rows, T) next-token targets


class Engine:
    def __init__(self, gcfg: GPTConfig, layout: Layout, variant: Variant, mesh: DeviceMesh, device: torch.device,
                 *, param_dtype: torch.dtype | None = None, optimizer: str = "adamw", lr: float = 3e-4,
                 seed: int = 0, stage_layers: tuple[int, ...] = (), init: str = "auto", fake_mode=None):
        self.gcfg, self.layout, self.variant, self.mesh, self.device = gcfg, layout, variant, mesh, device
        self.pp_rank = mesh["pp"].get_local_rank()
        self.specs = stage_specs(gcfg.n_layers, layout.pp, variant.interleave, self.pp_rank, stage_layers)
        if init == "auto":
            init = "full" if 4 * count_params(gcfg) <= FULL_INIT_LIMIT_BYTES else "meta"
        self.init = init  # full: built whole on the CPU from the seed; meta: see _materialise; fake: no values
        torch.manual_seed(seed)  # every rank builds the same model, so every shard is a slice of one GPT
        with torch.device("meta" if init in ("meta", "fake") else "cpu"):
            gpt = GPT(gcfg)
        self.policy = fsdp_policy(layout.shard_group, param_dtype)  # None: no FSDP (fp32 at dp = cp = 1)
        self.fsdp = self.policy is not None
        self.act_dtype = boundary_dtype(self.policy)  # what the pipeline stages send and receive
        self.stages: list[StageModule] = []
        for stage in build_stages(gpt, self.specs):
            if init == "full":
                stage.to(device)
            self.stages.append(parallelize(stage, mesh, zero=variant.zero, recompute=variant.recompute,
                                           policy=self.policy, cp_kind=layout.cp_kind))
        self.positions = None  # with CP: (1, T/cp) positions of this rank's tokens, for the batch and the embeddings
        if layout.cp > 1:
            self.positions = positions(gcfg.seq_len, layout.cp, mesh["cp"].get_local_rank(), device)
            for stage in self.stages:
                stage.positions = self.positions
        if init == "meta":
            self._materialise(seed)
        elif init == "fake":  # the at-scale study: shards allocated as FakeTensors, no values
            with fake_mode:
                for stage in self.stages:
                    stage.to_empty(device=self.device)
        self.params = local_params(self.stages)
        self.opt = (torch.optim.AdamW(self.params, lr=lr) if optimizer == "adamw"
                    else torch.optim.SGD(self.params, lr=lr))
        self.holds_first = any(s.is_first for s in self.specs)
        self.holds_last = any(s.is_last for s in self.specs)
        self.schedule = None
        if layout.pp > 1:
            pipeline = [self._pipeline_stage(st, spec) for st, spec in zip(self.stages, self.specs)]
            kw = dict(n_microbatches=layout.num_microbatches, loss_fn=lm_loss)
            self.schedule = (ScheduleInterleaved1F1B(pipeline, **kw) if variant.interleave > 1
                             else Schedule1F1B(pipeline[0], **kw) if layout.num_microbatches >= layout.pp
                             else ScheduleGPipe(pipeline[0], **kw))
        self.last_state: dict[str, int] = {}

    def _materialise(self, seed: int) -> None:
        """Meta-built stages: allocate this rank's shards on the device, then give them the one-process GPT's values
        (the CPU generator's draws from `seed`, replayed parameter by parameter: init_weights.py)."""
        for stage in self.stages:
            stage.to_empty(device=self.device)
        params = {plain_name(n): p for stage in self.stages for n, p in stage.named_parameters()}
        init_like_one_process(self.gcfg, seed, params)

    def _pipeline_stage(self, stage: StageModule, spec) -> PipelineStage:
        # Static shapes: pipelining then skips its shape-inference pass (a real forward/backward on the first
        # micro-batch in torch 2.13's dynamic mode).
        inp, out = boundary_shapes(self.gcfg, spec, self.layout.microbatch, self.layout.tp, self.layout.cp)
        meta = torch.device("meta")
        x = (torch.empty(inp, dtype=torch.long, device=meta) if spec.is_first
             else torch.empty(inp, dtype=self.act_dtype, device=meta, requires_grad=True))
        y = torch.empty(out, dtype=self.act_dtype, device=meta, requires_grad=True)
        return PipelineStage(stage, spec.index, spec.n_stages, self.device, input_args=x, output_args=y,
                             group=self.mesh["pp"].get_group())

    # ---- the step ------------------------------------------------------------------------------

    def forward_backward(self, batch: Batch) -> list[torch.Tensor]:
        """m micro-batches over this replica's rows; returns the micro-batch losses (on the last stage only)."""
        x, y = batch.x.to(self.device), batch.y.to(self.device)
        if self.positions is not None:  # context parallelism: this rank's tokens of every row
            x, y = shard_tokens(x, self.positions), shard_tokens(y, self.positions)
        with warnings.catch_warnings():
            # FSDP2 warns that a root returning a view (the logits) could skip its pre-backward hook if the
            # caller edited it in place; lm_loss never does.
            warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
            losses = self._accumulate(x, y) if self.schedule is None else self._pipeline(x, y)
        if not self.fsdp:
            self.reduce_partial_grads()
        return losses

    def _accumulate(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        m, stage, losses = self.layout.num_microbatches, self.stages[0], []
        for xs, ys in zip(x.chunk(m), y.chunk(m)):
            loss = lm_loss(stage(xs), ys)
            (loss / m).backward()
            losses.append(loss.detach())
        return losses

    def _pipeline(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        losses: list[torch.Tensor] = []
        kw = {"target": y, "losses": losses} if self.holds_last else {}
        if self.holds_first:
            self.schedule.step(x, **kw)
        else:
            self.schedule.step(**kw)
        return losses

    def reduce_partial_grads(self) -> None:
        """Without FSDP: all-reduce the Partial gradients of TP-replicated weights (the LayerNorms), once."""
        for p in self.params:
            g = p.grad
            if isinstance(g, DTensor) and any(isinstance(pl, Partial) for pl in g.placements):
                p.grad = g.redistribute(placements=[Replicate() for _ in g.placements])

    def optimizer_step(self) -> None:
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def train_step(self, batch: Batch) -> list[torch.Tensor]:
        """forward_backward + optimizer step; the state bytes are taken in between (grads alive)."""
        losses = self.forward_backward(batch)
        self.last_state = state_bytes(self.params, self.opt)
        self.optimizer_step()
        return losses

    def mean_loss(self, losses: list[torch.Tensor]) -> float:
        """The step's loss on every rank: the last stage's micro-batch mean, averaged over replicas and CP ranks."""
        local = torch.stack(losses).float().mean() if losses else torch.zeros((), device=self.device)
        t = local.detach().to(self.device).reshape(1)
        if self.mesh["pp"].size() > 1:
            dist.all_reduce(t, group=self.mesh["pp"].get_group())  # only the last stage holds it
        for dim in ("dp", "cp"):  # equal tokens per CP rank: the mean of their means is the mean over all tokens
            if self.mesh[dim].size() > 1:
                dist.all_reduce(t, op=dist.ReduceOp.AVG, group=self.mesh[dim].get_group())
        return t.item()

    def step(self, batch: Batch) -> float:
        return self.mean_loss(self.train_step(batch))

    # ---- inspection ----------------------------------------------------------------------------

    def full_grads(self) -> dict[str, torch.Tensor]:
        """This rank's gradients gathered to full size, by the one-process model's names (collective within
        the stage's dp x tp ranks; call after forward_backward)."""
        out = {}
        for stage in self.stages:
            for name, p in stage.named_parameters():
                g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                out[plain_name(name)] = g.detach().float().cpu()
        return out

    def design(self) -> dict:
        """Keyword arguments of design.predicted_counts/predicted_payloads for this rank."""
        if self.schedule is None:
            return {"fsdp": self.fsdp, "orders": None}
        return {"fsdp": self.fsdp,
                "orders": schedule_orders(self.schedule, self.specs, self.pp_rank, self.layout.num_microbatches)}
