# allreduce-bench (week 13): collective bandwidth sweep, alpha-beta fit, topology document, report.
# Runbook: distributed-training/allreduce-bench/README.md
ARB := $(LABS_DIR)/allreduce-bench
NCCL_TESTS ?= 0

.PHONY: allreduce-bench allreduce-bench-run allreduce-bench-report allreduce-bench-gpu allreduce-bench-nccl-tests \
        allreduce-bench-overhead allreduce-bench-2agents

allreduce-bench: $(SETUP) ## collective bandwidth sweep (busbw as nccl-tests, alpha-beta fit, TOPOLOGY.md) + report
	$(call check_vars,GPU NCCL_TESTS $(LAUNCH_VARS) ARGS)
	$(if $(filter 1,$(NCCL_TESTS)),@$(CHECK_ARGS) $(ARB)/nccl_tests.py --gpu $(GPU) $(ARGS))
	$(MAKE) allreduce-bench-run $(if $(filter 1,$(NCCL_TESTS)),allreduce-bench-nccl-tests) allreduce-bench-report

# The measurement: what slurm/lab.sbatch runs under srun on every node. Rank 0 writes
# runs/sweep_<hw>_ws<N>[_n<nodes>]/ and, once the sweep is complete and the preset's, publishes it to
# results/sweep_<hw>_ws<N>[_n<nodes>].csv and results/topology_<hw>.md.
allreduce-bench-run: $(SETUP) ## the sweep alone (runs/ -> results/ when complete); ARGS="--resume" continues one
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(TORCHRUN) $(ARB)/bench.py --gpu $(GPU) $(ARGS)

allreduce-bench-report: $(SETUP) ## REPORT.md, plots and TOPOLOGY.md from allreduce-bench/results alone
	$(PYRUN) $(ARB)/report.py

allreduce-bench-gpu: $(SETUP) ## the GPU sweep on every GPU of this node (1 GPU: algbw only), then the report
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(call require_cuda,make allreduce-bench)
	$(TORCHRUN) $(ARB)/bench.py --gpu $(GPU) $(ARGS)
	$(MAKE) allreduce-bench-report

allreduce-bench-nccl-tests: $(SETUP) ## nccl-tests' all_reduce_perf over the same sizes (on PATH; one node)
	$(call check_vars,GPU ARGS)
	$(PYRUN) $(ARB)/nccl_tests.py --gpu $(GPU) $(ARGS)

allreduce-bench-overhead: $(SETUP) ## benchmark: our timing vs a bare loop, sizes >= 1 MiB (target ratio >= 0.97)
	$(call check_vars,GPU $(LAUNCH_VARS) ARGS)
	$(TORCHRUN) $(ARB)/overhead.py --gpu $(GPU) $(ARGS)

# Multi-node on one CPU machine: two torchrun agents (2 ranks each) meet at a c10d rendezvous on
# 127.0.0.1, exactly as two real nodes would; the CSV records nnodes=2 (sweep_cpu_ws4_n2.csv). Its
# 4 MiB range is this target's preset, so a complete run replaces results/ (--promote replace). The
# port is checked first: a rendezvous on a port another program holds would wait silently.
ARB_2AGENTS_PORT ?= 29517
ARB_2AGENTS = $(MAKE) allreduce-bench-run GPU=cpu NNODES=2 NPROC=2 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=$(ARB_2AGENTS_PORT) RDZV_ID=arb-2agents ARGS="--max-bytes 4M --promote replace $(ARGS)"
# As a Slurm job does (slurm/lab.sbatch): the checks once, then both agents without checking again.
allreduce-bench-2agents: $(SETUP) ## CPU check of the multi-node path: 2 torchrun agents x 2 ranks on 127.0.0.1
	$(call check_vars,ARB_2AGENTS_PORT NODE_RANK ARGS)
	@$(PYRUN) -m common.launch check-port 127.0.0.1 $(ARB_2AGENTS_PORT)
	DT_LAUNCH_PHASE=check $(ARB_2AGENTS)
	DT_LAUNCH_PHASE=ranks $(ARB_2AGENTS) & agent1=$$!; DT_LAUNCH_PHASE=ranks $(ARB_2AGENTS) & agent2=$$!; \
	  wait $$agent1 && wait $$agent2
	$(PY) -c 'import csv, sys; rows = list(csv.DictReader(open(sys.argv[1]))); \
	  assert rows and {r["nnodes"] for r in rows} == {"2"}, "nnodes is not 2"; \
	  print(f"ok: {len(rows)} rows with nnodes=2 in", sys.argv[1])' $(ARB)/results/sweep_cpu_ws4_n2.csv

REPORT_TARGETS += allreduce-bench-report
