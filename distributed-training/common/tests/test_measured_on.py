"""The generated "what was measured where" paragraph: GPU results listed first, a missing GPU or multi-GPU
result said so, nothing hand-written."""

import csv

from common.measured_on import paragraph, sources

COLUMNS = ["value", "hardware", "backend", "world_size", "nnodes", "torch_version", "git_commit", "timestamp_utc"]
H100 = ["1x NVIDIA H100 80GB HBM3", "nccl", 1, 1, "2.11.0+cu130", "42153292e609aaaa", "2026-11-22T23:35:00Z"]
CPU = ["Intel(R) Xeon(R) Processor (2 cores)", "gloo", 4, 1, "2.13.0+cpu", "eb31b29272de", "2026-11-20T10:00:00Z"]


def _write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows([[i, *r] for i, r in enumerate(rows)])


def test_gpu_first_then_cpu_then_models(tmp_path):
    _write(tmp_path / "bench_cpu_ws4.csv", [CPU, CPU])
    _write(tmp_path / "bench_h100_ws1.csv", [H100])
    _write(tmp_path / "projection.csv", [["projection (analytic model)", "model", "", "", "2.13.0+cpu", "abc", ""]])
    lines = paragraph(tmp_path, ["bench_*.csv", "projection.csv"], "make lab-gpu")
    items = [ln for ln in lines if ln.startswith("- ")]
    assert items[0] == ("- GPU: 1x NVIDIA H100 80GB HBM3 (nccl; 1 rank; torch 2.11.0+cu130; commit 42153292e609; "
                        "2026-11-22): `bench_h100_ws1.csv`")
    assert items[1].startswith("- CPU: Intel(R) Xeon(R) Processor (2 cores) (gloo; 4 ranks;")
    assert items[2].startswith("- model: projection (analytic model) (model; torch 2.13.0+cpu; commit abc)")
    assert items[3] == "- Multi-GPU: no result yet; every GPU row here is from a single GPU."


def test_no_gpu_result_names_the_command(tmp_path):
    _write(tmp_path / "sweep_cpu_ws4.csv", [CPU])
    items = [ln for ln in paragraph(tmp_path, ["sweep_*.csv"], "`make allreduce-bench-gpu`") if ln.startswith("- ")]
    assert items[-1] == "- GPU: no result is committed yet; `make allreduce-bench-gpu` on a GPU node makes them."


def test_world_sizes_nodes_and_commits_are_collected(tmp_path):
    eight = [*H100[:2], 8, 2, H100[4], "bbbbbbbbbbbbbbbb", "2026-12-01T00:00:00Z"]
    _write(tmp_path / "runs_h100.csv", [H100, eight])
    (s,) = sources(tmp_path, ["runs_*.csv"])
    assert (s.world_sizes, s.nnodes, s.commits, s.days) == ((1, 8), (1, 2), ("42153292e609", "bbbbbbbbbbbb"),
                                                            ("2026-11-22", "2026-12-01"))
    assert "1, 8 ranks; 1, 2 nodes" in s.describe() and "2026-11-22 to 2026-12-01" in s.describe()
    assert not [ln for ln in paragraph(tmp_path, ["runs_*.csv"], "x") if ln.startswith("- Multi")]
