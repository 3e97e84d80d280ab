"""Figures: PNG written, provenance footer text built from the CSV columns, same bytes on a re-run."""

import pandas as pd

from common.plotting import describe_runs, gapped, log2_size_axis, new_figure, save


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


def test_gapped_draws_every_point_and_no_line_across_an_unmeasured_gap():
    fig, ax = new_figure()
    gapped(ax, [1, 8, 16, 32, 1024], [5, 4, 3, 2, 1], "-o", label="s")
    gapped(ax, [1024, 8], [1.0, 2.0], "--", label="formula")  # line style only: a lone point still shows
    lines = ax.get_lines()
    runs = [list(ln.get_xdata()) for ln in lines]
    assert runs == [[1], [8, 16, 32], [1024], [8], [1024]]
    assert [ln.get_label() for ln in lines].count("s") == 1 and lines[1].get_label() == "s"  # the longest run
    assert len({ln.get_color() for ln in lines[:3]}) == 1 and lines[4].get_marker() == "_"
