"""The dashboard as a person sees it: rendered by headless Chromium, every panel present and drawn."""

import json
import re
import shutil
import subprocess

import pytest

import report
from health import dashboard

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _chromium(*args, timeout=60):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000",
           "--window-size=1220,2000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_page_is_self_contained(demo_runs):
    clean, faulty = demo_runs
    page = (faulty / "dashboards" / "fp8-emulated-s0.html").read_text()
    assert "<meta http-equiv=\"refresh\"" not in page  # the final write stops reloading
    without_ns = page.replace("http://www.w3.org/2000/svg", "")  # an SVG namespace name, never fetched
    assert not re.search(r"https?://|<link|src=|@import|url\(", without_ns)
    data = json.loads(re.search(r"const DATA = (.*?);</script>", page).group(1).replace("<\\/", "</"))
    run = data["runs"][0]
    assert {e["kind"] for e in run["events"]} >= {"grad_spike", "nonfinite", "scale_drop"}
    assert len(run["scales"]) == 6 * 3 and len(run["steps"]["loss"]) == 28
    assert all(len(v["scale"]) == len(v["amax"]) == len(v["step"]) > 0 for v in run["scales"].values())
    assert data["style"]["panels"]["p-amax"]["log"] is True  # the panel table travels with the page
    live = dashboard.render([run], "live", refresh_s=7)
    assert '<meta http-equiv="refresh" content="7">' in live


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (Debian package `chromium`)")
def test_rendered_in_chromium(demo_runs, tmp_path):
    clean, faulty = demo_runs
    page = dashboard.write([(clean, "fp8-emulated-s0", "clean"), (faulty, "fp8-emulated-s0", "faults")],
                           tmp_path / "overlay.html", "overlay")
    dom = _chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-ready="1"' in dom.stdout  # the script ran to the end without an exception
    points = dict(re.findall(r'id="(p-[a-z]+)" data-points="(\d+)"', dom.stdout))
    assert set(points) == set(dashboard.PANELS), points
    assert all(int(n) > 0 for n in points.values()), points  # every panel drew something
    assert dom.stdout.count("<path") > 50 and "rolled back" in dom.stdout  # lines, markers, the events table
    shot = tmp_path / "shot.png"
    r = _chromium(f"--screenshot={shot}", page.as_uri())
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    import matplotlib.image as mpimg
    img = mpimg.imread(shot)[..., :3]  # (H, W, 3) in [0, 1]
    # The grid is 2 columns of 580 px panels (panels.py's table, row by row) under a ~60 px header; each
    # panel's plot area must hold coloured pixels (lines, markers), not only white, grey grid and black text.
    colourful = (img.max(axis=2) - img.min(axis=2)) > 0.25
    for i, panel in enumerate(dashboard.PANELS):
        row, col = divmod(i, 2)
        y0, x0 = 80 + row * 292, 20 + col * 592
        cell = colourful[y0 + 40:y0 + 270, x0 + 80:x0 + 570]
        assert cell.mean() > 0.002, (panel, cell.mean())


def test_report_has_the_health_section(demo_runs, tmp_path):
    results = demo_runs[0].parent
    assert report.main(["--results", str(results), "--out", str(tmp_path / "REPORT.md")]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "The health demo (`faults`" in text and "rolled back" in text and "health_fp8-emulated-s0.png" in text
    assert "nan@16" in text and "without faults" in text  # compared with the clean run of the same settings
