# planner: the parallelism cost model and the PARALLELISM_GUIDE.md it generates. Pure Python on the
# CPU (numpy), no GPU and no torchrun: it plans for a cluster, it does not measure one.

.PHONY: planner plan guide

planner: $(SETUP) ## the planner lab: regenerate PARALLELISM_GUIDE.md (make plan ARGS="..." for one plan)
	$(call check_vars,CALIBRATE ARGS)
	$(MAKE) guide

plan: $(SETUP) ## pick TP/PP/DP/CP, ZeRO, micro-batch, recompute: make plan ARGS="--params 70B --gpus 512"
	$(call check_vars,ARGS)
	@$(PYRUN) -m planner.plan $(ARGS)

# CALIBRATE=results (every calibration CSV the labs hold) or CALIBRATE='a.csv,b*.csv': the guide for your
# cluster, written to PARALLELISM_GUIDE_<gpu>.md (planner/calibrate/calibrate.py says what each kind of CSV replaces).
guide: $(SETUP) ## regenerate distributed-training/PARALLELISM_GUIDE.md (CALIBRATE=results: for your cluster)
	$(call check_vars,CALIBRATE ARGS)
	$(PYRUN) -m planner.guide $(if $(CALIBRATE),--calibrate $(call shq,$(CALIBRATE))) $(ARGS)

REPORT_TARGETS += guide
