"""The guide's opening lines and scenarios: its accuracy sentence is chosen by a predicate over the published runs'
signed errors and follows this repository's GPU CSVs (flip the data, in a copy, and the sentence flips), the opening
fits one screen and links its jargon to the glossary, and every worked scenario's "Check it" command prints the
guide's layout."""

import json
import re
import shlex
import shutil

import pandas as pd
import pytest

from common.findings import GLOSSARY, opening_lines
from planner import plan
from planner.evidence import own_runs
from planner.guide import experiments, guide, guide_answer


def test_the_accuracy_sentence_is_chosen_by_the_lean_of_the_signed_errors(monkeypatch):
    held = guide_answer.held_out_errors()
    lean = guide_answer.lean(held)
    assert lean.key == "optimistic" and lean.slower > lean.n / 2 and lean.median > 0  # most ran slower than projected
    text = guide_answer.accuracy_sentence()
    assert text.startswith(f"Optimistic: {lean.slower} of {lean.n} ") and f"median {lean.median:+.1%}" in text
    monkeypatch.setattr(guide_answer, "held_out_errors", lambda: [-e for e in held])  # the same runs, flipped
    flipped = guide_answer.accuracy_sentence()
    assert flipped.startswith(f"Pessimistic: {lean.slower} of {lean.n} ") and f"median {-lean.median:+.1%}" in flipped
    assert guide_answer.bias_sentence().startswith("pessimistic")
    monkeypatch.setattr(guide_answer, "held_out_errors", lambda: [0.1, -0.1, 0.05, -0.05])  # no lean either way
    assert guide_answer.accuracy_sentence().startswith("No lean: 2 of 4 ")


def test_the_own_rows_follow_the_labs_csvs(tmp_path, monkeypatch):
    for lab in ("allreduce-bench", "cp-attention", "fp8-train", "fsdp-scaling", "parallel-3d", "tp-attention"):
        shutil.copytree(own_runs.LABS / lab / "results", tmp_path / lab / "results",
                        ignore=shutil.ignore_patterns("*.png", "*.html"))
    monkeypatch.setattr(own_runs, "LABS", tmp_path)
    before = guide_answer.lean(guide_answer.own_errors())
    assert before.n > 0 and f"GEMMs): {before.median:+.1%}" in guide_answer.accuracy_sentence()
    for steps in sorted((tmp_path / "fp8-train" / "results").glob("*/steps.csv")):
        s = pd.read_csv(steps, dtype={"git_commit": str})
        s["tokens_per_s"] *= 0.5  # every training run measured at half speed: the model is now too fast for them
        s.to_csv(steps, index=False)
    after = guide_answer.lean(guide_answer.own_errors())
    assert after.n == before.n and after.median > before.median
    assert f"GEMMs): {after.median:+.1%}" in guide_answer.accuracy_sentence()


def test_the_opening_fits_one_screen_and_links_its_jargon():
    assert 0 < opening_lines(guide.OUT) <= 8
    headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", GLOSSARY.read_text(), re.M)}
    for doc in (guide.OUT, guide.validation_path(guide.OUT)):
        linked = set(re.findall(r"glossary\.md#([\w-]+)", doc.read_text()))
        assert linked <= headings, (doc.name, sorted(linked - headings))
    answer = guide.OUT.read_text().split("**Answer.**")[1].split("\n")[0]
    for term in ("zero", "tp", "pp", "mfu-and-hfu", "the-two-stacks"):
        assert f"glossary.md#{term})" in answer, term


@pytest.mark.parametrize("model, gpus, net, key", guide_answer.SCENARIOS)
def test_each_scenarios_check_it_prints_the_guides_layout(model, gpus, net, key, capsys):
    """The scenario's command, run as `make plan` runs it, prints the plan the guide states: the same stack."""
    command = guide_answer.command(model, gpus, net)
    assert f"Check it: `{command}`" in " ".join(guide.OUT.read_text().split())
    args = shlex.split(shlex.split(command)[-1].split("=", 1)[1])
    assert plan.main(args + ["--json", "--top", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)["best"]
    guide_plan = experiments.plan(model, gpus, net=net, stack=guide_answer.ANSWER).best
    for k in ("tp", "pp", "dp", "cp", "zero", "microbatch", "num_microbatches", "interleave", "recompute"):
        assert printed[k] == getattr(guide_plan, k), k
    assert guide_answer.spelled(guide_plan) in " ".join(guide.OUT.read_text().split())


def test_every_scenario_is_answered():
    text = " ".join(guide_answer.scenarios().split())
    for model, gpus, _, _ in guide_answer.SCENARIOS:
        assert f"**{model} on {gpus:,} GPUs" in text or f"**{model} on {gpus} GPUs" in text
        assert f'--params {model} --gpus {gpus}' in text
    assert text.count("TP·PP·DP") >= 4 and "No configuration fits" not in text
