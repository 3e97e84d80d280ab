"""Shared utilities for the labs, symlinked into each lab as `common`. Kept tiny and stable: what
labs import at run time and the shared formulas (installing and carrying results home: `provision`).

One concept per module:
    dist       the torchrun environment contract: DistInfo, distributed(), print0, fail, from_rank0,
               reduce_across_ranks
    config     frozen-dataclass configs -> argparse (defaults in --help); bad input exits 2 in one line
    timing     warm-up, barrier, CUDA events / perf_counter, max over ranks, raw samples kept, and
               nccl-tests' loop average
    results    tidy CSV with provenance columns, appended row by row, resumable (a cut last row repaired)
    runs       run folders: where a run writes, its lock, atomic publication into results/
    csvread    the checked CSV loader every report uses: one line per damaged file, exit 2
    failures   exit codes per cause; a rank's failure told once (torchelastic error files)
    launch     torchrun with checks before launch and the root-cause rank in one line
    plotting   one matplotlib style (Agg, PNG) with a provenance footer
    hardware   the GPU preset table (peak TFLOP/s, memory, NVLink), the one "preset needs CUDA" check, NVML
    collective_cost  what a collective costs: nccl-tests' bus factors, ring/tree time, half-bandwidth size
    collective_fit   the alpha-beta fit of a measured sweep, and the one rule that calibrates the cost model
    zero_memory      ZeRO / FSDP model-state bytes per rank
    markdown   the one markdown table writer of the reports and the guide
    model      the small GPT, its parameter count and FLOPs per token (MFU)
    data       the byte-level stdlib corpus and nanoGPT .bin files, deterministic batches
    testing    run a function on N forked gloo ranks (tests only)
    cuda_env   nvidia-smi's driver, the torch build that fits it, the one line when torch cannot use the GPUs
    fp8_names  the FP8 backends' names, shared by fp8-train's registry and the planner's cost records
    at_commit  run a module of an older commit's tree (git archive, python -m there): before/after studies

Import the submodule you need (`from common.dist import distributed`); this file imports
nothing so that `import common` stays cheap.
"""
