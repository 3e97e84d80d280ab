# planner: the parallelism cost model and the PARALLELISM_GUIDE.md it generates. Pure Python on the
# CPU (numpy), no GPU and no torchrun: it plans for a cluster, it does not measure one.
PLANNER_DIR := $(LABS_DIR)/planner

.PHONY: planner plan guide

planner: $(SETUP) ## the planner lab: regenerate PARALLELISM_GUIDE.md (make plan ARGS="..." for one plan)
	$(MAKE) guide

plan: $(SETUP) ## pick TP/PP/DP/CP, ZeRO, micro-batch, recompute: make plan ARGS="--params 70B --gpus 512"
	@$(PYRUN) $(PLANNER_DIR)/plan.py $(ARGS)

guide: $(SETUP) ## regenerate distributed-training/PARALLELISM_GUIDE.md from the planner (seconds, CPU)
	$(PYRUN) $(PLANNER_DIR)/guide.py $(ARGS)

REPORT_TARGETS += guide
