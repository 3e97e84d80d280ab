"""The findings block: sentences from a template picked by name, the block between its markers and read back,
and README.md's findings rewritten from the documents' blocks (a missing block is said, never skipped)."""

import pytest

from common import readme_findings
from common.findings import END, START, Finding, Sentences, block, gaps_sentence, listing, read_block, spread


def test_sentences_are_named_joined_and_filled(tmp_path):
    path = tmp_path / "t.md"
    path.write_text("# a comment before the first sentence\n[a.one]\nAll {n} runs end\nabove the band.\n\n"
                    "[b]\n# a comment inside\n{x:.2f}x\n")
    s = Sentences(path)
    assert s("a.one", n=4) == "All 4 runs end above the band." and s("b", x=1.234) == "1.23x"
    assert "b" in s and "c" not in s
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
