# cp-attention (issues 33, 41): context parallelism three ways (ring, all-gather, Ulysses), hand-rolled, verified and
# benchmarked against PyTorch's context_parallel. Included by the root Makefile; the runbook is README.md in this folder.
CP_ATTENTION := $(LABS_DIR)/cp-attention
# CP=N from the command line; else 2 (parallel-3d's lab.mk gives CP a default of 1 for its own runs).
cp-verify: CP = $(CP_VERIFY)
CP_VERIFY := $(if $(filter command line environment,$(origin CP)),$(CP),2)

.PHONY: cp-attention cp-attention-run cp-attention-report cp-verify cp-attention-gpu

# Two launches on a CPU: 2 ranks (N = 1 and 2, a core each on a 2-core machine: the times the report may compare),
# then NPROC ranks (N up to NPROC: bytes and exactness; more ranks than cores are never compared).
cp-attention: $(SETUP) ## CP attention: correctness grid + ring/all-gather/Ulysses vs PyTorch's on 2 then NPROC ranks, REPORT.md
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(MAKE) cp-attention-run NPROC=2
	$(if $(filter 2,$(NPROC)),,$(MAKE) cp-attention-run)
	$(MAKE) cp-attention-report

cp-attention-run: $(SETUP) ## the measurements alone (runs/ -> results/ when complete); ARGS="--resume" continues
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(TORCHRUN) $(CP_ATTENTION)/bench.py --gpu $(GPU) $(ARGS)

cp-attention-report: $(SETUP) ## REPORT.md and plots from cp-attention/results alone
	$(PYRUN) $(CP_ATTENTION)/report.py

# The launcher runs verify.py once as a plain process first (shapes, GPU, CP vs ranks): bad input is one line
# and exit 2 before any rank starts. verify.py writes no file: its result is the JSON line.
cp-verify: $(SETUP) ## a CP design vs single device: one JSON line of errors and bytes sent (CP=2 ARGS="--impl ulysses")
	$(call check_vars,CP GPU $(LAUNCH_VARS) ARGS)
	$(TORCHRUN) --nproc-per-node $(CP) $(CP_ATTENTION)/verify.py --cp $(CP) --gpu $(GPU) $(ARGS)

# One GPU: N = 1 (the three designs and PyTorch's public API at one rank: their overheads over plain SDPA). On a node with
# more GPUs, then the sweep over N on all of them, bf16, Llama-3-8B attention shapes.
cp-attention-gpu: $(SETUP) ## CP attention on GPUs: N = 1 on one GPU, then N up to the node's GPUs; report
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(call require_cuda,make cp-attention)
	$(PYRUN) $(CP_ATTENTION)/bench.py --gpu $(GPU) --require-gpu $(ARGS)
	$(if $(filter-out 0 1,$(NGPUS)),$(TORCHRUN) $(CP_ATTENTION)/bench.py --gpu $(GPU) --require-gpu $(ARGS))
	$(MAKE) cp-attention-report

REPORT_TARGETS += cp-attention-report
