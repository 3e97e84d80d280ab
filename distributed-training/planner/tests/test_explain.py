"""Every GPU row the labs committed, beside the planner's prediction: found by pattern, priced from its own columns
by one function, the issue's accuracy targets on the rows the model claims, and the sections the reports embed."""

import shutil
from functools import lru_cache
from pathlib import Path

import pandas as pd
import pytest

import explain_rows as explain
import gemm_rates
import own_runs
import vs_measured
from calibration import FITTED

LABS = own_runs.LABS
H100 = "1x NVIDIA H100 80GB HBM3"


@lru_cache(maxsize=None)
def committed(lab: str) -> tuple:
    return tuple(explain.compare(own_runs.runs(lab), explain.measured_calibration()))


def test_every_committed_gpu_row_is_found_and_priced():
    kinds = {}
    for lab in own_runs.READERS:
        for c in committed(lab):
            kinds[lab, c.run.kind] = kinds.get((lab, c.run.kind), 0) + 1
            assert c.run.gpu == "h100" and c.run.measured > 0
            if c.run.kind == "collective" and c.run.layout.world == 1:
                assert c.predicted.value == 0 and "no byte crosses a link" in c.predicted.note
            else:
                assert c.predicted.value > 0 and c.error is not None, c.run.name
    # What the repository holds today (rows are only ever added): fp8-train's preset runs and its step and GEMM
    # benchmarks, fsdp-scaling's one-GPU strategies, tp-attention's blocks, allreduce-bench's one-GPU sweep.
    assert kinds["fp8-train", "step"] >= 19 and kinds["fp8-train", "gemm"] >= 9
    assert kinds["fsdp-scaling", "step"] >= 12 and kinds["tp-attention", "block"] >= 5
    assert kinds["allreduce-bench", "collective"] >= 100
    assert not own_runs.runs("parallel-3d")  # CPU rows only: never compared with a GPU model


def test_rows_are_found_by_pattern_whatever_their_file_names(tmp_path):
    # Results named by world size (issue 25b) or by hardware alone (before it) read the same.
    res = LABS / "fsdp-scaling" / "results"
    shutil.copy(res / "scaling_h100_ws1.csv", tmp_path / "scaling_h100.csv")
    (tmp_path / "h100").mkdir()
    for name in ("steps.csv", "steps.config.json"):
        shutil.copy(LABS / "fp8-train" / "results" / "h100_ws1" / name, tmp_path / "h100" / name)
    fsdp = own_runs.runs("fsdp-scaling", tmp_path)
    assert [r.measured for r in fsdp] == [r.measured for r in own_runs.runs("fsdp-scaling")]
    assert fsdp[0].file == f"{tmp_path.name}/scaling_h100.csv"
    fp8 = own_runs.fp8_train_steps(tmp_path)
    assert [r.name.split("/")[1] for r in fp8] == ["bf16-s0", "bf16-s1", "fp8-torchao-s0", "fp8-native-s0"]


def _bench_rows(tmp_path, rows):
    base = {"n_layers": 2, "precision": "fp8", "compiled": True, "tokens_per_step": 8192, "step_time_s": 0.01,
            "step_time_min_s": 0.01, "hardware": H100, "timestamp_utc": "2027-01-01T00:00:00Z"}
    folder = tmp_path / "h100"
    folder.mkdir(exist_ok=True)
    pd.DataFrame([{**base, **r} for r in rows]).to_csv(folder / "bench_step.csv", index=False)
    return {r.name.split(" ", 2)[2]: explain.predict(r).value for r in own_runs.fp8_train_bench(tmp_path)}


def test_each_rows_own_columns_drive_its_prediction(tmp_path):
    # The same shape under different stacks: each difference in a row's columns is a difference the model prices.
    rows = [dict(d_model=d, run=name, precision=prec, precision_backend=be, compiled=comp)
            for d in (1024, 8192)
            for name, prec, be, comp in (("bf16", "bf16", "torch", True), ("ao", "fp8", "torchao", True),
                                         ("ao-eager", "fp8", "torchao", False), ("te", "fp8", "te", False),
                                         ("te-fused", "fp8", "te-fused", False))]
    p = _bench_rows(tmp_path, rows)
    for d in (1024, 8192):
        assert p[f"d{d} te-fused"] > p[f"d{d} te"] and p[f"d{d} ao"] > p[f"d{d} ao-eager"]
    assert p["d8192 ao"] > p["d8192 bf16"] and p["d1024 ao"] < p["d1024 bf16"]  # FP8 pays only at scale


def test_rows_measured_before_the_native_layers_graph_fix_are_priced_as_what_ran():
    native = [c for c in committed("fp8-train") if c.run.stack.backend == "native"]
    assert native and all(c.run.stack.fp8_eager for c in native)  # measured before b992edb
    assert not own_runs.fp8_eager("native", True, "2027-01-01T00:00:00Z")  # a run of today's code
    assert not own_runs.fp8_eager("torchao", True, "2026-01-01T00:00:00Z")  # no such fix for torchao
    assert not own_runs.fp8_eager("native", False, "2026-01-01T00:00:00Z")  # eager anyway


def _by(lab: str, name: str):
    (c,) = [c for c in committed(lab) if c.run.name == name]
    return c


@pytest.mark.parametrize("name, bound", [
    ("h100_ws1/bf16-s0", 0.05), ("h100_ws1/bf16-s1", 0.05), ("h100_ws1-te/bf16-s0", 0.05),
    ("h100_ws1 bench d4096 bf16-s0", 0.05), ("h100_ws1/fp8-torchao-s0", 0.08), ("h100_ws1-te/fp8-te-s0", 0.08),
    ("h100_ws1-te-current/fp8-te-s0", 0.08), ("h100_ws1 bench d4096 fp8-torchao-s0", 0.08),
    ("h100_ws1 bench d4096 fp8-te-s0", 0.08), ("h100_ws1 bench d8192 fp8-te-s0", 0.08)])
def test_issue_targets_on_the_fp8_preset_regime(name, bound):
    # Issue 24: BF16 rows within 5%, FP8 rows within 8% of measured tokens/s, at the preset's hidden 4096 and the
    # benchmark's 4096 (and TE at 8192). The rows it misses are named in the guide with the reason.
    c = _by("fp8-train", name)
    assert abs(c.error) <= bound, (name, c.error)


@pytest.mark.parametrize("run", ["h100_ws1/fp8-torchao-s0", "h100_ws1-te/fp8-te-s0",
                                 "h100_ws1 bench d4096 fp8-torchao-s0", "h100_ws1 bench d4096 fp8-te-s0",
                                 "h100_ws1 bench d8192 fp8-te-s0"])
def test_fp8_over_bf16_ratio_within_five_percent(run):
    (r,) = [r for r in vs_measured.fp8_ratios(list(committed("fp8-train"))) if r.run == run]
    assert r.measured > 1.1 and abs(r.error) <= 0.05, r


def test_sustained_matmul_rate_from_gemm_rows(tmp_path):
    # The committed H100 benchmark: its 8192^3 bf16 GEMM (651 TFLOP/s) is the slowest against the burst model.
    rows = gemm_rates.gpu_rows([str(LABS / "fp8-train" / "results" / "h100_ws1" / "bench_gemm.csv")])["h100"]
    s = gemm_rates.sustained("h100", rows, FITTED)
    assert s.fraction == pytest.approx(0.734, abs=0.005) and s.op == "bf16 torch.mm 8192x8192x8192" and s.rows == 9
    # By hand: GEMMs that took 1/0.8 and 1/0.9 of the model's burst time -> 0.8, whatever the precision.
    m = k = n = 4096
    fake = [{"op": op, "m": m, "k": k, "n": n, "hardware": H100,
             "time_us": gemm_rates.burst_seconds("h100", prec, m, k, n, FITTED) / f * 1e6}
            for op, prec, f in (("bf16 torch.mm", "bf16", 0.9), ("fp8 torch._scaled_mm", "fp8", 0.8))]
    assert gemm_rates.sustained("h100", fake, FITTED).fraction == pytest.approx(0.8)
    consts, note = gemm_rates.calibrated_constants("h100", FITTED, fake)
    assert consts.sustained_hopper == 0.8 and consts.sustained_ampere == FITTED.sustained_ampere and "0.800" in note


@pytest.mark.parametrize("lab", sorted(own_runs.READERS))
def test_each_lab_report_section(lab, tmp_path):
    # The section every report embeds: a table row per GPU row (collectives at one rank as one sentence), or a
    # note that none exists yet.
    text = vs_measured.section(lab)
    runs = [r for r in own_runs.runs(lab) if r.kind != "collective"]
    assert text.startswith("## Predicted vs measured")
    for r in runs:
        assert f"| {r.name} | {r.file} |" in text
    if lab == "allreduce-bench":
        assert "At one rank no byte crosses a link" in text
    empty = vs_measured.section(lab, tmp_path)
    assert "No GPU rows in this lab's results yet" in empty


def test_the_measured_fp8_bound_has_a_prediction(tmp_path):
    # bound.csv (fp8-train, the lead's GPU session): the BF16 step with its GEMMs' time replaced by FP8 GEMMs'.
    # The model's bound grows with the GEMMs' share of the step, which grows with the hidden size.
    (tmp_path / "h100").mkdir()
    rows = [{"d_model": d, "n_layers": 2, "seq_len": 1024, "tokens_per_step": 8192, "gemm_share": 0.7,
             "bound_speedup": 1.3, "hardware": H100} for d in (1024, 4096, 8192)]
    pd.DataFrame(rows).to_csv(tmp_path / "h100" / "bound.csv", index=False)
    runs = own_runs.fp8_train_bound(tmp_path)
    preds = [explain.predict(r).value for r in runs]
    assert 1.0 < preds[0] < preds[1] < preds[2] < 2.0
    assert "GEMM share of the BF16 step: predicted" in explain.predict(runs[0]).note
    assert "| h100 FP8 bound d8192 |" in vs_measured.section("fp8-train", tmp_path)
