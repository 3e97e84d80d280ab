# tp-attention (issue 5): hand-rolled Megatron tensor-parallel attention, verified and benchmarked
# against DTensor. Included by the root Makefile; the runbook is README.md in this folder.
TP_ATTENTION := $(LABS_DIR)/tp-attention
TP ?= 2
SP ?= 0
TP_VERIFY_FLAGS = --tp $(TP) $(if $(filter 1,$(SP)),--sp,--no-sp) --gpu $(GPU) $(ARGS)

.PHONY: tp-attention tp-attention-run tp-attention-report tp-verify tp-attention-gpu

tp-attention: $(SETUP) ## TP attention: correctness grid + timings vs DTensor on NPROC ranks, then REPORT.md
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(MAKE) tp-attention-run tp-attention-report

tp-attention-run: $(SETUP) ## the measurements alone (runs/ -> results/ when complete); ARGS="--resume" continues
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(TORCHRUN) $(TP_ATTENTION)/bench.py --gpu $(GPU) $(ARGS)

tp-attention-report: $(SETUP) ## REPORT.md and plots from tp-attention/results alone
	$(PYRUN) $(TP_ATTENTION)/report.py

# The launcher runs verify.py once as a plain process first (shapes, GPU, TP vs ranks): bad input is
# one line and exit 2 before any rank starts. verify.py writes no file: its result is the JSON line.
tp-verify: $(SETUP) ## TP vs single-device: one JSON line of errors and collective counts (TP=2 SP=0|1 ARGS=...)
	$(call check_vars,TP SP GPU $(LAUNCH_VARS) ARGS)
	$(TORCHRUN) --nproc-per-node $(TP) $(TP_ATTENTION)/verify.py $(TP_VERIFY_FLAGS)

# One GPU: t = 1, the wrappers' overhead. On a node with more GPUs, then the sweep over t on all of them.
tp-attention-gpu: $(SETUP) ## TP attention on GPUs: t = 1 vs the plain block vs DTensor, then t up to the node's GPUs
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(call require_cuda,make tp-attention)
	$(PYRUN) $(TP_ATTENTION)/bench.py --gpu $(GPU) --require-gpu $(ARGS)
	$(if $(filter-out 0 1,$(NGPUS)),$(TORCHRUN) $(TP_ATTENTION)/bench.py --gpu $(GPU) --require-gpu $(ARGS))

REPORT_TARGETS += tp-attention-report
