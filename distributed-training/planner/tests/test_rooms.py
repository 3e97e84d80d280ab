"""Each of the planner's rooms is its own map: its __init__.py's docstring lists every module and template it
holds, one line each, and nothing it does not hold (which room may import which: common/tests/test_layering.py)."""

import ast
import re
from pathlib import Path

PLANNER = Path(__file__).resolve().parents[1]
ENTRY = re.compile(r"^ {4}(\S+\.(?:py|md))\s")  # a map line: four spaces, the file's name, what it is


def map_of(room: Path) -> tuple[set[str], set[str]]:
    """(files the room's map lists, files the room holds): its .py modules (__init__ aside) and .md templates."""
    doc = ast.get_docstring(ast.parse((room / "__init__.py").read_text())) or ""
    listed = {m.group(1) for line in doc.splitlines() if (m := ENTRY.match(line))}
    held = {p.name for p in room.iterdir() if p.suffix in (".py", ".md") and p.name != "__init__.py"}
    return listed, held


def test_every_room_lists_what_it_holds():
    rooms = sorted(d.name for d in PLANNER.iterdir() if (d / "__init__.py").is_file() and not d.is_symlink())
    assert rooms == ["calibrate", "evidence", "guide", "model", "search"]
    for name in rooms:
        listed, held = map_of(PLANNER / name)
        assert held - listed == set(), f"planner/{name}/__init__.py does not list {sorted(held - listed)}"
        assert listed - held == set(), f"planner/{name}/__init__.py lists {sorted(listed - held)}, which it lacks"


def test_the_map_check_sees_a_missing_and_a_stale_line(tmp_path):
    room = tmp_path / "room"
    room.mkdir()
    (room / "__init__.py").write_text('"""A room.\n\n    a.py   the first\n    gone.py   moved away\n\n'
                                      'Import one.\n"""\n')
    for name in ("a.py", "b.py", "notes.md"):
        (room / name).write_text("")
    listed, held = map_of(room)
    assert held - listed == {"b.py", "notes.md"} and listed - held == {"gone.py"}
