# fsdp-scaling: DDP vs ZeRO-1/2/3 and HSDP (README.md is the runbook).
FSDP_DIR := $(LABS_DIR)/fsdp-scaling
# One torchrun launch per world size: 1, 2, 4, ... up to NPROC on one node; on several nodes a
# single launch at NNODES x NPROC ranks (a study across node counts is one job per node count).
# (Nothing where NPROC or NNODES is no whole number: the check line names it.)
ifeq ($(NNODES),1)
  FSDP_WORLDS ?= $(strip $(shell { n=1; m=$(call shq,$(NPROC)); case "$$m" in (''|*[!0-9]*|??????????*) exit 0;; \
    esac; while [ $$n -le $$m ]; do printf '%s ' $$n; n=$$((n * 2)); done; } 2>/dev/null))
else
  FSDP_WORLDS ?= $(call product,$(NNODES),$(NPROC))
endif
FSDP_FLAGS = --gpu $(GPU) --worlds $(call shq,$(subst $(space),$(comma),$(strip $(FSDP_WORLDS))))

.PHONY: fsdp-scaling fsdp-scaling-run fsdp-scaling-launches fsdp-scaling-launch fsdp-scaling-at-scale fsdp-scaling-project \
        fsdp-scaling-report fsdp-scaling-gpu

fsdp-scaling: $(SETUP) ## DDP vs ZeRO-1/2/3/HSDP: scaling sweep, memory at scale, collectives, projection, report
	$(call check_vars,GPU FSDP_WORLDS $(LAUNCH_VARS) ARGS)
	$(MAKE) fsdp-scaling-run fsdp-scaling-report

# Checks the plan for every world size first (exit 2, nothing written), then launches; on one node
# it also runs the fake-process-group study (one CPU process; with several nodes run it once, apart).
# Every launch writes into runs/scaling_<preset>_ws<max N>[_n<nodes>]/; the last one publishes the sweep.
# The preflight holds that folder's lock until the last launch has ended (bench.py --preflight ... -- the
# launches): a second sweep is refused in one line, whichever launch the first is in.
# Under Slurm (DT_LAUNCH_PHASE, common/launch.py) the preflight, which prepares the shared run folder, checks
# once in the job's check phase, never again on every node.
fsdp-scaling-run: $(SETUP) ## the measurements: torchrun sweep over world sizes (+ the fake-PG study on one node)
	$(call check_vars,GPU FSDP_WORLDS $(LAUNCH_VARS) ARGS)
	NNODES=$(NNODES) $(PYRUN) $(FSDP_DIR)/bench.py $(FSDP_FLAGS) --preflight $(ARGS) -- $(MAKE) fsdp-scaling-launches

# The sweep's launches, as fsdp-scaling-run runs them under its lock (not a target to call by hand).
fsdp-scaling-launches:
	$(call check_vars,GPU FSDP_WORLDS $(LAUNCH_VARS) ARGS)
ifeq ($(NNODES),1)
	for n in $(FSDP_WORLDS); do $(MAKE) fsdp-scaling-launch NPROC=$$n FSDP_WORLDS="$(FSDP_WORLDS)"; done
	$(if $(filter check,$(DT_LAUNCH_PHASE)),,$(MAKE) fsdp-scaling-at-scale fsdp-scaling-project)
else
	$(MAKE) fsdp-scaling-launch
endif

fsdp-scaling-launch: $(SETUP)
	$(call check_vars,GPU FSDP_WORLDS $(LAUNCH_VARS) ARGS)
	PYTHONPATH=$(LABS_DIR) $(TORCHRUN) $(FSDP_DIR)/bench.py $(FSDP_FLAGS) --append $(ARGS)

fsdp-scaling-at-scale: $(SETUP) ## memory and collectives per rank at 8..1024 ranks (fake process group, CPU)
	$(call check_vars,GPU FSDP_WORLDS NPROC NNODES ARGS)
	$(PYRUN) $(FSDP_DIR)/at_scale.py $(FSDP_FLAGS) $(ARGS)

# The projection is a model evaluated on measured inputs (the single-rank step time here, busbw from
# allreduce-bench when present); it writes its own CSV so that the report only reads CSVs. Re-run it
# after new allreduce-bench sweeps land.
fsdp-scaling-project: $(SETUP) ## the labelled projection to 8..1024 GPUs -> results/projection.csv
	$(call check_vars,GPU ARGS)
	$(PYRUN) $(FSDP_DIR)/project.py --gpu $(GPU) $(ARGS)

fsdp-scaling-report: $(SETUP) ## REPORT.md + plots from the CSVs alone
	$(PYRUN) $(FSDP_DIR)/report.py

# One GPU: the strategies' overhead against plain training, MFU, memory and the overlap profile. The
# fake-PG study and the projection are CPU-side models whose committed CSVs a GPU run must not rewrite.
# These settings are this target's preset: a complete run replaces results/ (--promote replace).
FSDP_GPU_ARGS ?= --warmup 5 --steps 20 --global-batch 32 --micro-batch 8
fsdp-scaling-gpu: $(SETUP) ## 1 GPU: FSDP overhead vs plain training, MFU, memory by strategy, overlap
	$(call check_vars,GPU FSDP_GPU_ARGS $(LAUNCH_VARS) ARGS)
	$(call require_cuda,make fsdp-scaling)
	NNODES=1 NPROC=1 $(PYRUN) $(FSDP_DIR)/bench.py --gpu $(GPU) --worlds 1 --preflight $(FSDP_GPU_ARGS) $(ARGS) -- \
	  $(MAKE) fsdp-scaling-launch NPROC=1 FSDP_WORLDS=1 ARGS="$(FSDP_GPU_ARGS) --promote replace $(ARGS)"
	$(MAKE) fsdp-scaling-report

REPORT_TARGETS += fsdp-scaling-report
