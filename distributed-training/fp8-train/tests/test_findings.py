"""The report's answer and story come from the CSVs: recomputed here from the committed rows (whatever GPU rows
the results hold), and changed with them in a copy; the early lag of delayed scaling is explained from fp8.csv,
the NaN action named as it happened."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

import report
from common.findings import read_block
from reporting import sections

LAB = Path(report.__file__).resolve().parent


def _copy(tmp_path: Path) -> Path:
    res = tmp_path / "results"
    shutil.copytree(LAB / "results", res, ignore=shutil.ignore_patterns("*.png", "*.html"))
    return res


def _report(res: Path) -> tuple[dict[str, str], str, sections.Context]:
    out = res.parent / "REPORT.md"
    assert report.main(["--results", str(res), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.splitlines().index("<!-- /findings -->") < 15
    return {f.label: f.text for f in read_block(out)}, text, sections.load(res, res.parent)


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    return _report(_copy(tmp_path_factory.mktemp("committed")))


def _primary(ctx: sections.Context):
    """The comparison the answer is about: a GPU one with a BF16 band and the most FP8 runs."""
    return max(ctx.facts, key=lambda x: (x.gpu, len(x.band.seeds) >= 2, sum(r.fp8 for r in x.runs)))


def _finals(ctx: sections.Context, key) -> pd.DataFrame:
    """Per run of the answer's model, recomputed from steps.csv: final val loss, precision, seed, first timestamp."""
    rows = []
    for f in ctx.models[key]:
        for run, g in f.steps.groupby("run"):
            rows.append(dict(folder=f.name, run=run, precision=g["precision"].iloc[0], seed=int(g["seed"].iloc[0]),
                             val=g.sort_values("step")["val_loss"].dropna().iloc[-1], t=g["timestamp_utc"].min()))
    return pd.DataFrame(rows)


def test_the_answer_is_the_csvs_verdict(committed):
    found, _, ctx = committed
    f = _primary(ctx)
    d = _finals(ctx, f.key)
    seeds = d[d["precision"] == "bf16"].sort_values(["t", "folder"]).drop_duplicates("seed")
    fp8 = d[d["precision"] == "fp8"]
    assert len(seeds) >= 2  # the committed results hold a BF16 band
    lo, hi = seeds["val"].min(), seeds["val"].max()
    assert f"{len(seeds)}-seed BF16 validation band [{lo:.4f}, {hi:.4f}]" in found["Answer"]
    above = int((fp8["val"] > hi).sum())
    if above == len(fp8):
        assert f"all {len(fp8)} FP8 runs end above" in found["Answer"]
    paired = fp8["val"].to_numpy() - seeds.set_index("seed").loc[fp8["seed"], "val"].to_numpy()
    assert f"{paired.min():+.4f}" in found["Answer"] and f"{paired.max():+.4f}" in found["Answer"]


def test_the_lag_is_explained_from_fp8_csv(committed):
    found, _, ctx = committed
    lag = found["Why delayed scaling starts behind"]
    for f in [_primary(ctx)]:
        if f.lag is None or not f.lag.flushed:
            continue
        fp8 = pd.concat([x.fp8 for x in ctx.models[f.key] if x.fp8 is not None])
        first = fp8[(fp8["role"] == "grad_output") & (fp8["step"] == 0) & fp8["amax"].notna()]
        delayed = first[first["scale"] == 1]
        low = delayed[(delayed["amax"] > 0) & (delayed["amax"] < 2.0 ** -17)]  # half E5M2's smallest subnormal
        assert f"peak at {low['amax'].max():.2g}" in lag
        run = delayed[delayed["run"] == delayed["run"].iloc[0]]
        assert f"{int((run['amax'] == 0).sum())} of {len(run)} grad_outputs are exactly 0" in lag


def test_the_alerts_are_counted_from_events(committed):
    found, _, ctx = committed
    f = _primary(ctx)
    for (run, kind), g in f.alerts.groupby(["run", "kind"]):
        assert f"{run} {len(g)} {kind}" in found["Alerts and NaNs"]


def test_the_nan_action_is_named_as_it_happened(committed):
    _, text, _ = committed
    assert ("step 110 (injected: nan@110): rolled back to the checkpoint taken after step 99: the updates of steps "
            "100-109 (10 steps) were undone") in text


def test_the_sentences_follow_the_csvs(tmp_path):
    res = _copy(tmp_path)
    found, _, ctx = _report(res)
    f = _primary(ctx)
    lo, hi = f.band.limits("final_val")
    fp8 = next(r for r in f.runs if r.precision == "fp8")
    steps = res / fp8.folder / "steps.csv"
    s = pd.read_csv(steps, dtype={"git_commit": str})
    last = (s["run"] == fp8.name) & (s["step"] == s.loc[s["run"] == fp8.name, "step"].max())
    s.loc[last, "val_loss"] = (lo + hi) / 2  # this FP8 run now ends inside the band
    s.to_csv(steps, index=False)
    demo = res / "cpu_ws1-demo" / "steps.csv"
    d = pd.read_csv(demo, dtype={"git_commit": str})
    d["action"] = d["action"].str.replace("after step 99", "after step 74")  # a rollback of 35 steps
    d.to_csv(demo, index=False)

    after, text, _ = _report(res)
    n = sum(r.fp8 for r in f.runs)
    inside = sum(lo <= r.final_val <= hi for r in f.runs if r.fp8) + (not lo <= fp8.final_val <= hi)
    assert after["Answer"] != found["Answer"]
    assert f"{inside} of {n} low-precision runs end inside" in after["Answer"] or inside == n
    assert "the updates of steps 75-109 (35 steps) were undone" in text
