"""One answer (issue 29 part 4): the guide's scenarios through the CLI give the guide's plans, and the rules the guide
states hold for every answer: the CLI, the guide's tables, and parallel-3d's at-scale studies (which run `make plan`'s
choice). In process; a handful of searches."""

import csv
import json
from pathlib import Path

import pytest

from planner import plan
from planner.guide import experiments
from planner.model.stacks import PYTORCH
from planner.search.choose import CP_MIN_SEQ
from planner.search.records import Plan
from planner.search.search import default_batch

AT_SCALE = Path(plan.__file__).resolve().parent.parent / "parallel-3d" / "results" / "at_scale.csv"
KEYS = ("tp", "pp", "dp", "cp", "zero", "microbatch", "interleave", "recompute", "global_batch")


def cli(capsys, *argv) -> dict:
    assert plan.main([*argv, "--json", "--top", "1"]) == 0
    return json.loads(capsys.readouterr().out)


def same(printed: dict, plan: Plan) -> bool:
    """The CLI's --json plan and a Plan agree on every degree, knob and batch."""
    return all(printed[k] == getattr(plan, k) for k in KEYS)


def rules_hold(best: dict, seq: int, domain: int = 8):
    assert best["tp"] <= domain, f"TP {best['tp']} leaves the {domain}-GPU NVLink domain"
    assert best["cp"] == 1 or seq >= CP_MIN_SEQ, f"CP {best['cp']} at {seq} tokens per sequence"


@pytest.mark.parametrize("model, gpus", [("8B", 64), ("70B", 512), ("405B", 4096), ("1T", 16384)])
def test_the_guides_matrix_through_the_cli(model, gpus, capsys):
    """The main matrix (megatron stack) and the pytorch stack's matrix: the CLI with the same stack, no other flag,
    prints the guide's plan; its default batch is the guide's batch rule (4M tokens at 4096 GPUs)."""
    for stack, argv in ((experiments.MEGATRON, ["--stack", "megatron"]), (PYTORCH, [])):
        guide = experiments.plan(model, gpus, stack=stack).best
        out = cli(capsys, "--params", model, "--gpus", str(gpus), *argv)
        assert out["workload"]["global_batch_sequences"] == default_batch(gpus, experiments.SEQ)
        assert same(out["best"], guide), (stack.name, out["best"], guide)
        rules_hold(out["best"], experiments.SEQ)


def test_long_sequences_through_the_cli(capsys):
    """Section 3.6's long-sequence scenario as its command prints it: a runnable parallel-3d command with --cp."""
    seq = 131072
    out = cli(capsys, "--params", "8B", "--gpus", "64", "--seq", str(seq), "--global-batch", str(2**22 // seq))
    guide = experiments.plan("8B", 64, seq=seq, tokens=2**22, stack=PYTORCH).best
    assert same(out["best"], guide) and out["best"]["cp"] > 1
    assert f"--cp={out['best']['cp']}" in out["run"]["torchrun"] and "runs this plan as priced" in \
        out["stack"]["headline"]


def test_parallel_3d_runs_the_clis_answer(capsys):
    """The at-scale studies (section 7) ran exactly what `make plan ARGS="--params M --gpus N"` prints now."""
    rows = [r for r in csv.DictReader(open(AT_SCALE, newline="")) if r["role"] == "first"]
    assert {r["study"] for r in rows} == {"8B@64", "70B@512", "405B@4096"}
    for r in rows:
        model, gpus = r["study"].split("@")
        best = cli(capsys, "--params", model, "--gpus", gpus)["best"]
        zero = 3 if best["zero"] == 3 else 2
        assert (int(r["tp"]), int(r["pp"]), int(r["dp"]), int(r["run_zero"]), int(r["microbatch"]),
                int(r["num_microbatches"]), int(r["interleave"])) == \
            (best["tp"], best["pp"], best["dp"], zero, best["microbatch"], best["num_microbatches"],
             best["interleave"]), r["study"]
        rules_hold(best, int(r["seq"]))


def test_a_megatron_plan_prints_no_command_and_says_so_first(capsys):
    assert plan.main(["--params", "8B", "--gpus", "64", "--stack", "megatron", "--top", "1"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("stack    megatron") and "no runner" in first and "torchrun" not in out
    assert plan.main(["--params", "8B", "--gpus", "64", "--precision", "fp8", "--top", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "does NOT run this plan as priced" in first and "bf16, not fp8" in first


def test_the_cli_gives_the_reports_number(capsys):
    """Issue 29's example: fp8-train's TE runs, priced by the CLI from their CSV (compile state, the Adam its trainer
    runs, counted kernels), give the report's predicted column (explain_rows.compare), not a second prediction."""
    from planner.evidence import explain_rows, own_runs

    labs = Path(plan.__file__).resolve().parent.parent
    for folder in ("h100_ws1-te", "h100_ws1-te-current"):
        path = labs / "fp8-train" / "results" / folder / "steps.csv"
        out = cli(capsys, "--from-run", str(path), "--run", "fp8-te-s0")
        run = next(r for r in own_runs.runs("fp8-train") if r.name == f"{folder}/fp8-te-s0")
        report = explain_rows.compare([run], explain_rows.measured_calibration())[0]
        assert out["predicted"] == report.predicted.value and out["measured"] == run.measured
        assert out["software"]["optimizer"] == "fused" and out["software"]["backend"] == "te"
