"""Bad input to every tp-attention command: one line, exit code 2, no file written, before any rank.

The sweep and the verify command are checked against the world they will get (DT_PLANNED_WORLD, what
common.launch tells their check pass); the report against damaged CSVs. In process, main(argv). The tests every
attention lab shares are testkit.sweeps'; this module gives them tp-attention's cases."""

from pathlib import Path

import pytest

import bench
import report
import verify
from testkit import no_gpu_mark
from testkit.sweeps import bad_input_tests

# The sweep's own, beside the refusals every sweep shares (testkit.sweeps.sweep_refusals).
SWEEP = [(3, ["--tp", "2"], "--tp 2 must divide the number of ranks (3"),
         (4, ["--d-models", "100"], "multiple of --head-dim 32 (n_heads = d_model / head_dim, MHA), got 100"),
         (4, ["--head-dim", "48", "--d-models", "128"], "multiple of --head-dim 48"),
         (4, ["--seq-lens", "6"], "seq_len (6) must be divisible by tp (4)")]

# The verify command, at the world its check pass is told.
VERIFY = [
    (4, ["--tp", "4", "--n-heads", "6", "--n-kv-heads", "6", "--d-model", "96"], "n_heads (6) must be divisible by tp"),
    (4, ["--tp", "4", "--n-heads", "8", "--n-kv-heads", "2"], "n_kv_heads (2) must be divisible by tp (4)"),
    (2, ["--tp", "2", "--sp", "--seq-len", "7"], "seq_len (7) must be divisible by tp (2) with sequence parallelism"),
    (2, ["--tp", "2", "--impl", "dtensor-naive", "--sp"], "has no sequence-parallel plan"),
    (2, ["--dtype", "float16"], "invalid choice"),
    (4, ["--tp", "3", "--n-heads", "6", "--n-kv-heads", "3", "--d-model", "96"], "--tp 3 must divide the number of "
                                                                                  "ranks (4)"),
    (2, ["--tp", "2", "--module", "mlp", "--fused-qkv"], "--fused-qkv applies to attention"),
    pytest.param(2, ["--tp", "2", "--gpu", "h100"], "needs a CUDA GPU and torch sees none", marks=no_gpu_mark()),
    (2, ["--tp", "2", "--gpu", "h900"], "unknown GPU preset 'h900'"),
]

# The report's damaged results, beside those every attention report refuses (testkit.sweeps.report_damages).
REPORT = [
    ("quote", lambda r: (r / "bench_cpu_ws4.csv").write_text('tp,"sp\n'), "bench_cpu_ws4.csv is not a readable CSV"),
    ("text-in-number", lambda r: (r / "bench_cpu_ws4.csv").write_text((r / "bench_cpu_ws4.csv").read_text().replace(
        "\n1,false,", "\nfour,false,", 1)), "column tp: 'four' is not an int"),
    ("foreign", lambda r: (r / "bench_cpu_ws8.csv").write_text("collective,size_bytes\nall_reduce,1024\n"),
     "lacks the column(s)")]

(tracked_files_unchanged, test_sweep, test_sweep_resume_with_nothing_to_resume, test_verify,
 test_report_refuses_damaged_results, test_report_arguments) = bad_input_tests(
    Path(bench.__file__).resolve().parent, "tp", bench.main, verify.main, report.main,
    sweep=SWEEP, verify=VERIFY, report=REPORT)
