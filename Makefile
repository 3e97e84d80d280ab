# Distributed-training labs. `make help` lists every target and variable.
#
# The first run of any target builds .venv from requirements.txt (again only when that file
# changes). To use an environment you already have (a GPU box with its own torch >= 2.6):
#   make doctor PYTHON=/opt/torch/.venv/bin/python3     or     make doctor VENV=/path/to/venv
# and nothing is installed.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

# ---- environment ----------------------------------------------------------------------------
BOOTSTRAP_PYTHON ?= python3
ifneq ($(origin PYTHON),undefined)
  SETUP := check-env
else ifneq ($(origin VENV),undefined)
  PYTHON := $(VENV)/bin/python
  SETUP := check-env
else
  VENV := .venv
  PYTHON := $(VENV)/bin/python
  SETUP := $(VENV)/.installed
endif

# ---- hardware and launch --------------------------------------------------------------------
# GPU preset: auto|cpu|a100|a100-40gb|h100|h200|b200|gb200 (the table is common/hardware.py)
GPU ?= auto
NGPUS := $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
ifeq ($(GPU),cpu)
  NPROC ?= 4
else ifeq ($(NGPUS),0)
  NPROC ?= 4
else
  NPROC ?= $(NGPUS)
endif
NNODES ?= 1
MASTER_ADDR ?= 127.0.0.1
MASTER_PORT ?= 29500
RDZV_ID ?= labs
ARGS ?=

# Every multi-rank run goes through torchrun. One rank per core-share on CPU: torchrun would set
# OMP_NUM_THREADS=1 anyway (with a warning); we set it so the choice is visible and overridable.
RUN_ENV := OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} PYTHONUNBUFFERED=1
ifeq ($(NNODES),1)
  TORCHRUN = $(RUN_ENV) $(PYTHON) -m torch.distributed.run --standalone --nnodes 1 --nproc-per-node $(NPROC)
else ifneq ($(origin NODE_RANK),undefined)
  # NODE_RANK given: static rendezvous, node 0 holds global rank 0 (and writes the results).
  TORCHRUN = $(RUN_ENV) $(PYTHON) -m torch.distributed.run --nnodes $(NNODES) --node-rank $(NODE_RANK) \
    --nproc-per-node $(NPROC) --master-addr $(MASTER_ADDR) --master-port $(MASTER_PORT)
else
  # Otherwise an elastic c10d rendezvous hosted at MASTER_ADDR:MASTER_PORT (what Slurm jobs use).
  TORCHRUN = $(RUN_ENV) $(PYTHON) -m torch.distributed.run --nnodes $(NNODES) --nproc-per-node $(NPROC) \
    --rdzv-backend c10d --rdzv-endpoint $(MASTER_ADDR):$(MASTER_PORT) --rdzv-id $(RDZV_ID)
endif
LABS_DIR := distributed-training
PYRUN = $(RUN_ENV) PYTHONPATH=$(LABS_DIR) $(PYTHON)
# Run before a torchrun launch: the runner checks its arguments in one plain process and stops where
# its process group would start (common/dist.py). Bad input is then one line and exit 2.
CHECK_ARGS = DT_CHECK_ARGS=1 $(PYRUN)

# Each lab adds its targets in its own lab.mk and appends to these lists.
REPORT_TARGETS :=
GPU_SUITE_TARGETS :=
include $(sort $(wildcard $(LABS_DIR)/*/lab.mk))

.PHONY: help setup check-env test doctor reports gpu-suite setup-fp8 clean-venv

help: ## this list
	@echo "Targets (variables: GPU=$(GPU) NPROC=$(NPROC) NNODES=$(NNODES) ARGS='...' PYTHON=... VENV=...):"
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

$(VENV)/.installed: requirements.txt
	@$(BOOTSTRAP_PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else \
	  "error: Python >= 3.10 is needed, $(BOOTSTRAP_PYTHON) is " + sys.version.split()[0] + \
	  "; pass BOOTSTRAP_PYTHON=python3.11 or similar")'
	@test -x $(VENV)/bin/python || $(BOOTSTRAP_PYTHON) -m venv $(VENV)
	@echo "installing requirements.txt into $(VENV) (once; again only when it changes)"
	$(VENV)/bin/python -m pip install --disable-pip-version-check -q -r requirements.txt
	@touch $@

setup: $(SETUP) ## create .venv from requirements.txt (automatic for every target)

check-env:
	@command -v "$(PYTHON)" >/dev/null || { echo "error: PYTHON=$(PYTHON) is not an executable interpreter" >&2; exit 2; }
	@$(PYTHON) -c 'import importlib.util as u, sys; \
	  missing = [p for p in ("torch", "pandas", "matplotlib", "tqdm", "pytest") if u.find_spec(p) is None]; \
	  missing and sys.exit(f"error: $(PYTHON) lacks {missing}; install them there or drop PYTHON/VENV for the managed .venv")'

test: $(SETUP) ## run every lab's tests (CPU, gloo; GPU tests skip without CUDA)
	$(PYTHON) -m pytest $(ARGS)

doctor: $(SETUP) ## what this machine has: torch, CUDA, NCCL, GPUs and links, FP8 backends, preset
	@$(PYRUN) -m common.doctor --gpu $(GPU)

reports: $(SETUP) $(REPORT_TARGETS) ## regenerate every lab's REPORT.md from its committed CSVs

# Every GPU measurement in one go, for a short lease on a GPU node: the machine's description, the
# GPU-only tests, then each lab's GPU target (each writes its CSVs and regenerates its report).
gpu-suite: $(SETUP) ## on a GPU node: doctor, GPU-only tests, then every lab's GPU measurements and reports
	@test "$(NGPUS)" != "0" || { echo "error: gpu-suite needs NVIDIA GPUs and nvidia-smi lists none" \
	  "(CPU presets: make allreduce-bench, make fsdp-scaling, ...)" >&2; exit 2; }
	$(MAKE) doctor
	$(PYTHON) -m pytest -m gpu -rs
	$(MAKE) -k $(GPU_SUITE_TARGETS)

setup-fp8: $(SETUP) ## optional FP8 backends (torchao); TransformerEngine: see fp8-train/README.md
	$(PYTHON) -m pip install --disable-pip-version-check -q -r requirements-fp8.txt

clean-venv: ## remove the managed .venv
	rm -rf .venv
