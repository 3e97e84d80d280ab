# fp8-train: the same GPT in FP32 / BF16 / FP16 / FP8 (see fp8-train/README.md).
# One process on CPU (or GPU=auto without GPUs); torchrun with NPROC ranks (FSDP2) on GPUs.
FP8_DIR := $(LABS_DIR)/fp8-train
FP8_LAUNCH = $(if $(or $(filter cpu,$(GPU)),$(filter 0,$(NGPUS))),$(PYRUN),$(TORCHRUN))

.PHONY: fp8-train fp8-train-run fp8-train-report fp8-train-bench fp8-train-gpu

fp8-train: $(SETUP) ## fp8-train: precision comparison (GPU=cpu|h100|h200|a100|b200) + REPORT.md
	$(MAKE) fp8-train-run fp8-train-report

fp8-train-run: $(SETUP)
	$(FP8_LAUNCH) $(FP8_DIR)/train.py --gpu $(GPU) $(ARGS)

fp8-train-report: $(SETUP)
	$(PYRUN) $(FP8_DIR)/report.py

fp8-train-bench: $(SETUP) ## fp8-train: step cost per precision and FP8 GEMM paths -> results/<preset>/bench_*.csv
	$(PYRUN) $(FP8_DIR)/bench.py --gpu $(GPU) $(ARGS)

fp8-train-gpu: $(SETUP)
	$(MAKE) fp8-train-run fp8-train-bench fp8-train-report

REPORT_TARGETS += fp8-train-report
GPU_SUITE_TARGETS += fp8-train-gpu
