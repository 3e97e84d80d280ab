# parallel-3d (issue 17): the common GPT with TP x PP x DP from PyTorch's own parts (DTensor TP + SP,
# torch.distributed.pipelining, FSDP2), and CP through the hand-rolled ring attention (issue 33), held against the
# planner. Runbook: distributed-training/parallel-3d/README.md
P3D_DIR := $(LABS_DIR)/parallel-3d
TP ?= 2
PP ?= 2
DP ?= 2
CP ?= 1
# One node: the launch has exactly TP x PP x DP x CP ranks. Several nodes: NPROC per node (make's default, the
# node's GPUs) x NNODES, and DP may be 0 (derived from the world). (Nothing where a value is no whole number: the
# check line names it.)
ifeq ($(NNODES),1)
  P3D_WORLD := $(call product,$(TP),$(PP),$(DP),$(CP))
  parallel-3d parallel-3d-run: NPROC = $(P3D_WORLD)
else
  P3D_WORLD := $(call product,$(NNODES),$(NPROC))
endif
P3D_FLAGS = --gpu $(GPU) --tp $(TP) --pp $(PP) --dp $(DP) --cp $(CP) --world $(P3D_WORLD)
P3D_ACT_NPROC ?= $(if $(filter 0 1,$(NGPUS)),$(if $(filter 1,$(NGPUS)),1,2),2)

.PHONY: parallel-3d parallel-3d-baseline parallel-3d-run parallel-3d-activations parallel-3d-at-scale \
        parallel-3d-report parallel-3d-gpu parallel-3d-ranking

# The run's checks (its degrees against the world, ARGS) before the baseline trains (DT_LAUNCH_PHASE=check).
parallel-3d: $(SETUP) ## TP x PP x DP x CP training (make parallel-3d TP=2 PP=2 DP=2 [CP=2]): 1-rank baseline, run, studies, report
	$(call check_vars,GPU TP PP DP CP P3D_ACT_NPROC $(LAUNCH_VARS) ARGS)
	@DT_LAUNCH_PHASE=check $(MAKE) -s parallel-3d-run
	$(MAKE) parallel-3d-baseline parallel-3d-run parallel-3d-activations
	$(if $(filter 0,$(NGPUS)),$(MAKE) parallel-3d-at-scale)
	$(MAKE) parallel-3d-report

# The one-process reference of the same model, data and seed (its losses are what every 3D run must reproduce).
# Every launch writes into its own run folder (runs/<preset>_ws<N>_tp<t>pp<p>dp<d>/) and, complete, merges its
# rows into results/ (other degrees' rows stay); ARGS="--resume" continues an interrupted one.
parallel-3d-baseline: $(SETUP) ## the same model on one rank (the reference the 3D runs must equal)
	$(call check_vars,GPU ARGS)
	$(PYRUN) $(P3D_DIR)/train.py --gpu $(GPU) --tp 1 --pp 1 --dp 1 --interleave 1 $(ARGS)

# What slurm/lab.sbatch runs under srun on every node.
# common.launch (TORCHRUN) runs train.py once as a plain process first: bad input is one line, exit 2.
parallel-3d-run: $(SETUP) ## the TP x PP x DP x CP launch alone (torchrun; rows merged into results/runs_<preset>.csv)
	$(call check_vars,GPU TP PP DP CP $(LAUNCH_VARS) ARGS)
	$(TORCHRUN) $(P3D_DIR)/train.py $(P3D_FLAGS) $(ARGS)

parallel-3d-activations: $(SETUP) ## activation bytes per block for none/op/full recompute at t = 1, 2 vs the planner
	$(call check_vars,GPU P3D_ACT_NPROC)
	$(LAUNCH) --standalone --nnodes 1 --nproc-per-node $(P3D_ACT_NPROC) \
	  $(P3D_DIR)/activations.py --gpu $(GPU) $(if $(filter 1,$(P3D_ACT_NPROC)),--tp 1)

parallel-3d-at-scale: $(SETUP) ## the planner's choice for 8B/64, 70B/512, 405B/4096 GPUs, built as one rank (fake PG)
	$(PYRUN) $(P3D_DIR)/at_scale.py

# The ranking set (CPU, gloo, any machine): this machine's calibration (allreduce-bench's fit, a GEMM rate, a
# memory rate, the host's cost per op), then 39 layouts of the tiny GPT in six groups (world 4 and 8, global batch
# 4-32), each trained by train.py;
# rows appended as measured, --resume continues. The planner predicts them (python -m planner.evidence.ranking).
parallel-3d-ranking: $(SETUP) ## the ranking set: 39 layouts in six groups at 4 and 8 gloo ranks, for the planner's ranking
	$(call check_vars,ARGS)
	$(PYRUN) $(P3D_DIR)/ranking.py $(ARGS)

parallel-3d-report: $(SETUP) ## REPORT.md and plots from parallel-3d/results alone
	$(PYRUN) $(P3D_DIR)/report.py

# On a GPU node (bf16, NCCL): the 1-GPU baseline (medium GPT, ~300M parameters, FSDP2's bf16 policy on a 1-rank
# group; z3 x recompute none and full, 3 + 10 steps each, and its planner prediction), the activation study (t = 1
# on one GPU; t = 1, 2 on two or more), with 8+ GPUs the TP2 x PP2 x DP2 run, and the report.
P3D_GPU_RUN = $(shell test $(call shq,$(NGPUS)) -ge 8 2>/dev/null && echo yes)
parallel-3d-gpu: $(SETUP) ## on GPUs: baseline on 1 GPU, activation study, TP2xPP2xDP2 with 8+ GPUs, report
	$(call check_vars,GPU P3D_ACT_NPROC CP $(LAUNCH_VARS) ARGS)
	$(call require_cuda,make parallel-3d)
	$(if $(P3D_GPU_RUN),@DT_LAUNCH_PHASE=check $(MAKE) -s parallel-3d-run TP=2 PP=2 DP=2)
	$(MAKE) parallel-3d-baseline parallel-3d-activations
	$(if $(P3D_GPU_RUN),$(MAKE) parallel-3d-run TP=2 PP=2 DP=2)
	$(MAKE) parallel-3d-report

REPORT_TARGETS += parallel-3d-report
