"""Every sentence that compares, ranks or explains is picked by the data: recomputed here from the committed CSVs,
then the CSVs are changed in memory and the sentence changes with them (in-process, no plots). The opening fits
one screen whatever the data."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

import report
from common.findings import block, read_block
from reporting import bench_report, evidence, findings, sections

LAB = Path(report.__file__).resolve().parent
RESULTS = LAB / "results"


@pytest.fixture(scope="module")
def ctx():
    return sections.load(RESULTS, LAB)


def _key(ctx, gpu: str):
    return next(k for k in ctx.models if gpu in k.hardware)


def _with(ctx, gpu: str, changes: dict):
    """The facts of one model after changes[folder](steps) edited a copy of that folder's steps.csv."""
    key = _key(ctx, gpu)
    folders = [f._replace(steps=changes[f.name](f.steps.copy())) if f.name in changes else f for f in ctx.models[key]]
    return sections.model_facts(ctx._replace(models={**ctx.models, key: folders}), key)


def _val(steps, run: str, step: int, value: float):
    steps.loc[(steps["run"] == run) & (steps["step"] == step), "val_loss"] = value
    return steps


def _opening(facts, gpu_facts=()):
    lines = findings.opening([facts, *gpu_facts], [], False)
    block(lines, one_screen=True)  # fits one screen, whatever the data
    return {f.label: f.text for f in lines}


def _recomputed_noise(folder_a: pd.DataFrame, folder_b: pd.DataFrame, run: str) -> pd.Series:
    a = folder_a[folder_a["run"] == run].dropna(subset=["val_loss"]).set_index("step")["val_loss"]
    b = folder_b[folder_b["run"] == run].dropna(subset=["val_loss"]).set_index("step")["val_loss"]
    return (b - a).dropna()


def test_the_noise_is_every_evaluation_of_the_rerun_not_its_last_step(ctx):
    h100 = ctx.facts[_key(ctx, "H100")]
    steps = {f.name: f.steps for f in ctx.models[h100.key]}
    rerun = _recomputed_noise(steps["h100_ws1"], steps["h100_ws1-te"], "bf16-s0")
    assert len(rerun) == 8 and rerun.abs().max() == pytest.approx(h100.noise.level)
    assert h100.noise.level > 10 * abs(rerun.iloc[-1])  # 0.034 over every evaluation, 0.0018 at the last one
    found = _opening(h100)["Answer"]
    assert f"±{rerun.abs().max():.3f}: a BF16 rerun, 8 evaluations" in found and "inside the" in found
    assert "+0.007 to +0.012" in found  # the final gaps, recomputed in test_the_answer_is_the_csvs_gaps

    # The rerun as close at every evaluation as it is at the last: the same gaps are now beyond the noise.
    def calm(s):
        first = steps["h100_ws1"][steps["h100_ws1"]["run"] == "bf16-s0"].set_index("step")["val_loss"]
        mask = s["run"] == "bf16-s0"
        s.loc[mask, "val_loss"] = s.loc[mask, "step"].map(first) + 0.0018 * s.loc[mask, "val_loss"].notna()
        return s
    calm_facts = _with(ctx, "H100", {"h100_ws1-te": calm})
    flipped = _opening(calm_facts)
    assert "above same-seed BF16, beyond the" in flipped["Answer"] and "a loss cost" in flipped["Answer"]
    assert "at a loss cost beyond the noise" in flipped["What it means"]
    assert "Beyond it:" in findings.loss_paragraph(calm_facts)


def test_the_answer_is_the_csvs_gaps(ctx):
    """Each FP8 run's final val minus that of the first-measured BF16 run of its seed, from steps.csv."""
    h100 = ctx.facts[_key(ctx, "H100")]
    rows = []
    for f in ctx.models[h100.key]:
        for run, g in f.steps.groupby("run"):
            rows.append(dict(precision=g["precision"].iloc[0], seed=int(g["seed"].iloc[0]), t=g["timestamp_utc"].min(),
                             val=g.sort_values("step")["val_loss"].dropna().iloc[-1]))
    d = pd.DataFrame(rows)
    ref = d[d["precision"] == "bf16"].sort_values("t").drop_duplicates("seed").set_index("seed")["val"]
    fp8 = d[d["precision"] == "fp8"]
    gaps = fp8["val"].to_numpy() - ref.loc[fp8["seed"]].to_numpy()
    assert f"{gaps.min():+.3f} to {gaps.max():+.3f}" in _opening(h100)["Answer"] and len(gaps) == 4


def test_without_a_rerun_or_second_seed_no_gap_is_a_difference(ctx):
    h100, h200 = ctx.facts[_key(ctx, "H100")], ctx.facts[_key(ctx, "H200")]
    assert h200.noise is None
    found = _opening(h100, [h200])
    assert found["Answer"].endswith("no loss cost resolved; 1 more set below.") and "H200" not in found["Answer"]
    assert "BF16 noise on H200" in found["Not measured yet"]
    assert "no gap here (+0.0068 to +0.0147) is called a difference" in findings.loss_paragraph(h200)
    alone = _opening(h200)
    assert "unresolved" in alone["Answer"] and "needs a measured noise" in alone["What it means"]


def test_the_opening_names_one_primary_set_by_its_rule_and_counts_the_rest(ctx):
    h100, h200, cpu = (ctx.facts[_key(ctx, gpu)] for gpu in ("H100", "H200", "Xeon"))
    assert findings.primary([cpu, h200, h100]) is h100  # the GPU set whose noise is measured
    measured = h200._replace(noise=h100.noise)
    assert findings.primary([h100, measured]) is h100  # both measured, the same model: the most FP8 runs (4 to 3)
    larger = measured._replace(key=measured.key._replace(d_model=8192))
    assert findings.primary([h100, larger]) is larger  # then the larger model, whatever its run count
    newer = h100._replace(runs=[r._replace(started="2099-01-01T00:00:00") for r in h100.runs])
    assert findings.primary([h100, newer]) is newer  # all else equal: the newest
    assert findings.primary([cpu, h100._replace(noise=None)]).gpu  # a GPU set before the CPU's, measured noise or not

    # Any number of GPU sets beside them (other GPUs, worlds, a rerun): one screen, the primary named, the rest counted.
    extra = [f._replace(key=f.key._replace(hardware=f"{n}x NVIDIA {gpu}", world_size=n))
             for f, gpus in ((h100, ("B200", "H20", "GH200")), (h200, ("B300", "A100", "L40S")), (cpu, ("X", "Y")))
             for gpu in gpus for n in (1, 2, 8)]
    found = _opening(h100, [h200, cpu, *extra])
    assert found["Answer"].startswith("On 1x H100 80GB (d_model 4096) 4 FP8 runs end +0.007 to +0.012")
    assert found["Answer"].endswith("; 19 more sets below.") and found["Speed"].endswith("; 19 more sets below.")
    assert "the FP8 bound" not in found["Not measured yet"] and "BF16 noise on 4 GPUs" in found["Not measured yet"]
    bounds = findings.missing_sentence([h100, h200], [h100.key, h200.key, extra[0].key], False)
    assert "the FP8 bound on 3 GPUs" in bounds and "FSDP2 on several GPUs" in bounds

    # Only the CPU preset's model measured on two GPUs (six block-format and FP8 runs, none faster than BF16).
    small = [cpu._replace(gpu=True, key=cpu.key._replace(hardware=f"1x NVIDIA {gpu}")) for gpu in ("H100", "H200")]
    found = _opening(small[0], small[1:])
    assert found["Answer"].startswith("On 1x H100 (d_model 128) 6 low-precision runs") and "1 more set" in found["Speed"]


def test_the_early_lag_is_told_by_scaling_only_where_the_gaps_part(ctx):
    h100 = ctx.facts[_key(ctx, "H100")]
    early = _opening(h100)["Early steps"]
    e = findings.Early(h100)
    at49 = e.frame.loc[49]
    assert f"at step 49 the 4 FP8 runs trail their seed's BF16 run by {at49.min():.2f}-{at49.max():.2f}" in early
    assert "delayed and current scaling](../../docs/glossary.md#delayed-and-current-scaling) alike" in early
    assert f"by step 99 all are within {e.frame.loc[99].abs().max():.2f}" in early
    body = findings.early_paragraph(h100)
    assert "At the first evaluation (step 24) the delayed-scaling runs end +0.167 to +0.176" in body
    assert "not the lag at step 49, which every scaling shares" in body

    # The delayed-scaling runs 0.30 behind at step 49: delayed scaling now trails most there.
    f = _with(ctx, "H100", {"h100_ws1": lambda s: _val(s, "fp8-native-s0", 49, 2.8378 + 0.3),
                            "h100_ws1-te": lambda s: _val(s, "fp8-te-s0", 49, 2.8378 + 0.3)})
    flipped = _opening(f)["Early steps"]
    assert "delayed scaling](../../docs/glossary.md#delayed-and-current-scaling) most" in flipped
    assert "not the lag at step 49" not in findings.early_paragraph(f)

    # native still 0.05 behind at step 99: the catch-up moves to the first evaluation where all are inside.
    late = _with(ctx, "H100", {"h100_ws1": lambda s: _val(s, "fp8-native-s0", 99, 2.6796 + 0.05)})
    assert "by step 174 all are within 0.01" in _opening(late)["Early steps"]


def test_the_flush_at_step_0_is_read_from_fp8_csv(ctx):
    h100 = ctx.facts[_key(ctx, "H100")]
    fp8 = pd.concat([x.fp8 for x in ctx.models[h100.key] if x.fp8 is not None])
    first = fp8[(fp8["role"] == "grad_output") & (fp8["step"] == 0) & (fp8["scale"] == 1)]
    low = first[(first["amax"] > 0) & (first["amax"] < 2.0 ** -17)]  # half E5M2's smallest subnormal
    run = first[first["run"] == first["run"].iloc[0]]
    body = findings.early_paragraph(h100)
    assert f"peak at {low['amax'].max():.2g}" in body
    assert f"{int((run['amax'] == 0).sum())} of {len(run)} grad_outputs are exactly 0" in body
    assert "carries no gradient through the blocks" in body
    cpu = findings.early_paragraph(ctx.facts[_key(ctx, "Xeon")])  # one module flushed, none exactly 0
    assert "flush to zero." in cpu and "exactly 0" not in cpu and "no gradient" not in cpu


def test_a_damaged_scale_record_is_named_and_left_out(ctx):
    h200 = ctx.facts[_key(ctx, "H200")]
    native = ("h200_ws1", "fp8-native-s0")
    assert list(h200.damaged) == [native]
    scale, partial = h200.damaged[native]
    assert (scale.rule, scale.found, scale.steps, scale.infinite) == ("scale", 126, (0,), 0)
    assert (partial.rule, partial.modules, partial.of_modules, partial.steps) == ("partial", 6, 48, (0, 50, 100, 150))
    assert h200.underflow.empty and h200.flush.runs == 1  # te's record alone tells step 0
    assert "fp8-native-s0 (`h200_ws1`: 126 scales of exactly 0.0 at step 0" in findings.damaged_sentence(h200)
    assert "Left out: fp8-native-s0 (`h200_ws1`)" in findings.caption_scales(h200, findings.shown_runs(h200), True)
    assert [r.name for r in findings.shown_runs(h200)] == ["fp8-torchao-s0", "fp8-te-s0"]

    # The predicate on an intact record, then each kind of damage alone.
    h100 = ctx.facts[_key(ctx, "H100")]
    run = next(r for r in h100.runs if r.name == "fp8-native-s0")
    fp8 = next(f.fp8 for f in ctx.models[h100.key] if f.name == "h100_ws1")
    assert evidence.damage(run, fp8) == [] and not h100.damaged
    zero = fp8.copy()
    zero.loc[zero.index[(zero["run"] == run.name) & (zero["step"] == 10)][0], "scale"] = 0.0
    assert [d.rule for d in evidence.damage(run, zero)] == ["scale"]
    gone = fp8.drop(fp8.index[(fp8["run"] == run.name) & (fp8["step"] == 20)][:3])
    assert [d.rule for d in evidence.damage(run, gone)] == ["missing"]
    part = fp8.copy()
    part.loc[(part["run"] == run.name) & part["module"].str.startswith("layers.7."), "underflow_frac"] = float("nan")
    assert [d.rule for d in evidence.damage(run, part)] == ["partial"]
    inf = fp8.copy()
    inf.loc[inf.index[(inf["run"] == run.name) & (inf["step"] == 10)][:2], "scale"] = [0.0, float("inf")]
    assert findings.damage_words(evidence.damage(run, inf)).startswith("2 scales of exactly 0.0 or infinite at step 10")


def test_speed_ties_and_no_difference_follow_the_spread_of_the_bf16_runs(ctx):
    h100 = ctx.facts[_key(ctx, "H100")]
    assert [r.backend for r, _ in findings.fastest(h100)] == ["te", "torchao"]  # 59,712 vs 59,387: inside the spread
    assert "FP8 through te or torchao: 1.20x" in _opening(h100)["What it means"]
    faster = h100._replace(runs=[r._replace(tokens_per_s=r.tokens_per_s * 1.03) if r.backend == "te" and
                                 r.recipe.startswith("delayed") else r for r in h100.runs])
    assert "FP8 through te: 1.24x" in _opening(faster)["What it means"]
    bf16 = [r.tokens_per_s for r in h100.runs if r.precision == "bf16"]
    even = h100._replace(runs=[r._replace(tokens_per_s=sorted(bf16)[1]) if r.backend == "native" else r
                               for r in h100.runs])
    assert "native 1.00x (no difference)" in _opening(even)["Speed"]
    assert "native 0.72x" in _opening(h100)["Speed"]


def test_cpu_block_formats_are_judged_against_the_seeds(ctx):
    cpu = ctx.facts[_key(ctx, "Xeon")]
    assert cpu.noise.kind == "seeds" and cpu.noise.exact and cpu.noise.runs == 3
    text = findings.loss_paragraph(cpu)
    assert f"{cpu.noise.level:.4f}" in text and "reproduced every evaluation exactly" in text
    assert "All 6 end inside it" in text and "precision's" not in text
    worse = _with(ctx, "Xeon", {"cpu_ws1-wide": lambda s: _val(s, "mxfp8-emulated-s0", 199, 2.4712 + 0.3)})
    assert "Beyond it: mxfp8 emulated +0.3000" in findings.loss_paragraph(worse)


def test_captions_name_only_what_their_plot_draws(ctx):
    h100, h200 = ctx.facts[_key(ctx, "H100")], ctx.facts[_key(ctx, "H200")]
    assert "grey band of 2 BF16 seeds" in findings.caption_loss(h100) and "hollow" in findings.caption_loss(h100)
    one = findings.caption_loss(h200)
    assert "one BF16 run" in one and "band of" not in one and "hollow" not in one
    no_rerun = h100._replace(band=h100.band._replace(repeats=[]))
    assert "hollow" not in findings.caption_loss(no_rerun)
    assert "grey ±0.034" in findings.caption_answer(h100) and "no noise measured" in findings.caption_answer(h200)


def test_gemm_notes_follow_the_rows():
    cpu = pd.read_csv(RESULTS / "cpu_ws1" / "bench_gemm.csv")
    text = " ".join(bench_report.gemm_lines(cpu))
    assert "`fp8 torch._scaled_mm` took 14,749,923 us" in text and "2,541x the fp32 GEMM" in text
    fast = cpu.assign(time_us=cpu["time_us"].where(cpu["op"] != "fp8 torch._scaled_mm", 9000.0))
    assert "fallback" not in " ".join(bench_report.gemm_lines(fast))
    gpu = pd.read_csv(RESULTS / "h100_ws1" / "bench_gemm.csv")
    assert "`bf16 torch.mm` ran at 651 TFLOP/s at 8192x8192x8192, 17% below its 787" in " ".join(
        bench_report.gemm_lines(gpu))
    big = (gpu["op"] == "bf16 torch.mm") & (gpu["m"] * gpu["k"] * gpu["n"] == 8192 ** 3)
    assert "below its" not in " ".join(bench_report.gemm_lines(gpu.assign(tflops=gpu["tflops"].mask(big, 780.0))))


def test_the_report_answers_first_and_names_every_gpu(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res, ignore=shutil.ignore_patterns("*.png", "*.html"))
    out = tmp_path / "REPORT.md"
    assert report.main(["--results", str(res), "--out", str(out)]) == 0
    text, found = out.read_text(), {f.label: f.text for f in read_block(out)}
    assert text.splitlines().index("<!-- /findings -->") < 12 and len(text.splitlines()) <= 310
    assert found["Speed"].startswith("Tokens/s over BF16, 1x H100 80GB:") and "1 more set below" in found["Speed"]
    assert "1x H100 80GB" in found["Early steps"] and "### 1x H200: d_model 4096" in text  # the H200 in the body
    assert "a real one" not in text and "inside the step" not in text and "furthest behind" not in text
    assert "PLANNER_VALIDATION.md#4-how-accurate-is-it" in text and "| h100_ws1/bf16-s0 |" not in text
    assert not (res / "h200_ws1" / "underflow.png").exists()  # the damaged run was the H200's only own-layer run


def test_the_nan_action_is_named_as_it_happened(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(RESULTS / "cpu_ws1", res / "cpu_ws1", ignore=shutil.ignore_patterns("*.png", "*.html"))
    shutil.copytree(RESULTS / "cpu_ws1-demo", res / "cpu_ws1-demo", ignore=shutil.ignore_patterns("*.png", "*.html"))
    demo = res / "cpu_ws1-demo" / "steps.csv"
    out = tmp_path / "REPORT.md"
    assert report.main(["--results", str(res), "--out", str(out)]) == 0
    assert ("step 110 (injected: nan@110): rolled back to the checkpoint taken after step 99: the updates of steps "
            "100-109 (10 steps) were undone") in out.read_text()
    d = pd.read_csv(demo, dtype={"git_commit": str})
    d["action"] = d["action"].str.replace("after step 99", "after step 74")  # a rollback of 35 steps
    d.to_csv(demo, index=False)
    assert report.main(["--results", str(res), "--out", str(out)]) == 0
    assert "the updates of steps 75-109 (35 steps) were undone" in out.read_text()
