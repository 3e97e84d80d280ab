"""Bad input: one line on stderr, exit code 2, nothing written, before any process group (the project contract),
for the verify command, the runner's sweep, and the report's damaged results. The tests every attention lab shares
are testkit.sweeps'; this module gives them cp-attention's cases."""

from pathlib import Path

import pytest

import bench
import report
import verify
from testkit import (expect_bad_input, keep_tracked_files, no_gpu_mark, nothing_to_resume_test, refusal_test,
                     report_refusal_test, sweep_refusals)

LAB = Path(bench.__file__).resolve().parent
tracked_files_unchanged = keep_tracked_files(LAB)

test_sweep = refusal_test(bench.main, LAB, sweep_refusals("cp", [
    (4, ["--seq-lens", "100"], "the sequence (100) must divide into 2 x CP = 8 equal chunks"),
    (4, ["--heads", "6/4"], "n_heads (6) must be a positive multiple of n_kv_heads (4)"),
    (4, ["--heads", "8"], "--heads takes QUERY/KV pairs of positive counts (e.g. 8/8,8/2), got '8'")]))
test_sweep_resume_with_nothing_to_resume = nothing_to_resume_test(bench.main)

# The verify command, at the world its check pass is told.
test_verify = refusal_test(verify.main, LAB, [
    (2, ["--cp", "2", "--seq-len", "30"], "the sequence (30) must divide into 2 x CP = 4 equal chunks"),
    (4, ["--cp", "3", "--seq-len", "36"], "--cp 3 must divide the number of ranks (4)"),
    (2, ["--cp", "2", "--n-kv-heads", "3"], "n_heads (8) must be a positive multiple of n_kv_heads (3)"),
    (2, ["--cp", "2", "--batch", "0"], "--batch must be positive"),
    (2, ["--cp", "2", "--impl", "ours"], "invalid choice: 'ours'"),
    (4, ["--cp", "4", "--impl", "ulysses"], "n_heads (8) and n_kv_heads (2) must both divide by 4"),
    (2, ["--cp", "2", "--documents", "30,34"], "every document must divide into 2 x CP = 4 equal chunks"),
    (2, ["--cp", "2", "--documents", "32,16"], "summing to the sequence (64)"),
    (2, ["--cp", "2", "--impl", "torch-allgather", "--documents", "32,32"], "takes no attention mask"),
    (2, ["--cp", "2", "--kernel", "flash"], "invalid choice: 'flash'"),
    pytest.param(2, ["--cp", "2", "--gpu", "h100"], "needs a CUDA GPU and torch sees none", marks=no_gpu_mark())])

test_report_refuses_damaged_results = report_refusal_test(report.main, LAB, [
    ("quote", lambda r: (r / "bench_cpu_ws4.csv").write_text('impl,"cp\n'), "bench_cpu_ws4.csv is not a readable CSV"),
    ("text-in-number", lambda r: (r / "bench_cpu_ws4.csv").write_text((r / "bench_cpu_ws4.csv").read_text().replace(
        "\nring,1,", "\nring,one,", 1)), "column cp: 'one' is not an int")])


def test_report_arguments(capsys):
    expect_bad_input(lambda: report.main(["--bogus"]), "unrecognized arguments: --bogus", capsys, watch=[LAB])
