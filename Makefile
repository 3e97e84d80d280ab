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
# The managed .venv gets the pinned torch built for this machine's NVIDIA driver (+cu126/+cu128/+cu130,
# or +cpu without one) from PyTorch's wheel index, or, where that index does not answer within
# TORCH_INDEX_TIMEOUT_S, what the package registry serves (one line says so): provision/torch_install.py.
BOOTSTRAP_PYTHON ?= python3
TORCH_BACKEND ?= auto
TORCH_INDEX ?= https://download.pytorch.org/whl
TORCH_INDEX_TIMEOUT_S ?= 5
ifneq ($(origin PYTHON),undefined)
  SETUP := check-env
else ifneq ($(origin VENV),undefined)
  PYTHON := $(VENV)/bin/python
  SETUP := check-env
else
  VENV := .venv
  PYTHON := $(VENV)/bin/python
  SETUP := $(VENV)/.installed
  # .venv is rebuilt only when requirements.txt changes: a TORCH_BACKEND given to an existing one is checked,
  # never quietly ignored (one line naming the build it holds and the command that installs the other).
  ifneq ($(filter command line environment,$(origin TORCH_BACKEND)),)
    SETUP += check-torch-backend
  endif
endif

# $(call shq,text): text as one single-quoted shell word, whatever it holds (spaces, quotes, $): every path and
# value a user gives reaches a recipe's shell through it. PY: the interpreter, quoted.
shq = '$(subst ','\'',$(1))'
empty :=
space := $(empty) $(empty)
comma := ,
hash := \#
PY = $(call shq,$(PYTHON))

# ---- hardware and launch --------------------------------------------------------------------
# GPU preset: auto|cpu|a100|a100-40gb|h100|h200|b200|gb200 (the table is common/hardware.py)
GPU ?= auto
# Under a time limit: a GPU in a bad state makes nvidia-smi hang, and make would print nothing, ever
# (`make doctor` then names the hang; common/cuda_env.py reads the same limit).
DT_SMI_TIMEOUT_S ?= 15
NGPUS := $(shell timeout -k 2 $(call shq,$(DT_SMI_TIMEOUT_S)) nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
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
ARCHIVE ?=

# Every multi-rank run goes through torchrun, wrapped by common/launch.py (same arguments): before any
# rank starts it checks NPROC/NNODES/NODE_RANK and the master port, and runs the script once as a plain
# process that checks its own arguments (DT_CHECK_ARGS=1); a failing rank is then told in one line,
# once, with its rank and a documented exit code (common/failures.py). One rank per core-share on
# CPU: torchrun would set OMP_NUM_THREADS=1 anyway (with a warning); we set it so it is visible.
RUN_ENV := OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} PYTHONUNBUFFERED=1
LABS_DIR := distributed-training
# KIT_SITE: where `make offline-install` puts a carried kit's wheels (TransformerEngine, torchao) without
# touching the interpreter's own environment; every target sees it, and the caller's PYTHONPATH after it.
KIT_SITE ?= .kit-site
# absolute, spaces kept (make's abspath would split a path with a space into two words)
KIT_SITE_ABS = $(if $(filter /%,$(firstword $(KIT_SITE))),$(KIT_SITE),$(CURDIR)/$(KIT_SITE))
PYRUN = $(RUN_ENV) PYTHONPATH=$(call shq,$(LABS_DIR):$(KIT_SITE_ABS))$${PYTHONPATH:+:$$PYTHONPATH} $(PY)
LAUNCH = $(PYRUN) -m common.launch
ifeq ($(NNODES),1)
  TORCHRUN = $(LAUNCH) --standalone --nnodes 1 --nproc-per-node $(NPROC)
else ifneq ($(origin NODE_RANK),undefined)
  # NODE_RANK given: static rendezvous, node 0 holds global rank 0 (and writes the results).
  TORCHRUN = $(LAUNCH) --nnodes $(NNODES) --node-rank $(NODE_RANK) \
    --nproc-per-node $(NPROC) --master-addr $(MASTER_ADDR) --master-port $(MASTER_PORT)
else
  # Otherwise an elastic c10d rendezvous hosted at MASTER_ADDR:MASTER_PORT (what Slurm jobs use).
  TORCHRUN = $(LAUNCH) --nnodes $(NNODES) --nproc-per-node $(NPROC) \
    --rdzv-backend c10d --rdzv-endpoint $(MASTER_ADDR):$(MASTER_PORT) --rdzv-id $(RDZV_ID)
endif
# A plain-process run of a runner that checks its arguments and stops where its process group would
# start (common/dist.py): for checks a target needs before it starts anything else.
CHECK_ARGS = DT_CHECK_ARGS=1 $(PYRUN)
# $(call require_cuda,<the CPU preset's command>): the first step of every GPU target. One line and exit 2
# unless torch can use CUDA here (no NVIDIA GPU, or a torch build the driver cannot run: the line names
# both and the fix), before anything is written: a GPU target never falls back to the CPU (common/cuda_env.py).
require_cuda = @$(PYRUN) -m common.cuda_env require $@ $(if $(1),--cpu "$(strip $(1))")
# $(call check_vars,VAR ...): the first recipe line of every target that takes variables (a GPU target's too,
# before its CUDA check). common/make_vars.py checks each value the target takes, as make holds it (type,
# range), and against the others (NODE_RANK < NNODES, the ranks a launch starts fit the node, TP x PP x DP x CP
# is the world): one line naming the variable, its value and what is allowed, exit 2, nothing started or
# written. Every later line of a recipe is expanded before the first runs, so nothing in an expansion may
# fail on a bad value (a shell's arithmetic on TP=x would): $(call product,...) stays silent and leaves it here.
# KIT_SITE (on every target's PYTHONPATH) and DT_SMI_TIMEOUT_S (behind NGPUS, which every target reads) go
# along with every check; NODE_RANK only where it is given (unset, a multi-node launch uses a c10d rendezvous).
LAUNCH_VARS := NPROC NNODES NODE_RANK MASTER_ADDR MASTER_PORT RDZV_ID
EVERY_CHECK := KIT_SITE DT_SMI_TIMEOUT_S
check_vars = @PYTHONPATH=$(call shq,$(LABS_DIR)) $(PY) -m common.make_vars $@ NGPUS=$(call shq,$(NGPUS)) \
  $(foreach v,$(1) $(EVERY_CHECK),$(if $(filter undefined,$(origin $(v))),,$(call shq,$(v)=$($(v)))))
# $(call product,A,B,...): the product of up to four whole numbers, or nothing if one is not (never an error).
product = $(shell { n=1; for x in $(call shq,$(1)) $(call shq,$(or $(2),1)) $(call shq,$(or $(3),1)) \
  $(call shq,$(or $(4),1)); do case "$$x" in (''|*[!0-9]*|??????????*) exit 0;; esac; n=$$((n * 10$(hash)$$x)); done; \
  echo $$n; } 2>/dev/null)

# Each lab adds its targets in its own lab.mk and appends to these lists.
REPORT_TARGETS :=
include $(sort $(wildcard $(LABS_DIR)/*/lab.mk))

.PHONY: help setup check-env check-torch-backend test doctor reports setup-fp8 clean-venv

help: ## this list
	@printf '%s\n' $(call shq,Targets (variables: GPU=$(GPU) NPROC=$(NPROC) NNODES=$(NNODES) ARGS='...' \
	  PYTHON=... VENV=...):)
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

# A venv left without pip (an earlier failed `python3 -m venv`) is made again.
$(VENV)/.installed: requirements.txt
	@command -v $(BOOTSTRAP_PYTHON) >/dev/null || { echo "error: no $(BOOTSTRAP_PYTHON) on PATH;" \
	  "install Python >= 3.10 or pass BOOTSTRAP_PYTHON=/path/to/python3" >&2; exit 2; }
	@$(BOOTSTRAP_PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else \
	  "error: Python >= 3.10 is needed, $(BOOTSTRAP_PYTHON) is " + sys.version.split()[0] + \
	  "; pass BOOTSTRAP_PYTHON=python3.11 or similar")'
	@PYTHONPATH=$(LABS_DIR) $(BOOTSTRAP_PYTHON) -m provision.torch_install preflight --python $(BOOTSTRAP_PYTHON)
	@$(VENV)/bin/python -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV) && $(BOOTSTRAP_PYTHON) -m venv $(VENV); }
	@echo "installing requirements.txt into $(VENV) (once; again only when it changes)"
	PYTHONPATH=$(LABS_DIR) $(VENV)/bin/python -m provision.torch_install install --requirements requirements.txt \
	  --backend $(TORCH_BACKEND) --index $(TORCH_INDEX) --timeout-s $(TORCH_INDEX_TIMEOUT_S)
	$(VENV)/bin/python -m pip install --disable-pip-version-check -q -r requirements.txt
	@touch $@

setup: $(SETUP) ## create .venv from requirements.txt (automatic for every target)

check-torch-backend: $(VENV)/.installed
	@PYTHONPATH=$(LABS_DIR) $(PY) -m common.cuda_env backend $(call shq,$(TORCH_BACKEND))

check-env:
	@command -v $(PY) >/dev/null || \
	  { echo $(call shq,error: PYTHON=$(PYTHON) is not an executable interpreter) >&2; exit 2; }
	@$(PY) -c 'import importlib.util as u, sys; \
	  missing = [p for p in ("torch", "pandas", "matplotlib", "tqdm", "pytest") if u.find_spec(p) is None]; \
	  missing and sys.exit(f"error: $(PYTHON) lacks {missing}; install them there or drop PYTHON/VENV for the managed .venv")'

test: $(SETUP) ## run every lab's tests (CPU, gloo; GPU tests skip without CUDA)
	$(call check_vars,ARGS)
	$(PY) -m pytest $(ARGS)

doctor: $(SETUP) ## what this machine has: torch, CUDA, NCCL, GPUs and links, FP8 backends, preset
	$(call check_vars,GPU)
	@$(PYRUN) -m provision.doctor --gpu $(GPU)

# The guide's variables are checked before any report is written (the report targets in a sub-make, after).
reports: $(SETUP) ## regenerate every lab's REPORT.md, the guide and README.md's findings from the CSVs
	$(call check_vars,CALIBRATE ARGS)
	@$(MAKE) $(REPORT_TARGETS)
	@$(PYRUN) -m common.readme_findings

# One short GPU lease (15 minutes, no network): what results/<preset>_ws1 lacks, by priority, under BUDGET_S
# (RUNS=te-fused,native sets the list; ARGS=--dry-run prints it with estimates, no GPU needed), the kit installed
# first, the archive, closing table and whole log always written to ARCHIVE_DIR (default $OUT; never the
# checkout): provision/gpu_quick.py. A GPU target: without a usable GPU one line, exit 2, nothing written;
# GPU=cpu REHEARSAL=1 rehearses it on CPU stand-ins (into fp8-train/runs/rehearsal). provision/gpu_slot.sh is
# the whole command for a lent machine. BUNDLE_MIB: the tree and the kit together, what a lent machine takes.
BUDGET_S ?= 480
RUNS ?=
REHEARSAL ?=
KIT ?=
KIT_PYTHON ?= 3.12
KIT_TORCH ?= 2.11.0+cu130
KIT_ARCHS ?= 90
BUNDLE_MIB ?= 64
ARCHIVE_DIR ?=
.PHONY: gpu-quick offline-kit offline-install
gpu-quick: $(SETUP) ## one short GPU slot: what results/ lacks, by priority, under BUDGET_S=480 (RUNS=..., ARGS=--dry-run)
	$(call check_vars,GPU BUDGET_S RUNS REHEARSAL KIT ARCHIVE_DIR ARGS)
	@$(PYRUN) -m provision.gpu_quick --gpu $(GPU) --budget-s $(BUDGET_S) --site $(call shq,$(KIT_SITE_ABS)) \
	  $(if $(ARCHIVE_DIR),--archive-dir $(call shq,$(ARCHIVE_DIR))) $(if $(KIT),--kit $(call shq,$(KIT))) \
	  $(if $(RUNS),--runs $(call shq,$(RUNS))) $(if $(filter-out 0,$(REHEARSAL)),--rehearsal) $(ARGS)

offline-kit: $(SETUP) ## KIT=dir: wheels for an offline GPU node (KIT_PYTHON, KIT_TORCH, KIT_ARCHS), tree + kit <= BUNDLE_MIB
	$(call check_vars,KIT KIT_PYTHON KIT_TORCH KIT_ARCHS TE TORCHAO BUNDLE_MIB)
	@$(PYRUN) -m provision.offline_kit build --kit $(call shq,$(KIT)) --python $(KIT_PYTHON) --torch $(KIT_TORCH) \
	  --archs $(KIT_ARCHS) --te $(or $(TE),2.20.2) --torchao $(TORCHAO) --bundle-mib $(BUNDLE_MIB)

offline-install: $(SETUP) ## KIT=dir: install a kit into KIT_SITE (.kit-site) with no network; every target sees it
	$(call check_vars,KIT)
	@$(PYRUN) -m provision.offline_kit install --kit $(call shq,$(KIT)) --site $(call shq,$(KIT_SITE_ABS))

# Every GPU measurement, in parts that each fit a short job (an interactive queue, a lent node): each
# part runs under a SIGTERM time limit (a run stopped there keeps its rows; fp8-train's --resume starts an
# interrupted run again), writes its own CSVs and reports, and a failure in one step does not cancel the
# next. `make gpu-suite` runs all six, in the order 1 2 5 3 4 6; `make gpu-suite PART=2` one of them.
# Times on one H100 80GB:
#   1  doctor, the GPU-only tests, tp-attention and allreduce-bench GPU targets       167 s (4215329); with
#      cp-attention and parallel-3d (1 GPU: baseline + activations; 8+ GPUs also        them: not timed yet
#      TP2 x PP2 x DP2)
#   2  fp8-train preset, first half: BF16 x3 seeds, torchao, the native layer, and     not run yet (the two
#      the FP8 bound; its run folder stays unpublished until part 5                    halves: 404 s for 4
#   5  fp8-train preset, second half (--resume): TE's te.Linear swap and its fused     runs at 68dffd9)
#      modules; publishes results/<preset> and writes the report
#   3  fsdp-scaling on the node's GPUs: 6 strategies x 2 modes, overlap profile       330 s (68dffd9)
#   4  fp8-train-bench: step cost and FP8 bound at hidden 1024, 2048, 4096            236 s (521bf75)
#   6  fp8-train-bench: hidden 8192, GEMM rates, monitoring cost; the report           not run yet
# DT_GIT_COMMIT names the commit where the tree has no .git (a copied checkout); results-archive
# then packs everything for the trip home.
PART ?= all
GPU_PART_LIMIT_S ?= 540
GPU_PARTS := $(if $(filter all,$(PART)),1 2 5 3 4 6,$(PART))
FP8_FIRST_HALF ?= bf16,fp8:torchao,fp8:native
.PHONY: gpu-suite results-archive results-import wheelhouse \
        gpu-suite-part-1 gpu-suite-part-2 gpu-suite-part-3 gpu-suite-part-4 gpu-suite-part-5 gpu-suite-part-6

gpu-suite: $(SETUP) ## on a GPU node, PART=1..6 or all: doctor+tests+tp+cp+allreduce+3d | fp8 | fsdp | bench | fp8 TE | bench
	$(call check_vars,GPU PART GPU_PART_LIMIT_S FP8_FIRST_HALF FSDP_GPU_ARGS P3D_ACT_NPROC CP $(LAUNCH_VARS) ARGS)
	$(call require_cuda,make allreduce-bench and the other labs' CPU targets)
	@failed=""; for p in $(GPU_PARTS); do \
	  echo "== gpu-suite part $$p (limit $(GPU_PART_LIMIT_S) s)"; start=$$(date +%s); \
	  timeout -s TERM -k 60 $(GPU_PART_LIMIT_S) $(MAKE) -k gpu-suite-part-$$p || failed="$$failed $$p"; \
	  echo "== gpu-suite part $$p: $$(( $$(date +%s) - start )) s"; done; \
	test -z "$$failed" || { echo "gpu-suite: part(s)$$failed had failures (see above); their rows are kept" >&2; exit 1; }

# Every step runs whatever the steps before it did (a failing GPU test must not cancel the
# measurements); the part fails at the end, naming the steps that failed.
gpu-suite-part-1:
	$(call check_vars,GPU P3D_ACT_NPROC CP $(LAUNCH_VARS) ARGS)
	$(call require_cuda)
	@failed=""; \
	$(MAKE) doctor || failed="$$failed doctor"; \
	$(PY) -m pytest -m gpu -rs || failed="$$failed gpu-tests"; \
	$(MAKE) tp-attention-gpu || failed="$$failed tp-attention"; \
	$(MAKE) cp-attention-gpu || failed="$$failed cp-attention"; \
	$(MAKE) allreduce-bench-gpu allreduce-bench-overhead || failed="$$failed allreduce-bench"; \
	$(MAKE) parallel-3d-gpu || failed="$$failed parallel-3d"; \
	test -z "$$failed" || { echo "gpu-suite part 1: failed:$$failed (the other steps ran)" >&2; exit 1; }

# The fp8-train preset compares precisions on one GPU (results/<preset>_ws1, the FP8 bound needs one
# process), and is more than one short job there: part 2 trains FP8_FIRST_HALF of its runs (--only),
# part 5 the rest (--resume), which publishes the whole set once every run is done.
gpu-suite-part-2:
	$(call check_vars,GPU FP8_FIRST_HALF $(LAUNCH_VARS))
	$(call require_cuda)
	$(MAKE) fp8-train-run NPROC=1 ARGS="--only $(FP8_FIRST_HALF)"

gpu-suite-part-5:
	$(call check_vars,GPU $(LAUNCH_VARS))
	$(call require_cuda)
	$(MAKE) fp8-train-run NPROC=1 ARGS="--resume"
	$(MAKE) fp8-train-report

gpu-suite-part-3:
	$(call check_vars,GPU FSDP_GPU_ARGS $(LAUNCH_VARS) ARGS)
	$(call require_cuda)
	$(MAKE) fsdp-scaling-gpu

# The bench's GPU run in two parts that each fit GPU_PART_LIMIT_S (one launch of all four sizes and the
# monitoring pass ran 8.5-10 min): each merges its rows into results/<preset>_ws1 as they are complete.
gpu-suite-part-4:
	$(call check_vars,GPU)
	$(call require_cuda)
	$(MAKE) fp8-train-bench ARGS="--hidden 1024,2048,4096 --parts step --promote merge"

gpu-suite-part-6:
	$(call check_vars,GPU)
	$(call require_cuda)
	$(MAKE) fp8-train-bench ARGS="--hidden 8192 --parts step,gemm,monitor --promote merge"
	$(MAKE) fp8-train-report

results-archive: $(SETUP) ## one .tar.gz of every lab's results, plots and reports (ARCHIVE_DIR=., ...), commit recorded
	$(call check_vars,ARCHIVE_DIR)
	@$(PYRUN) -m provision.archive create --out $(call shq,$(or $(ARCHIVE_DIR),.))

results-import: $(SETUP) ## ARCHIVE=file: unpack a results archive here, then regenerate every report
	$(call check_vars,ARCHIVE CALIBRATE ARGS)
	@$(PYRUN) -m provision.archive extract $(call shq,$(ARCHIVE))
	$(MAKE) reports

# The optional FP8 backends of fp8-train. torchao: the version requirements-fp8.txt pins (0.18 pairs with
# torch 2.13). TransformerEngine TE: the core wheel for this torch's CUDA major, and its PyTorch extension
# compiled here against this torch; its prerequisites (a CUDA torch, nvcc of the same major, cuDNN headers,
# g++) are checked first, each missing one told in one line (provision/te_install.py). Compiling takes a few
# minutes on 8+ cores (an estimate). TE= skips it. WHEELHOUSE=dir installs all of it with no network, from
# a folder `make wheelhouse` filled where there is internet (for this Python and the pinned torchao, unless
# WHEEL_PY/TORCHAO/TE_CUDA say otherwise).
WHEELHOUSE ?=
WHEEL_PY ?=
TORCHAO ?= $(shell sed -n 's/^torchao==//p' requirements-fp8.txt)
TE ?= 2.20.2
TE_CUDA ?=
TE_CUDA_ARCHS ?=
TE_FLAGS = --te $(TE) $(if $(WHEELHOUSE),--wheelhouse $(call shq,$(WHEELHOUSE))) \
  $(if $(TE_CUDA_ARCHS),--cuda-archs $(call shq,$(TE_CUDA_ARCHS)))
wheelhouse: $(SETUP) ## WHEELHOUSE=dir: download torchao, TransformerEngine (core + torch sdist) and their deps
	$(call check_vars,WHEELHOUSE TORCHAO TE WHEEL_PY TE_CUDA)
	$(PYRUN) -m provision.wheelhouse --dest $(call shq,$(WHEELHOUSE)) --torchao "$(TORCHAO)" --te "$(TE)" \
	  $(if $(WHEEL_PY),--python $(WHEEL_PY)) $(if $(TE_CUDA),--te-cuda $(TE_CUDA))

setup-fp8: $(SETUP) ## optional FP8 backends: torchao + TransformerEngine (TE= torchao alone; WHEELHOUSE=dir offline)
	$(call check_vars,TE WHEELHOUSE TE_CUDA_ARCHS)
	$(if $(TE),@$(PYRUN) -m provision.te_install check $(TE_FLAGS))
ifeq ($(WHEELHOUSE),)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements-fp8.txt
else
	$(PY) -m pip install --disable-pip-version-check -q --no-index --no-deps $(call shq,$(WHEELHOUSE))/*.whl
endif
	$(if $(TE),$(PYRUN) -m provision.te_install install $(TE_FLAGS))
	$(PYRUN) -m provision.doctor

clean-venv: ## remove the managed .venv
	rm -rf .venv
