# fp8-train: the same GPT in FP32 / BF16 / FP16 / FP8 (see fp8-train/README.md).
# On CPU (or GPU=auto without GPUs) one process unless NPROC is given; on GPUs torchrun with NPROC ranks
# per node (FSDP2), on NNODES nodes. Results are named by world: results/<preset>_ws<N>[_n<nodes>].
FP8_DIR := $(LABS_DIR)/fp8-train
FP8_ON_CPU := $(or $(filter cpu,$(GPU)),$(filter 0,$(NGPUS)))
FP8_NPROC := $(if $(and $(FP8_ON_CPU),$(filter file,$(origin NPROC))),1,$(NPROC))
# one process: in a Slurm job's check phase (DT_LAUNCH_PHASE=check) it checks and stops, as torchrun's would
FP8_ONE = $(if $(filter check,$(DT_LAUNCH_PHASE)),$(CHECK_ARGS),$(PYRUN))
FP8_LAUNCH = $(if $(and $(filter 1,$(FP8_NPROC)),$(filter 1,$(NNODES))),$(FP8_ONE),$(TORCHRUN))
fp8-train-run: NPROC = $(FP8_NPROC)

.PHONY: fp8-train fp8-train-run fp8-train-report fp8-train-bench fp8-train-gpu fp8-train-demo fp8-train-wide

fp8-train: $(SETUP) ## fp8-train: precision comparison (GPU=cpu|h100|h200|a100|b200) + REPORT.md
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(MAKE) fp8-train-run fp8-train-report

# Writes into runs/<tag>/; a complete run of the preset then replaces results/<tag>/ (a run with
# other settings, e.g. ARGS="--steps 50", is an experiment and stays in runs/: see README.md).
fp8-train-run: $(SETUP) ## the training runs alone (runs/ -> results/<preset>_ws<N> when complete); ARGS="--resume"
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(FP8_LAUNCH) $(FP8_DIR)/train.py --gpu $(GPU) $(ARGS)

fp8-train-report: $(SETUP) ## REPORT.md and plots from fp8-train/results alone
	$(PYRUN) $(FP8_DIR)/report.py

fp8-train-bench: $(SETUP) ## fp8-train: step cost per precision and FP8 GEMM paths -> results/<preset>/bench_*.csv
	$(call check_vars,GPU ARGS)
	$(PYRUN) $(FP8_DIR)/bench.py --gpu $(GPU) $(ARGS)

# The wider CPU comparison, opt-in (the CPU preset above trains BF16 x2, FP8 emulated and native in a few minutes):
# fp32, BF16 x3 seeds, FP8 native and emulated, MXFP8 and NVFP4 emulation -> results/cpu_ws1-wide.
FP8_WIDE_ARGS ?= --runs fp32,bf16,fp8:native,fp8:emulated,mxfp8:emulated,nvfp4:emulated --noise-seeds 3 --promote replace
fp8-train-wide: $(SETUP) ## fp8-train on CPU, the wider comparison (fp32, 3 BF16 seeds, MXFP8, NVFP4) + REPORT.md
	$(call check_vars,FP8_WIDE_ARGS ARGS)
	$(PYRUN) $(FP8_DIR)/train.py --gpu cpu --results $(FP8_DIR)/results/cpu_ws1-wide $(FP8_WIDE_ARGS) $(ARGS)
	$(MAKE) fp8-train-report

# The training-health demo: the CPU preset's fp8-emulated run with a gradient spike, a NaN and an
# FP8 overflow injected, recovered by rollback; then its dashboard overlaid on the clean run.
FP8_DEMO_ARGS ?= --inject spike@60,nan@110,overflow@140 --on-nan rollback --ckpt-every 25 --promote replace
fp8-train-demo: $(SETUP) ## fp8-train: injected spike/NaN/overflow + recovery -> results/cpu_ws1-demo, dashboard
	$(call check_vars,FP8_DEMO_ARGS ARGS)
	$(PYRUN) $(FP8_DIR)/train.py --gpu cpu --runs fp8:emulated --results $(FP8_DIR)/results/cpu_ws1-demo $(FP8_DEMO_ARGS) $(ARGS)
	$(PYRUN) $(FP8_DIR)/dashboard.py --run $(FP8_DIR)/results/cpu_ws1:fp8-emulated-s0 \
	  --run $(FP8_DIR)/results/cpu_ws1-demo:fp8-emulated-s0 --out $(FP8_DIR)/results/cpu_ws1-demo/overlay.html \
	  --title "fp8-emulated: clean run vs injected faults"

fp8-train-gpu: $(SETUP)
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(call require_cuda,make fp8-train GPU=cpu)
	$(MAKE) fp8-train-run fp8-train-bench fp8-train-report

REPORT_TARGETS += fp8-train-report
