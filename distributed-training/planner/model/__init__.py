"""The cost model: what one plan costs, as pure functions of the model's shape, the cluster and the software stack.

Nothing here reads a measured row or a result file: measurements reach the model only as the figures of a
Cluster (planner.calibrate replaces them) or as the constants of calibration.py. The search, the evidence and
the guide stand on this room; it imports none of them (common/tests/test_layering.py holds this).

    shapes.py        the model: shape, parameter counts and FLOPs (PaLM, SC21 eq. 3), independent of any cluster
    degrees.py       one parallel configuration, or thousands as arrays: the record the memory and cost terms take
    cluster.py       the cluster as the model sees it: rates, memory, the network of common/collective_cost.py
    calibration.py   the compute model's constants: which are measured facts, which are fitted, the fitted values
    compute.py       compute time of one layer, op by op: GEMMs by shape, memory-bound kernels, attention, optimizer
    fp8_cost.py      what FP8 linears cost besides their GEMMs: the amax, scale and cast kernels of each backend
    floor.py         the framework's floor: host work per layer and micro-batch, counted as each stack issues it, and
                     its cost per unit (published, or measured with --calibrate)
    host.py          the host's side of a step: the floor's host time phase by phase, or a compiled step's launches
    memory.py        memory per GPU as the papers' stack holds it: ZeRO states, Korthikanti activations, buffers
    torch_memory.py  memory per GPU as PyTorch's stack (parallel-3d) holds it at the step's peak
    stacks.py        the software stack that runs a plan, chosen once and passed on as a record
    stages.py        pipeline stages: layers per stage, and the step of a pipeline of unequal stages
    cp_kinds.py      context parallelism three ways (ring, all-gather, Ulysses) priced per layer; the cheapest, and why
    costs.py         the step: compute, communication, overlap, the bubble, and host and GPU serialised per
                     synchronisation interval, for arrays of plans

Import the module you need (`from planner.model.costs import step_costs`); this file imports nothing.
"""
