"""The guide's opening lines and scenarios: its accuracy sentence follows this repository's GPU CSVs (change one,
in a copy, and the sentence changes), and every worked scenario is answered with a plan and a command."""

import shutil

import pandas as pd

from planner.evidence import own_runs
from planner.guide import guide_answer

LABS = ("allreduce-bench", "cp-attention", "fp8-train", "fsdp-scaling", "parallel-3d", "tp-attention")


def test_the_accuracy_sentence_follows_the_labs_csvs(tmp_path, monkeypatch):
    for lab in LABS:
        shutil.copytree(own_runs.LABS / lab / "results", tmp_path / lab / "results",
                        ignore=shutil.ignore_patterns("*.png", "*.html"))
    monkeypatch.setattr(own_runs, "LABS", tmp_path)
    n, median, _ = guide_answer.own_rows()
    before = guide_answer.accuracy_sentence()
    assert n > 0 and f"against this repository's own {n} GPU rows, {median:.1%} median" in before
    for steps in sorted((tmp_path / "fp8-train" / "results").glob("*/steps.csv")):
        s = pd.read_csv(steps, dtype={"git_commit": str})
        s["tokens_per_s"] *= 0.8  # every training run measured 20% slower: the model is now too fast for them
        s.to_csv(steps, index=False)
    n2, median2, _ = guide_answer.own_rows()
    after = guide_answer.accuracy_sentence()
    assert median2 != median and after != before
    assert f"against this repository's own {n2} GPU rows, {median2:.1%} median" in after


def test_every_scenario_is_answered():
    text = " ".join(guide_answer.scenarios().split())
    for model, gpus, _, _ in guide_answer.SCENARIOS:
        assert f"**{model} on {gpus:,} GPUs" in text or f"**{model} on {gpus} GPUs" in text
        assert f'--params {model} --gpus {gpus}' in text
    assert text.count("TP·PP·DP") >= 4 and "No configuration fits" not in text
