"""The findings block: sentences from a template picked by name, the block between its markers and read back,
and README.md's findings rewritten from the documents' blocks (a missing block is said, never skipped)."""

import posixpath
import re

import pytest

from common import readme_findings
from common.findings import (END, GLOSSARY, START, Finding, Sentences, Spread, block, fill, gaps_sentence, listing,
                             opening_lines, plural, read_block, rendered, screen_lines, shares_cores, short_hardware,
                             signed, spread)

ROOT = readme_findings.ROOT
LABS = ("allreduce-bench", "fsdp-scaling", "tp-attention", "cp-attention", "fp8-train", "parallel-3d")


def test_sentences_are_named_joined_and_filled(tmp_path):
    path = tmp_path / "t.md"
    path.write_text("# a comment before the first sentence\n[a.one]\nAll {n} runs end\nabove the band.\n\n"
                    "[b]\n# a comment inside\n{x:.2f}x\n")
    s = Sentences(path)
    assert s("a.one", n=4) == "All 4 runs end above the band." and s("b", x=1.234) == "1.23x"
    assert "b" in s and "c" not in s and s("b", name=1, x=2.0) == "2.00x"  # 'name' is a value like any other
    with pytest.raises(KeyError, match=r"t.md has no sentence \[c\]"):
        s("c")


def test_block_round_trip_and_its_limits(tmp_path):
    lines = block([Finding("Question", "Why?"), Finding("Answer", "Because: 3 of 4.")])
    assert lines[:2] == ["## What we found", START] and lines[-2:] == [END, ""]
    doc = tmp_path / "REPORT.md"
    doc.write_text("# title\n\n" + "\n".join(lines) + "\nmore\n")
    assert read_block(doc) == [Finding("Question", "Why?"), Finding("Answer", "Because: 3 of 4.")]
    assert read_block(tmp_path / "absent.md") == []
    with pytest.raises(ValueError):
        block([Finding("x", "y")] * 9)
    assert listing(["a", "b", "c"]) == "a, b and c" and spread([0.1, 0.3], "{:.1f}") == "0.1 to 0.3"
    assert spread([2.0, 2.0], "{:.0f}") == "2"


def test_readme_quotes_every_documents_answer(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{readme_findings.START}\nold\n{readme_findings.END}\n\nrest\n")
    first = readme_findings.DOCUMENTS[0][2]
    (tmp_path / first).parent.mkdir(parents=True)
    (tmp_path / first).write_text("\n".join(block([Finding("Question", "Q?"), Finding("Answer", "42 GB/s.")])))
    assert readme_findings.main(["--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old" not in text and text.endswith("\n\nrest\n")
    assert f"- **[{readme_findings.DOCUMENTS[0][0]}]({first})**, {readme_findings.DOCUMENTS[0][1]} 42 GB/s." in text
    assert text.count("No findings block yet") == len(readme_findings.DOCUMENTS) - 1
    (tmp_path / "NO.md").write_text("no markers\n")
    with pytest.raises(SystemExit) as e:
        readme_findings.main(["--readme", str(tmp_path / "NO.md")])
    assert e.value.code == 2


def test_the_committed_readme_is_current():
    """README.md's findings are what `make reports` writes from the committed documents."""
    readme = readme_findings.ROOT / "README.md"
    assert readme.read_text() == readme_findings.update(readme), "README.md is stale: run `make reports`"


def test_the_gaps_sentence_joins_the_gaps_or_says_nothing_is_missing(tmp_path):
    path = tmp_path / "t.md"
    path.write_text("[missing.lead]\n{gaps}.\n\n[missing.nothing]\nnothing is missing.\n")
    say = Sentences(path)
    assert gaps_sentence(say, ["a GPU run: `make x`", "two nodes"]) == "A GPU run: `make x`; two nodes."
    assert gaps_sentence(say, []) == "Nothing is missing."


def test_sentences_keep_paragraphs_and_bullets_and_fill_refuses_a_gap(tmp_path):
    path = tmp_path / "t.md"
    path.write_text("[p]\none\ntwo\n\nthree\n- a\n  b\n- c\n\n[q]\nx\n")
    assert Sentences(path)("p") == "one two\n\nthree\n- a b\n- c"
    skeleton = tmp_path / "r.md"
    skeleton.write_text("# t\n\n{{a}}\n\n{{b}}\n\nend\n")
    assert fill(skeleton, a=["x", "", "y"], b=[]) == "# t\n\nx\n\ny\n\nend\n"  # an empty section leaves no gap
    with pytest.raises(KeyError, match=r"missing \['b'\], unused \['c'\]"):
        fill(skeleton, a="x", c="y")


def test_one_screen_is_counted_as_rendered_and_refused_beyond():
    line = "- **Answer.** " + "[busbw](../../docs/glossary.md#busbw) " * 20
    assert rendered(line) == "- Answer. " + "busbw " * 20 and screen_lines([line]) == 2  # 130 characters shown
    block([Finding("Answer", "x" * 200)] * 4, one_screen=True)  # 4 x 2 lines: fits
    with pytest.raises(ValueError, match="9 lines of 110 characters"):
        block([Finding("Answer", "x" * 200)] * 4 + [Finding("More", "y")], one_screen=True)


def test_a_value_that_rounds_to_zero_has_no_minus():
    assert signed("{:+.0%}", -0.0014) == "+0%" and signed("{:.2f}", -0.001) == "0.00"
    assert signed("{:+.0%}", -0.006) == "-1%" and signed("{:+.4f}", -0.5) == "-0.5000"
    assert spread([-0.0014, 0.04], "{:+.0%}") == "+0% to +4%" and spread([-0.0014, 0.001], "{:+.0%}") == "+0%"


def test_a_ratio_differs_only_outside_its_spread():
    ours, theirs = Spread(80.3, 60.3, 93.3), Spread(97.6, 83.2, 113.8)  # cp-attention's CPU N = 4 row
    r = ours.over(theirs)
    assert f"{r.mid:.2f} {r.lo:.2f} {r.hi:.2f}" == "0.82 0.53 1.12" and not r.differs  # 0.82 is no finding
    assert Spread(2.0, 1.5, 2.3).over(Spread(1.0, 0.9, 1.1)).differs
    assert Spread(2.0, 1.5, 2.3).over(Spread(1.0, 0.9, 1.1)).pct() == "+100% (+36% to +156%)"
    assert Spread(1, 0, 2).overlaps(Spread(1.5, 1.9, 3)) and not Spread(1, 0, 2).overlaps(Spread(3, 2.1, 4))
    assert shares_cores("AMD EPYC (2 cores)", 4) and not shares_cores("AMD EPYC (2 cores)", 2)
    assert not shares_cores("1x NVIDIA H100 80GB HBM3", 8)  # no core count named: a GPU's ranks have their own
    assert short_hardware("Intel(R) Xeon(R) Processor (2 cores)") == "Intel Xeon (2 cores)"
    assert plural(1, "rank") == "1 rank" and plural(4, "rank") == "4 ranks"


def test_readme_links_are_rebased_to_its_folder():
    doc = "distributed-training/allreduce-bench/REPORT.md"
    assert readme_findings.rebased("[b](../../docs/glossary.md#busbw), [r](TOPOLOGY.md), [w](https://x), [a](#y)",
                                   doc) == ("[b](docs/glossary.md#busbw), [r](distributed-training/allreduce-bench/"
                                            "TOPOLOGY.md), [w](https://x), [a](#y)")


@pytest.mark.parametrize("name,rel", [(name, rel) for name, _, rel in readme_findings.DOCUMENTS])
def test_every_committed_opening_fits_one_screen(name, rel):
    assert 0 < opening_lines(ROOT / rel) <= 8, f"{rel}: the opening takes {opening_lines(ROOT / rel)} screen lines"


def _report(lab: str) -> str:
    return (ROOT / "distributed-training" / lab / "REPORT.md").read_text()


@pytest.mark.parametrize("lab", LABS)
def test_every_plot_is_captioned_referenced_and_every_link_resolves(lab):
    """Each embedded plot has its 'What to see' caption; each committed PNG of the lab is embedded; each relative
    link (the glossary, PLANNER_VALIDATION.md) leads to a file that exists."""
    text, folder = _report(lab), ROOT / "distributed-training" / lab
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("!["):
            following = next(x for x in lines[i + 1:] if x.strip())
            assert following.startswith("*What to see:*"), f"{lab}: no caption under {line}"
    shown = {posixpath.normpath(m) for m in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)}
    committed = {p.relative_to(folder).as_posix() for p in folder.rglob("*.png") if "common" not in p.parts}
    assert committed <= shown, f"{lab}: committed but not in REPORT.md: {sorted(committed - shown)}"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not re.match(r"^[a-z]+:", target):
            assert (folder / target).exists(), f"{lab}: broken link {target}"


def test_no_caption_repeats_and_the_planner_comparison_lives_in_one_place():
    captions = [c for lab in LABS for c in re.findall(r"^\*What to see:\*.*$", _report(lab), re.M)]
    assert len(captions) == len(set(captions)), [c for c in captions if captions.count(c) > 1]
    for lab in LABS:  # each links PLANNER_VALIDATION.md instead of repeating its table
        assert "PLANNER_VALIDATION.md#4-how-accurate-is-it" in _report(lab)
        assert "prices every GPU row from its own columns" not in _report(lab), lab


def test_every_glossary_link_lands_on_a_defined_term():
    """Each #anchor the reports and README link in docs/glossary.md is one of its headings (GitHub's slugs)."""
    slug = lambda h: re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")  # noqa: E731
    anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", GLOSSARY.read_text(), re.M)}
    texts = [_report(lab) for lab in LABS] + [(ROOT / "README.md").read_text()]
    linked = {a for t in texts for a in re.findall(r"glossary\.md#([\w-]+)", t)}
    assert linked and linked <= anchors, sorted(linked - anchors)
