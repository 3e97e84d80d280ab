"""Every make variable a target takes, checked in one place before the target starts anything.

A target's first recipe line is `$(call check_vars,VAR ...)` (the root Makefile), which runs

    python -m common.make_vars <target> NGPUS=<what make counted> VAR=value ...

with the value make holds for each variable the target takes (a GPU target: before its CUDA check). Each value is
checked against VARIABLES (its type and range), then against the others (`consistency`: NODE_RANK < NNODES, the
ranks a launch starts fit the node, TP x PP x DP x CP is the world of a parallel-3d launch). The first problem is
one line, `error: make <target>: VAR='value'; allowed: ...`, exit 2, before anything is launched or written; no
problem is silence and exit 0.

The flags inside ARGS belong to the runners: here ARGS need only be words a shell can split; each runner's frozen
Config (common/config.py) refuses its own flags in its check pass (DT_CHECK_ARGS=1, common/launch.py), which
make runs before anything launches.

Standard library only (no torch): it costs one Python start, about 30 ms.

    python -m common.make_vars --table       # every variable and what it allows (markdown)
"""

from __future__ import annotations

import os
import sys
from typing import Callable, NamedTuple

from .value_checks import (ARCHS, INT32_MAX, NAME, VERSION, Bad, archive, calibrate, folder, gpu, host, one_of,
                           pattern, seconds, site, whole, words, worlds)

BAD_INPUT = 2
RANKS_PER_CORE = 8  # gloo ranks per CPU core past which a CPU run only thrashes (the CI runs 4 per core)


# ---- the table: every variable a target takes -----------------------------------------------------------------


class Var(NamedTuple):
    check: Callable[[str], object]
    means: str  # what it is, for --table


VARIABLES: dict[str, Var] = {
    # hardware and launch (every torchrun target; common.launch checks the same again, torchrun's own way)
    "GPU": Var(gpu, "the GPU preset"),
    "NNODES": Var(whole(1, what="nodes, a whole number"), "nodes"),
    "NODE_RANK": Var(whole(0, what="this node's index, a whole number"), "this node's index (static rendezvous)"),
    "MASTER_ADDR": Var(host, "node 0's address"),
    "MASTER_PORT": Var(whole(1, 65535, "a TCP port"), "the rendezvous port"),
    "RDZV_ID": Var(pattern(r"[A-Za-z0-9._-]{1,128}", "letters, digits, '.', '_', '-' (at most 128)"),
                   "the c10d rendezvous id"),
    # the parallel degrees (checked before NPROC, which parallel-3d-run derives from them)
    "TP": Var(whole(1, what="a tensor-parallel degree, a whole number"), "tensor-parallel degree"),
    "PP": Var(whole(1, what="a pipeline-parallel degree, a whole number"), "pipeline-parallel degree"),
    "DP": Var(whole(0, what="a data-parallel degree, a whole number (0: from the world, several nodes)"),
              "data-parallel degree"),
    "CP": Var(whole(1, what="a context-parallel degree, a whole number"), "context-parallel degree"),
    "SP": Var(one_of("0", "1"), "sequence parallelism off/on (tp-verify)"),
    "NPROC": Var(whole(1, what="ranks per node, a whole number"), "ranks per node"),
    "P3D_ACT_NPROC": Var(whole(1, what="ranks of the activation study, a whole number"),
                         "ranks of parallel-3d's activation study"),
    "FSDP_WORLDS": Var(worlds, "fsdp-scaling's world sizes"),
    "ARGS": Var(words, "the runner's flags (each runner's --help)"),
    "FSDP_GPU_ARGS": Var(words, "fsdp-scaling-gpu's preset flags"),
    "FP8_WIDE_ARGS": Var(words, "fp8-train-wide's flags"),
    "FP8_DEMO_ARGS": Var(words, "fp8-train-demo's flags"),
    "FP8_FIRST_HALF": Var(pattern(rf"{NAME}(,{NAME})*", "fp8-train run names, comma-separated"),
                          "gpu-suite part 2's fp8-train runs"),
    "NCCL_TESTS": Var(one_of("0", "1"), "allreduce-bench: nccl-tests too"),
    "ARB_2AGENTS_PORT": Var(whole(1, 65535, "a TCP port"), "allreduce-bench-2agents' rendezvous port"),
    "CALIBRATE": Var(calibrate, "the planner guide's calibration CSVs"),
    "DT_SMI_TIMEOUT_S": Var(seconds, "how long nvidia-smi may take"),
    # a GPU slot, the offline kit, the archive
    "BUDGET_S": Var(seconds, "gpu-quick's slot"),
    "RUNS": Var(pattern(rf"{NAME}(,{NAME})*", "run or step names, comma-separated", empty_ok=True),
                "gpu-quick's steps"),
    "REHEARSAL": Var(one_of("", "0", "1"), "gpu-quick on CPU stand-ins"),
    "KIT": Var(folder(must_exist=True, required=False, what="an offline kit's folder (make offline-kit)"),
               "an offline kit"),
    "KIT_SITE": Var(site, "where a kit is installed (on PYTHONPATH)"),
    "ARCHIVE_DIR": Var(folder(must_exist=False, required=False), "where archives go"),
    "ARCHIVE": Var(archive, "a results archive to import"),
    "BUNDLE_MIB": Var(whole(1, what="MiB, a whole number"), "tree + kit, at most"),
    "KIT_PYTHON": Var(pattern(r"3\.[0-9]{1,2}", "a Python version, 3.N"), "the node's Python"),
    "KIT_TORCH": Var(pattern(rf"{VERSION}(\+[a-z0-9]+)?", "a torch version, e.g. 2.11.0+cu130"), "the node's torch"),
    "KIT_ARCHS": Var(pattern(rf"{ARCHS}([,;]{ARCHS})*", "CUDA architectures (compute capability x 10: 80, 90, "
                             "100), comma-separated"), "the node's GPU architectures"),
    "PART": Var(one_of("1", "2", "3", "4", "5", "6", "all"), "gpu-suite's part"),
    "GPU_PART_LIMIT_S": Var(seconds, "each gpu-suite part's limit"),
    # the FP8 backends
    "WHEELHOUSE": Var(folder(must_exist=False, required=False), "an offline wheel folder"),
    "WHEEL_PY": Var(pattern(r"3\.[0-9]{1,2}", "a Python version, 3.N", empty_ok=True), "the wheels' Python"),
    "TORCHAO": Var(pattern(VERSION, "a torchao version, e.g. 0.18.0", empty_ok=True), "torchao's version"),
    "TE": Var(pattern(VERSION, "a TransformerEngine version, e.g. 2.20.2", empty_ok=True),
              "TransformerEngine's version"),
    "TE_CUDA": Var(one_of("", "cu12", "cu13"), "TransformerEngine's CUDA major"),
    "TE_CUDA_ARCHS": Var(pattern(rf"{ARCHS}([,;]{ARCHS})*", "CUDA architectures (80, 90, 100), ';'-separated",
                                 empty_ok=True), "what TransformerEngine is built for"),
}

# A target's own reading of a variable, where it differs from the table's.
BY_TARGET: dict[tuple[str, str], Callable[[str], object]] = {
    ("offline-kit", "KIT"): folder(must_exist=False, what="the folder to fill with the kit (made if missing)"),
    ("offline-install", "KIT"): folder(must_exist=True, what="a kit's folder (make offline-kit fills one)"),
    ("wheelhouse", "WHEELHOUSE"): folder(must_exist=False, what="the folder to fill with wheels (made if missing)"),
    ("setup-fp8", "WHEELHOUSE"): folder(must_exist=True, required=False,
                                        what="a folder of wheels (make wheelhouse fills one)"),
}

CONTEXT = ("NGPUS",)  # what make counted, not the user's: read, never refused


# ---- the values together -------------------------------------------------------------------------------------

class Cap(NamedTuple):
    """How many ranks one node may start, and why."""
    ranks: int
    why: str

    @property
    def allowed(self) -> str:
        return f"at most {self.ranks} ({self.why})"


def rank_cap(values: dict) -> Cap:
    """Its GPUs for a GPU run; else RANKS_PER_CORE gloo ranks per CPU core."""
    ngpus = values.get("NGPUS", 0)
    if ngpus > 0 and values.get("GPU", "auto") != "cpu":
        return Cap(ngpus, f"this node's {ngpus} GPU{'s' if ngpus > 1 else ''}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Cap(RANKS_PER_CORE * cores, f"{RANKS_PER_CORE} gloo ranks per CPU core, {cores} here")


class Misfit(NamedTuple):
    """A value that does not fit the others: which, why, and what would."""
    name: str
    why: str
    allowed: str


def consistency(target: str, v: dict) -> Misfit | None:
    """The first value that does not fit the others (v: the values checked one by one), else None."""
    nnodes = v.get("NNODES", 1)
    if "NODE_RANK" in v and v["NODE_RANK"] >= nnodes:
        return Misfit("NODE_RANK", f"no node of NNODES={nnodes}", f"0..{nnodes - 1} (this node's index)")
    if target == "allreduce-bench-2agents" and "NODE_RANK" in v:
        return Misfit("NODE_RANK", "its two agents meet at a c10d rendezvous", "NODE_RANK unset")
    if v.get("DP") == 0 and nnodes == 1:
        return Misfit("DP", "one node (NNODES=1)", "1.. (DP=0, the world's rest, needs NNODES > 1)")
    cap = rank_cap(v)
    if target in ("parallel-3d", "parallel-3d-run") and all(d in v for d in ("TP", "PP", "DP", "CP")):
        misfit = parallel_3d(v, nnodes, cap)
        if misfit:
            return misfit
    # what starts ranks on this node: NPROC, the activation study's P3D_ACT_NPROC, a verify target's degree
    launched = {"tp-verify": "TP", "cp-verify": "CP"}.get(target, "NPROC")
    for name in dict.fromkeys(("NPROC", "P3D_ACT_NPROC", launched)):
        if v.get(name, 0) > cap.ranks:
            return Misfit(name, "more ranks than one node takes", cap.allowed)
    if nnodes == 1 and max(map(int, v.get("FSDP_WORLDS", "1").split())) > cap.ranks:
        return Misfit("FSDP_WORLDS", "a world larger than one node takes", cap.allowed)
    if nnodes * v.get(launched, 1) > INT32_MAX:
        return Misfit("NNODES", f"NNODES x {launched} = {nnodes * v[launched]} ranks",
                      f"a world of at most {INT32_MAX} ranks (torch.distributed's C int)")
    return None


def parallel_3d(v: dict, nnodes: int, cap: Cap) -> Misfit | None:
    """A parallel-3d launch: on one node exactly TP x PP x DP x CP ranks (NPROC follows, unless given); on several,
    degrees whose product is NNODES x NPROC (DP=0: the world's rest)."""
    product = v["TP"] * v["PP"] * max(v["DP"], 1) * v["CP"]
    shown = " x ".join(f"{d}={v[d]}" for d in ("TP", "PP", "DP", "CP"))
    if nnodes == 1 and product > cap.ranks:
        return Misfit("TP", f"{shown} is {product} ranks on one node", cap.allowed)
    if nnodes == 1 and v.get("NPROC", product) != product:
        return Misfit("NPROC", f"{shown} is {product} ranks on one node",
                      f"{product}, or NPROC unset (one node runs TP x PP x DP x CP ranks)")
    world = nnodes * v.get("NPROC", 1)
    if nnodes > 1 and "NPROC" in v and (world % product or (v["DP"] and product != world)):
        return Misfit("TP", f"{shown} does not fit NNODES={nnodes} x NPROC={v['NPROC']} = {world} ranks",
                      "degrees whose product is the world (or DP=0: the world's rest)")
    return None


# ---- the command --------------------------------------------------------------------------------------------

def problem(target: str, assignments: list[str]) -> str | None:
    """The one line for the first value that is not allowed, else None."""
    given: dict[str, str] = {}
    for a in assignments:
        name, eq, value = a.partition("=")
        if not eq or (name not in VARIABLES and name not in CONTEXT):
            return f"make_vars: {a!r} is not VAR=value for a known variable (common/make_vars.py VARIABLES)"
        given[name] = value
    values: dict[str, object] = {"NGPUS": int(given["NGPUS"]) if given.get("NGPUS", "").isdigit() else 0}
    for name in VARIABLES:  # the table's order: sources before what derives from them
        if name not in given:
            continue
        check = BY_TARGET.get((target, name), VARIABLES[name].check)
        try:
            values[name] = check(given[name])
        except Bad as e:
            return f"make {target}: {name}={given[name]!r}{f': {e}' if str(e) else ''}; allowed: {check.allowed}"
    misfit = consistency(target, values)
    if misfit:
        return f"make {target}: {misfit.name}={given[misfit.name]!r}: {misfit.why}; allowed: {misfit.allowed}"
    return None


def table() -> str:
    """Every variable, what it is and what it allows (markdown), and the targets' own readings."""
    rows = ["| variable | what | allowed |", "|---|---|---|"]
    rows += [f"| `{name}` | {var.means} | {var.check.allowed} |" for name, var in VARIABLES.items()]
    rows += [f"| `{name}` | in `make {target}` | {check.allowed} |" for (target, name), check in BY_TARGET.items()]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--table"]:
        print(table())
        return 0
    if not argv or "=" in argv[0]:
        print("usage: python -m common.make_vars TARGET [VAR=value ...]   (or --table)", file=sys.stderr)
        return BAD_INPUT
    line = problem(argv[0], argv[1:])
    if line:
        print(f"error: {line}", file=sys.stderr, flush=True)
        return BAD_INPUT
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
