"""Figures: PNG written, provenance footer text built from the CSV columns, same bytes on a re-run."""

import pandas as pd

from common.plotting import describe_runs, log2_size_axis, new_figure, save


def _plot(path, df):
    fig, ax = new_figure()
    ax.plot(df["size_bytes"], df["busbw_GBps"], marker="o")
    log2_size_axis(ax, df["size_bytes"])
    return save(fig, path, footer=describe_runs(df, held={"dtype": "fp32"}))


def test_png_is_written_deterministically(tmp_path):
    df = pd.DataFrame({"size_bytes": [1024, 2048, 4096], "busbw_GBps": [0.1, 0.2, 0.3],
                       "hardware": ["cpu x"] * 3, "world_size": [4] * 3, "backend": ["gloo"] * 3,
                       "nccl_version": ["none"] * 3})
    a, b = _plot(tmp_path / "a.png", df), _plot(tmp_path / "b.png", df)
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and a.read_bytes() == b.read_bytes()
    footer = describe_runs(df, held={"dtype": "fp32"})
    assert footer == "hardware=cpu x  world_size=4  backend=gloo  dtype=fp32"  # 'none' NCCL omitted
