"""Shared utilities for the labs, symlinked into each lab as `common`. Kept tiny and stable: what
labs import at run time and the shared formulas (installing and carrying results home: `provision`;
test support: `testkit`, beside this package).

One concept per module:
    dist              the torchrun environment contract: DistInfo, distributed(), print0, fail, from_rank0
    config            frozen-dataclass configs -> argparse, presets as functions; bad input exits 2 in one line
    runner            the spine of every runner: the run flags (RunFlags), RunPlan, check_before_launch, open_run
    runs              run folders: where a run writes, its lock, atomic publication into results/
    results           tidy CSV with provenance columns, appended row by row, resumable (a cut last row repaired)
    csvread           the checked CSV loader every report uses: one line per damaged file, exit 2
    failures          exit codes per cause; a rank's failure told once (torchelastic error files); paths in messages
    launch            torchrun with checks before launch and the root-cause rank in one line
    make_vars         every make variable a target takes, checked before it starts (one line, exit 2; no torch)
    value_checks      what a make variable may hold: a checker per kind of value (make_vars' table)
    timing            warm-up, CUDA events / perf_counter, max over ranks, raw samples, nccl-tests' loop average
    hardware          the GPU preset table (peak TFLOP/s, memory, NVLink), the one "preset needs CUDA" check, NVML
    cuda_env          nvidia-smi's driver, the torch build that fits it, the one line when torch cannot use the GPUs
    plotting          one matplotlib style (Agg, PNG) with a provenance footer
    markdown          the one markdown table writer of the reports and the guide
    findings          a report's opening answer: the "What we found" block, sentences picked from a template
    measured_on       the paragraph near the top of every report: what was measured where, from its CSVs
    readme_findings   README.md's "What the labs found", quoted from each report's opening lines
    model             the small GPT, its parameter count and FLOPs per token (MFU)
    data              the byte-level stdlib corpus and nanoGPT .bin files, deterministic batches
    fsdp              FSDP2 (fully_shard) on the common GPT, one unit per block, as torchtitan does
    collective_cost   what a collective costs: nccl-tests' bus factors, ring/tree time, half-bandwidth size
    collective_fit    the alpha-beta fit of a measured sweep, and the one rule that calibrates the cost model
    collective_calls  the collectives a piece of code issues, counted at the dispatcher (CollectiveCalls)
    zero_memory       ZeRO / FSDP model-state bytes per rank
    attention_block   one attention block with its log-sum-exp, its backward, the merge: what every CP step needs
    cp_layout         which tokens each CP rank holds (per-document head-tail), which chunk pairs attend
    cp_checks         the CP attentions' input checks, local and across ranks, before any collective
    cp_bytes          the bytes each CP design sends per rank: one formula each, for the labs and the planner
    ring_attention    ring attention (context parallelism): K/V passed around the ring, hand-rolled
    allgather_attention  all-gather CP (Llama 3): K/V gathered, dK/dV reduce-scattered, hand-rolled
    ulysses_attention    Ulysses CP (DeepSpeed): two all-to-alls over heads per pass, hand-rolled
    cp_attention      the three CP designs behind one call, by name
    attention_flags   an attention lab's flags (SweepFlags, VerifyFlags), torch-free
    attention_sweep   an attention lab's runner, verify command and interleaved timing (tp- and cp-attention)
    fp8_names         the FP8 backends' names, shared by fp8-train's registry and the planner's cost records
    fp8_record        fp8-train's FP8 record judged from fp8.csv: damaged or whole, which layer version wrote it
    at_commit         run a module of an older commit's tree (git archive, python -m there): before/after studies

Import the submodule you need (`from common.dist import distributed`); this file imports
nothing so that `import common` stays cheap.
"""
