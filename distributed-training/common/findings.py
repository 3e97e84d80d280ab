"""A report's words, kept out of the code: named sentences picked by the data, a skeleton filled with sections,
and the rules that decide what a sentence may claim (one screen; a difference only outside the noise).

Every REPORT.md opens with a findings block: the answer with its numbers and hardware, what it means, what is
not measured yet. It fits one screen: at most MAX_LINES lines of WIDTH characters as rendered (`screen_lines`;
block(..., one_screen=True) refuses a longer one). A lab's findings module reads its CSVs, decides which sentence
the numbers call for, and fills it from a template of named sentences:

    # findings_template.md (one sentence per [name]; lines of a sentence are joined with a space, a blank
    # line starts a new paragraph, a line starting with '- ' a new bullet)
    [verdict.outside]
    All {n} FP8 runs end above the {seeds}-seed BF16 validation band [{lo:.4f}, {hi:.4f}].

    S = Sentences(LAB / "findings_template.md")
    S("verdict.outside", n=4, seeds=2, lo=2.4325, hi=2.437)
    block([Finding("Answer", ...), ...], one_screen=True)   # the report's opening, between markers
    read_block(Path("REPORT.md"))                           # the findings back, for README.md
    fill(LAB / "report_template.md", findings=lines, ...)   # the report: its {{name}} sections filled

The noise rule: a timing is a Spread (median and min-max over its repeated iterations); a ratio of two carries
the extremes' ratio, and only a ratio whose whole spread lies on one side of 1 is a difference (`differs`).
Times of more ranks than cores (`shares_cores`) measure the scheduler and are compared with nothing.

The markers (HTML comments, invisible when rendered) let README.md quote every report's answer
(common/readme_findings.py) without parsing prose.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import NamedTuple

START, END = "<!-- findings: generated from the CSVs; README.md quotes the Answer -->", "<!-- /findings -->"
MAX_LINES, WIDTH = 8, 110  # one screen: the opening's rendered lines
_NAME = re.compile(r"^\[([a-z0-9_.-]+)\]\s*$")
_MINUS_ZERO = re.compile(r"-0(\.0*)?(%|e[+-]?\d+)?")
GLOSSARY = Path(__file__).resolve().parent.parent.parent / "docs" / "glossary.md"


class Finding(NamedTuple):
    label: str  # Answer, What it means, Not measured yet, or a short topic
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
                    self.text[name] = _join(lines)
                name, lines = m.group(1), []
            elif name is not None and not raw.startswith("#"):
                lines.append(raw)
            # lines before the first [name] and lines starting with '#' are the template's own comments

    def __call__(self, name: str, /, **values) -> str:
        if name not in self.text:
            raise KeyError(f"{self.path.name} has no sentence [{name}]")
        return self.text[name].format(**values)

    def __contains__(self, name: str) -> bool:
        return name in self.text


def _join(lines: list[str]) -> str:
    """A sentence's lines: joined with spaces; a blank line between text is a paragraph, '- ' a new bullet."""
    out = ""
    for line in (raw.strip() for raw in lines):
        if not line:
            out += "\n\n" if out and not out.endswith("\n") else ""
        elif line.startswith("- ") and out:
            out = out.rstrip(" ") + ("" if out.endswith("\n") else "\n") + line
        else:
            out += ("" if not out or out.endswith("\n") else " ") + line
    return out.strip()


def fill(template: str | Path, **sections) -> str:
    """A report skeleton with each {{name}} replaced by its section (a string or a list of lines); a name the
    skeleton holds and no section gives, or a section it has no place for, is an error, not a silent gap."""
    text = Path(template).read_text()
    wanted = set(re.findall(r"\{\{(\w+)\}\}", text))
    if wanted != set(sections):
        raise KeyError(f"{Path(template).name}: sections missing {sorted(wanted - set(sections))}, "
                       f"unused {sorted(set(sections) - wanted)}")
    body = {k: v if isinstance(v, str) else "\n".join(v) for k, v in sections.items()}
    text = re.sub(r"\{\{(\w+)\}\}", lambda m: body[m.group(1)].rstrip(), text)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"  # an empty section leaves no gap


def rendered(text: str) -> str:
    """Markdown as a reader sees it: links as their text, no emphasis or code marks."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return text.replace("**", "").replace("`", "")


def screen_lines(lines: list[str], width: int = WIDTH) -> int:
    """How many lines of `width` characters the rendered markdown lines take."""
    return sum(max(1, math.ceil(len(rendered(line)) / width)) for line in lines)


def block(findings: list[Finding], heading: str = "## What we found", one_screen: bool = False) -> list[str]:
    """The report's opening lines: a heading, then one bullet per finding between the markers. With one_screen,
    a block longer than MAX_LINES lines of WIDTH characters is refused (the lab must say less)."""
    if not 1 <= len(findings) <= MAX_LINES:
        raise ValueError(f"a findings block has 1 to {MAX_LINES} lines, got {len(findings)}")
    bullets = [f"- **{f.label}.** {f.text}" for f in findings]
    if one_screen and (n := screen_lines(bullets)) > MAX_LINES:
        raise ValueError(f"the opening takes {n} lines of {WIDTH} characters; at most {MAX_LINES} fit one screen")
    return [heading, START] + bullets + [END, ""]


def read_block(path: str | Path) -> list[Finding]:
    """The findings of a generated document (empty where it has none)."""
    return parse_block(Path(path).read_text() if Path(path).exists() else "")


def parse_block(text: str) -> list[Finding]:
    """The findings of a generated document's text (empty where it has none)."""
    if START not in text or END not in text:
        return []
    inner = text.split(START, 1)[1].split(END, 1)[0]
    out = []
    for line in inner.strip().splitlines():
        m = re.match(r"^- \*\*(.+?)\.\*\* (.*)$", line)
        if m:
            out.append(Finding(m.group(1), m.group(2)))
    return out


def opening_lines(path: str | Path) -> int:
    """The screen lines a document's findings block takes (0 without one)."""
    return screen_lines([f"- **{f.label}.** {f.text}" for f in read_block(path)])


class Spread(NamedTuple):
    """A measured value and the min-max of its repeats (a timing: median over iterations, fastest, slowest)."""
    mid: float
    lo: float
    hi: float

    def over(self, other: Spread) -> Spread:
        """This / other, its spread the extremes' ratios: what the repeats allow the ratio to be."""
        return Spread(self.mid / other.mid, self.lo / other.hi, self.hi / other.lo)

    @property
    def differs(self) -> bool:
        """A ratio is a difference only when its whole spread lies on one side of 1."""
        return self.lo > 1 or self.hi < 1

    def overlaps(self, other: Spread) -> bool:
        return self.lo <= other.hi and other.lo <= self.hi

    def pct(self) -> str:
        """A ratio as a signed change with its spread: '+57% (+19% to +82%)'."""
        return f"{self.mid - 1:+.0%} ({self.lo - 1:+.0%} to {self.hi - 1:+.0%})"


def cores(hardware: str) -> int | None:
    """The core count a CSV's hardware column names ('<CPU> (2 cores)'), or None."""
    m = re.search(r"\((\d+) cores", str(hardware))
    return int(m.group(1)) if m else None


def shares_cores(hardware: str, ranks: int) -> bool:
    """More ranks than cores: the ranks take turns, so a time measures the scheduler, not the code."""
    n = cores(hardware)
    return n is not None and ranks > n


def oversubscribed(df) -> bool:
    """Do a result file's ranks outnumber the cores of the machine it names (its hardware and world_size columns)?"""
    return shares_cores(df["hardware"].iloc[0], int(df["world_size"].max()))


def measured_line(df) -> str:
    """Where a result file was measured, in one line: hardware, ranks, backend, versions, commit, day."""
    r = df.iloc[0]
    return (f"{r['hardware']}, {plural(int(df['world_size'].max()), 'rank')}, {r['backend']}, torch "
            f"{r['torch_version']}, CUDA {r['cuda_version']}, NCCL {r['nccl_version']}, commit {r['git_commit']}, "
            f"{str(r['timestamp_utc'])[:10]}")


def sci(x: float) -> str:
    """An error or a tolerance: '0' or one digit and an exponent."""
    return "0" if x == 0 else f"{x:.1e}"


def short_hardware(hardware: str) -> str:
    """A CSV's hardware name without trademark signs and filler words: 'Intel Xeon (2 cores)'."""
    return re.sub(r"\s+", " ", re.sub(r"\((R|TM)\)| Processor| CPU", "", str(hardware))).strip()


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def signed(fmt: str, value: float) -> str:
    """value in fmt, a value that rounds to zero without a minus ('-0%' reads as a loss that is not there)."""
    text = fmt.format(value)
    return ("+" if "+" in fmt else "") + text[1:] if _MINUS_ZERO.fullmatch(text) else text


def spread(values: list[float], fmt: str = "{:+.4f}", joiner: str = " to ") -> str:
    """'x' for one value or equal values, 'lo to hi' otherwise (in the given format)."""
    lo, hi = signed(fmt, min(values)), signed(fmt, max(values))
    return lo if lo == hi else lo + joiner + hi


def gaps_sentence(say: Sentences, gaps: list[str]) -> str:
    """The 'not measured yet' finding: the gaps under the template's [missing.lead] ([missing.nothing] when
    there are none), starting with a capital."""
    text = say("missing.lead", gaps="; ".join(gaps)) if gaps else say("missing.nothing")
    return text[:1].upper() + text[1:]


OPENING_SETS = 1  # results sets a finding speaks for by name (one screen); the others are in the body's tables


def first_sets(parts: list[str], shown: int = OPENING_SETS, sep: str = "; ") -> str:
    """An opening's clauses, one per results set (a GPU, a world size), ordered most telling first by the caller: the
    first `shown`, then how many more the body holds, so that the opening stays one screen whatever results lie
    beside the committed ones (a user's second GPU, a rerun). Repeated clauses are said once."""
    parts = list(dict.fromkeys(p for p in parts if p))
    rest = len(parts) - shown
    more = f"{sep}{rest} more set{'s' if rest > 1 else ''} below" if rest > 0 else ""
    return sep.join(parts[:shown]) + more


def listing(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = [i for i in items if i]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
