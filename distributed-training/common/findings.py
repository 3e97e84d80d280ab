"""A report's answer, first: the "What we found" block, its sentences kept in a template and picked by the data.

Every REPORT.md (and the parallelism guide) opens with at most eight generated lines: the lab's question,
the answer with its numbers and hardware, what it means for a practitioner, and what is not measured yet
with the command that would measure it. The wording changes with the data: a lab's findings module reads
its CSVs, decides which sentence the numbers call for, and fills it from a template of named sentences:

    # findings_template.md (one sentence per [name]; lines of a sentence are joined with a space)
    [verdict.outside]
    All {n} FP8 runs end above the {seeds}-seed BF16 validation band [{lo:.4f}, {hi:.4f}].

    S = Sentences(LAB / "findings_template.md")
    S("verdict.outside", n=4, seeds=2, lo=2.4325, hi=2.437)
    block([Finding("Question", ...), Finding("Answer", ...)])   # the report's lines, between markers
    read_block(Path("REPORT.md"))                                # the findings back, for README.md

The markers (HTML comments, invisible when rendered) let README.md quote every report's answer
(common/readme_findings.py) without parsing prose.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

START, END = "<!-- findings: generated from the CSVs; README.md quotes the Answer -->", "<!-- /findings -->"
MAX_LINES = 8
_NAME = re.compile(r"^\[([a-z0-9_.-]+)\]\s*$")


class Finding(NamedTuple):
    label: str  # Question, Answer, What it means, Not measured yet, or a short topic
    text: str


class Sentences:
    """The named sentences of one template file; calling it with a name and values gives the sentence."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.text: dict[str, str] = {}
        name, lines = None, []
        for raw in self.path.read_text().splitlines() + ["[end-of-file]"]:
            m = _NAME.match(raw)
            if m:
                if name is not None:
                    self.text[name] = " ".join(line.strip() for line in lines if line.strip())
                name, lines = m.group(1), []
            elif name is not None and not raw.startswith("#"):
                lines.append(raw)
            # lines before the first [name] and lines starting with '#' are the template's own comments

    def __call__(self, name: str, **values) -> str:
        if name not in self.text:
            raise KeyError(f"{self.path.name} has no sentence [{name}]")
        return self.text[name].format(**values)

    def __contains__(self, name: str) -> bool:
        return name in self.text


def block(findings: list[Finding], heading: str = "## What we found") -> list[str]:
    """The report's opening lines: a heading, then one bullet per finding between the markers."""
    if not 1 <= len(findings) <= MAX_LINES:
        raise ValueError(f"a findings block has 1 to {MAX_LINES} lines, got {len(findings)}")
    return [heading, START] + [f"- **{f.label}.** {f.text}" for f in findings] + [END, ""]


def read_block(path: str | Path) -> list[Finding]:
    """The findings of a generated document (empty where it has none)."""
    text = Path(path).read_text() if Path(path).exists() else ""
    if START not in text or END not in text:
        return []
    inner = text.split(START, 1)[1].split(END, 1)[0]
    out = []
    for line in inner.strip().splitlines():
        m = re.match(r"^- \*\*(.+?)\.\*\* (.*)$", line)
        if m:
            out.append(Finding(m.group(1), m.group(2)))
    return out


def spread(values: list[float], fmt: str = "{:+.4f}", joiner: str = " to ") -> str:
    """'x' for one value or equal values, 'lo to hi' otherwise (in the given format)."""
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else fmt.format(lo) + joiner + fmt.format(hi)


def gaps_sentence(say: Sentences, gaps: list[str]) -> str:
    """The 'not measured yet' finding: the gaps under the template's [missing.lead] ([missing.nothing] when
    there are none), starting with a capital."""
    text = say("missing.lead", gaps="; ".join(gaps)) if gaps else say("missing.nothing")
    return text[:1].upper() + text[1:]


def listing(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = [i for i in items if i]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
