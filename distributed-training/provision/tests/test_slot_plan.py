"""gpu-quick's run list, read from the committed results: what a GPU's set lacks in priority order, each step's
estimate from committed step times (or a guess, said so), fp8-train's plan read from its --list-runs (without a
GPU), a damaged FP8 record or one an older FP8 layer wrote found, and the dry run that shows it all without a GPU."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from provision import gpu_quick, slot_plan
from provision.committed import fp8_damage, read_set
from provision.slot_plan import GEMM, Guesses, PresetPlan, items_for, schedule

LABS = Path(__file__).resolve().parents[2]
TRAIN = LABS / "fp8-train" / "train.py"
RESULTS = LABS / "fp8-train" / "results"
G = Guesses(first_s=100, train_s=60, gemm_s=40, bench_s=150, start_s=30, weights_s=35)


@pytest.fixture(scope="module")
def gpu_plan() -> PresetPlan:
    return slot_plan.preset_plan(TRAIN, "h200")


def test_the_h200_dry_run_lists_what_its_committed_rows_lack_in_order(capsys):
    """Issue 43's done-when: bf16-s0, te-fused, native, bf16-s1, bf16-s2, in that order, with estimates."""
    assert gpu_quick.main(["--gpu", "h200", "--dry-run"]) == 0
    out = capsys.readouterr().out
    steps = [line.split()[1] for line in out.splitlines() if line[:3].strip().isdigit()]
    assert steps[:6] == ["doctor", "bf16-s0", "te-fused", "native", "bf16-s1", "bf16-s2"]
    assert "bf16-s0 (+ bound)" in out and "measured on no GPU yet" in out
    assert "measured: 200 steps of fp8-native-s0 in 232.6 s (h200_ws1 at cd873fd49f19)" in out  # 232.6: the CSV's sum
    assert "guess: fp8-te-s0's 200 steps" in out  # te-fused never ran: TE's own rows stand in, said so


def test_each_committed_run_is_kept_or_named_with_why_it_is_lacking(gpu_plan):
    h200 = {i.label: i for i in items_for(None, gpu_plan, RESULTS / "h200_ws1", 4096, G)}
    native = h200["native"].why
    assert "126 scales of exactly 0.0" in native and "underflow recorded for 18 of 144 module roles" in native
    assert not {"torchao", "te"} & set(h200)  # complete records (torchao's unexposed grad_output scale is nan)
    assert h200[GEMM].rank == 5 and h200["bf16-s1"].rank == 4
    assert "were written by fp8_linear 1 of the lab's FP8 layer; the code now is fp8_linear 2" in native
    h100 = items_for(None, gpu_plan._replace(gpu="h100"), RESULTS / "h100_ws1", 4096, G)
    assert [i.label for i in h100] == ["bf16-s0", "te-fused", "native", "bf16-s2", "te"]
    assert h100[0].why.startswith("no bound.csv in h100_ws1") \
        and h100[-1].why == "measured only in h100_ws1-te, h100_ws1-te-current"
    # whole rows, but the native layer before its record fix wrote them: measured again
    assert h100[2].why == ("its rows in h100_ws1 were written by fp8_linear 1 of the lab's FP8 layer; the code now "
                           "is fp8_linear 2") and h100[2].rank == 2


def test_fp8_trains_plan_is_read_from_its_list_runs_without_a_gpu(gpu_plan):
    """--list-runs answers for a GPU preset on this CPU-only machine: the preset's runs in training order, the
    bound after bf16-s0, the native layer's version; its backends unprobed, which it says."""
    r = subprocess.run([sys.executable, str(TRAIN), "--gpu", "h200", "--list-runs"], capture_output=True, text=True,
                       timeout=120)
    unchecked = r.stdout.splitlines()[-1].startswith("unchecked: no CUDA device here")
    assert r.returncode == 0 and unchecked != torch.cuda.is_available()
    assert gpu_plan == PresetPlan("h200", ("bf16-s0", "fp8-torchao-s0", "fp8-native-s0", "fp8-te-s0",
                                           "fp8-te-fused-s0", "bf16-s1", "bf16-s2"), 0, True,
                                  (("fp8-native-s0", 2),))
    cpu = slot_plan.preset_plan(TRAIN, "cpu")  # probed here: the CPU preset's backends run on this machine
    assert cpu.runs == ("bf16-s0", "fp8-emulated-s0", "fp8-native-s0", "bf16-s1") and (cpu.seed, cpu.bound) == (0, False)
    assert cpu.layers == (("fp8-emulated-s0", 2), ("fp8-native-s0", 2))


def _row(run, precision, step, t, when, commit="abc"):
    return dict(run=run, precision=precision, step=step, step_time_s=t, timestamp_utc=when, hardware="1x GPU",
                git_commit=commit)


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def test_ranks_estimates_and_guesses_on_a_made_up_gpu(tmp_path):
    """bf16-s0 complete (2 steps of 1.5 s, then 20 s of gap to torchao's start); torchao complete but its scale
    record lost a layer; native has 1 of 2 steps; te only in a sibling set; te-fused and bf16-s1 nowhere."""
    plan = PresetPlan("h100", ("bf16-s0", "fp8-torchao-s0", "fp8-native-s0", "fp8-te-s0", "fp8-te-fused-s0",
                               "bf16-s1"), 0, True)
    s = tmp_path / "results" / "h100_ws1"
    _write(s / "steps.csv", [_row("bf16-s0", "bf16", 0, 1.5, "2026-01-01T00:00:01Z"),
                             _row("bf16-s0", "bf16", 1, 1.5, "2026-01-01T00:00:03Z"),
                             _row("fp8-torchao-s0", "fp8", 0, 2.0, "2026-01-01T00:00:25Z"),
                             _row("fp8-torchao-s0", "fp8", 1, 2.0, "2026-01-01T00:00:27Z"),
                             _row("fp8-native-s0", "fp8", 0, 4.0, "2026-01-01T00:01:00Z")])
    (s / "steps.config.json").write_text('{"steps": 2}')
    fp8 = [dict(run="fp8-torchao-s0", step=st, module=m, role="input", scale=sc, underflow_frac="")
           for st, m, sc in [(0, "l0", 1.0), (0, "l1", 2.0), (10, "l0", 1.0)]]
    _write(s / "fp8.csv", fp8)
    _write(tmp_path / "results" / "h100_ws1-te" / "steps.csv",
           [_row("fp8-te-s0", "fp8", 0, 3.0, "2026-01-01T00:00:03Z")])
    got = items_for(None, plan, s, 64, G)
    assert [(i.label, i.rank) for i in got] == [("bf16-s0", 0), ("te-fused", 1), ("torchao", 2), ("native", 2),
                                                ("bf16-s1", 4), (GEMM, 5), ("bench", 6), ("te", 7)]
    by = {i.label: i for i in got}
    assert by["torchao"].why.endswith("fp8.csv: step 10 records 1 of 2 module roles")
    assert by["native"].why.endswith("steps.csv holds 1 of its 2 steps")
    # gap: torchao starts at 00:00:23 (its first row less 2 s), bf16-s0 ended at 00:00:03: 20 s
    assert by["bf16-s0"].seconds == pytest.approx(3.0 + 20 + G.weights_s) and by["bf16-s0"].basis.startswith("measured")
    assert by["te-fused"].seconds == pytest.approx(3.0 + 20) and by["te-fused"].guessed  # te's rows stand in
    assert by["te"].seconds == pytest.approx(3.0 + 20) and not by["te"].guessed  # its own rows, in the sibling
    assert by["bf16-s1"].seconds == pytest.approx(3.0 + 20) and "bf16-s0's 2 steps" in by["bf16-s1"].basis
    bare = items_for(["bf16-s1", "native"], plan, tmp_path / "results" / "h100_ws2", 64, G)
    assert [(i.label, i.seconds, i.guessed) for i in bare] == [("bf16-s1", 100, True), ("native", 60, True)]


def test_a_record_that_lost_layers_is_damaged_and_an_unexposed_scale_is_not():
    def rows(run, cells):
        return [dict(run=run, step=str(st), module=m, role="input", scale=sc, underflow_frac=uf)
                for st, m, sc, uf in cells]
    clean = rows("a", [(0, "l0", "2.0", "0.1"), (0, "l1", "nan", "0.0"), (10, "l0", "3.0", ""), (10, "l1", "", "")])
    zero = rows("b", [(0, "l0", "0.0", ""), (0, "l1", "inf", ""), (10, "l0", "1.0", ""), (10, "l1", "1.0", "")])
    partial = rows("c", [(0, "l0", "1.0", "0.2"), (0, "l1", "1.0", ""), (10, "l0", "1.0", ""), (10, "l1", "1.0", "")])
    assert fp8_damage(clean + zero + partial) == {
        "b": "fp8.csv: 2 scales of exactly 0.0 or infinite (first at step 0)",
        "c": "fp8.csv: underflow recorded for 1 of 2 module roles at step 0 (1 recorded steps alike)"}


def test_runs_takes_labels_or_run_names_in_the_callers_order_and_refuses_the_rest(tmp_path):
    plan = PresetPlan("h100", ("bf16-s0", "fp8-native-s0", "bf16-s1"), 0, False)
    got = items_for(["gemm", "fp8-native-s0", "bf16-s0"], plan, tmp_path / "h100_ws1", 64, G)
    assert [(i.label, i.run) for i in got] == [("gemm", ""), ("native", "fp8-native-s0"), ("bf16-s0", "bf16-s0")]
    assert [i.seconds for i in got] == [40, 100, 60]  # the first training run gets the first run's guess
    with pytest.raises(ValueError, match=r"^--runs: te is not a step of the h100 preset; allowed: bf16-s0, native, "):
        items_for(["te"], plan, tmp_path / "h100_ws1", 64, G)
    with pytest.raises(ValueError, match="names a step twice"):
        items_for(["native", "fp8-native-s0"], plan, tmp_path / "h100_ws1", 64, G)


def test_a_step_that_does_not_fit_is_skipped_and_a_smaller_one_after_it_runs():
    items = [slot_plan.Item(n, n, 0, "", s, "guess") for n, s in [("a", 50), ("big", 80), ("c", 30)]]
    assert [(i.label, end) for i, end, _ in schedule(items, 100)] == [("a", 50), ("big", None), ("c", 80)]


def test_a_damaged_committed_csv_is_one_line(tmp_path, capsys):
    s = tmp_path / "h200_ws1"
    s.mkdir()
    (s / "steps.csv").write_text("run,precision,step\nbf16-s0,bf16,0\nbf16-s0,bf")  # cut mid-row
    assert gpu_quick.main(["--gpu", "h200", "--dry-run", "--results", str(s)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpu-quick: error: ") and "steps.csv" in err[0]
    assert read_set(tmp_path / "absent").runs == {}


@pytest.mark.parametrize("rows, needle", [
    ("bf16-s0,bf16,0,1.5\nbf16-s0,bf16,0,9.5\n", "line 3 repeats the key (run=bf16-s0, step=0) of line 2 with another "
                                                 "step_time_s"),
    ("bf16-s0,bf16,0,-1.5\n", "line 2, column step_time_s: -1.5 is negative"),
], ids=["conflicting-key", "negative-time"])
def test_a_committed_csv_that_would_skew_the_estimates_is_one_line(tmp_path, capsys, rows, needle):
    """A second step-0 row of another time, or a negative one, would shift a step's estimate: refused."""
    s = tmp_path / "h200_ws1"
    s.mkdir()
    (s / "steps.csv").write_text("run,precision,step,step_time_s,timestamp_utc,hardware,git_commit\n" + "".join(
        line + ",2026-01-01T00:00:01Z,1x GPU,abc\n" for line in rows.splitlines()))
    assert gpu_quick.main(["--gpu", "h200", "--dry-run", "--results", str(s)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
