"""The repository's layering, read from its imports (ast over every .py under distributed-training/, tests too).

    labs  ->  planner  ->  common   <-  provision
    tests ->  testkit  ->  common

A lab (a folder of scripts run with PYTHONPATH=distributed-training) imports its own modules by plain name,
and `planner` and `common` by name; the planner imports only `common` (and itself, relatively or as
planner.x); common imports neither a lab nor the planner nor provision. provision (installing, the offline
kit, doctor, gpu-quick, the results archive) imports only common: it runs the labs through their command
lines, and no lab imports it. testkit is test support (forked gloo ranks, the bad-input and damaged-report
checks, GPU stand-ins): it imports only common, and only tests import it (a file under a tests/ folder, or
conftest.py), never a runner, a report or a shared package at run time. Inside the planner, its rooms
(PLANNER_ROOMS) stand on each other in one order:

    guide  ->  evidence  ->  search, calibrate  ->  model

the cost model imports no other room and reads no file (a measured row reaches it only as a Cluster's figures),
the search and calibration import the model only, the evidence never the guide; at the planner's top stand only
its entry points (plan.py), which no room imports. Nothing goes around the import system: no
sys.path edit and no import of a file by its path, so what the imports show is what runs. Old code (an older
commit's planner, an older fp8_linear.py whose kernels are counted) runs one way only: common/at_commit.py exports
that commit's tree and runs a module there with `python -m`, a process of its own, never loaded into this one;
no other file reads a commit's files (`git show`, `git archive`).
The root conftest.py is the test harness: it puts the lab under test on sys.path, as running one of its scripts
would. ALLOWED holds these two exceptions and no other.

Each rule is checked on a small tree built here first, so that a checker that finds nothing fails.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from typing import NamedTuple

LABS = Path(__file__).resolve().parents[2]
REPO = LABS.parent
SHARED = ("common", "planner", "provision", "testkit")
# of the other shared packages (and every file under a tests/ folder may import testkit)
MAY_IMPORT = {"common": set(), "planner": {"common"}, "provision": {"common"}, "testkit": {"common"}}
TEST_SUPPORT = "testkit"
# Names that import a file by its path, or put a folder on the import path.
PATH_LOADERS = {"spec_from_file_location", "SourceFileLoader", "SourcelessFileLoader", "run_path", "load_source",
                "addsitedir"}
LOADER_MODULES = {"importlib", "runpy", "imp", "site"}  # where those names live
OLD_CODE = {"show", "archive"}  # git commands that read a commit's files: old code, which runs one way only
ALLOWED = {  # file (relative to the repository) -> the one kind of path use it keeps, and why
    "conftest.py": "sys.path",  # the harness: a lab's folder on sys.path while its tests run
    "distributed-training/common/at_commit.py": "git archive",  # the one way old code runs: its commit's tree
}


class Imported(NamedTuple):
    line: int
    name: str  # the top-level module: `common` for `from common.dist import x`
    relative: bool


def python_files(root: Path) -> list[Path]:
    """Every .py below root, not following links (each lab's `common` is a link to ../common)."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        out += [Path(folder) / f for f in sorted(files) if f.endswith(".py")]
    return out


def imports(path: Path) -> list[Imported]:
    """Every import in the file, at any depth, and importlib.import_module / __import__ of a literal name."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [Imported(node.lineno, a.name.split(".")[0], False) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append(Imported(node.lineno, (node.module or "").split(".")[0], node.level > 0))
        elif isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__") and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            out.append(Imported(node.lineno, node.args[0].value.split(".")[0], node.args[0].value.startswith(".")))
    return out


def _called(call: ast.Call) -> str:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else ""


def dotted(path: Path, root: Path) -> str:
    """planner/model/costs.py -> planner.model.costs (relative to root)."""
    return ".".join(path.relative_to(root).with_suffix("").parts)


def modules_of(folder: Path) -> set[str]:
    """The names a lab's scripts import each other by: its .py files, its packages, and its tests/ folder's files."""
    names = {p.stem for p in folder.glob("*.py")} | {p.stem for p in (folder / "tests").glob("*.py")}
    names |= {p.parent.name for p in folder.glob("*/__init__.py") if not p.parent.is_symlink()}  # a lab's rooms
    return names - set(sys.stdlib_module_names)


def layering_violations(root: Path) -> list[str]:
    """One line per import that breaks the layering of the tree under root (labs -> planner -> common)."""
    labs = {d.name: modules_of(d) for d in sorted(root.iterdir())
            if d.is_dir() and not d.is_symlink() and d.name not in SHARED and not d.name.startswith((".", "_"))}
    owner: dict[str, str] = {}  # module name -> the lab(s) holding one
    for lab, names in labs.items():
        for name in names:
            owner[name] = f"{owner[name]}, {lab}" if name in owner else lab
    own = {part: {p.stem: dotted(p, root) for p in sorted(python_files(root / part), reverse=True)
                  if p.stem not in ("__init__", "__main__") and p.stem not in sys.stdlib_module_names}
           for part in SHARED}  # name -> where it lives (planner.model.costs): a shared package has inner rooms
    out = []
    for path in python_files(root):
        rel = path.relative_to(root)
        part = rel.parts[0]
        in_tests = "tests" in rel.parts[:-1] or rel.name == "conftest.py"
        for imp in imports(path):
            if imp.relative or not imp.name:
                continue
            if imp.name == TEST_SUPPORT and part != TEST_SUPPORT:
                if not in_tests:
                    out.append(f"{rel}:{imp.line}: {part} imports {TEST_SUPPORT} outside its tests (test support: "
                               "only tests import it)")
                continue
            if part in SHARED:
                if imp.name in SHARED and imp.name != part and imp.name not in MAY_IMPORT[part]:
                    out.append(f"{rel}:{imp.line}: {part} imports {imp.name}")
                elif imp.name in owner:
                    out.append(f"{rel}:{imp.line}: {part} imports {imp.name}, a module of {owner[imp.name]}")
                elif imp.name in own[part]:
                    out.append(f"{rel}:{imp.line}: {part} imports its own {imp.name} by a bare name; "
                               f"import it as {own[part][imp.name]}")
                elif part == "common" and imp.name in own["planner"]:
                    out.append(f"{rel}:{imp.line}: common imports the planner's {imp.name}")
            elif part in labs and imp.name not in labs[part]:
                if imp.name == "provision":
                    out.append(f"{rel}:{imp.line}: {part} imports provision (a tool that runs labs, never a "
                               "dependency of one)")
                elif imp.name in owner:
                    out.append(f"{rel}:{imp.line}: {part} imports {imp.name}, a module of {owner[imp.name]}")
                elif imp.name in own["planner"]:  # works only with the planner's folder on sys.path
                    out.append(f"{rel}:{imp.line}: {part} imports the planner's {imp.name} by a bare name; "
                               f"import it as {own['planner'][imp.name]}")
    return out


def path_uses(path: Path) -> list[tuple[int, str]]:
    """(line, what) for each use of sys.path and each loader of a file by its path, in the code (never in
    comments or strings: the file's syntax tree is read)."""
    tree = ast.parse(path.read_text(), str(path))
    loaders = _names_bound_to(tree, LOADER_MODULES)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                and node.value.id == "sys":
            out.append((node.lineno, "sys.path"))
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names):
            out.append((node.lineno, "sys.path"))
        elif isinstance(node, ast.Attribute) and node.attr == "syspath_prepend":  # pytest's monkeypatch
            out.append((node.lineno, "sys.path"))
        elif isinstance(node, ast.Attribute) and node.attr in PATH_LOADERS and _root(node) in loaders:
            out.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LOADER_MODULES:
            out += [(node.lineno, a.name) for a in node.names if a.name in PATH_LOADERS]
        elif isinstance(node, (ast.List, ast.Tuple)) and _git_command(node) in OLD_CODE:
            out.append((node.lineno, f"git {_git_command(node)}"))
    return out


def _git_command(node: ast.List | ast.Tuple) -> str:
    """The subcommand of a command written as ["git", options..., "show", ...] ("" for any other list)."""
    words = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else "" for e in node.elts]
    if words[:1] != ["git"]:
        return ""
    rest = iter(words[1:])
    for word in rest:
        if word in ("-C", "-c"):
            next(rest, None)  # the option's value
        elif not word.startswith("-"):
            return word
    return ""


def _names_bound_to(tree: ast.Module, modules: set[str]) -> set[str]:
    """The local names under which the file holds one of `modules` (or a submodule): `u` for
    `import importlib.util as u`, `importlib` for `import importlib.util`, `util` for `from importlib import util`."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in modules}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in modules:
            out |= {a.asname or a.name for a in node.names}
    return out


def _root(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def path_import_violations(files: list[Path], base: Path, allowed: dict[str, str]) -> list[str]:
    out = []
    for path in files:
        rel = path.relative_to(base).as_posix()
        out += [f"{rel}:{line}: {what}" for line, what in path_uses(path) if allowed.get(rel) != what]
    return out


# ---- the checkers, on a tree made here -------------------------------------------------------------------------

def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


CLEAN = {
    "common/__init__.py": "", "common/dist.py": "import os\nfrom common import hardware\n",
    "common/hardware.py": "from .dist import x\n",
    "planner/__init__.py": "", "planner/costs.py": "import numpy\nfrom common.dist import x\nfrom . import shapes\n",
    "planner/shapes.py": "from planner.costs import y\n",
    "lab-a/report.py": "import bench\nfrom common import dist\nfrom planner import costs\n",
    "lab-a/bench.py": "import torch\n",
    "lab-a/tests/test_report.py": "import report\nimport fake\nfrom testkit import run_ranks\n",
    "testkit/__init__.py": "from .ranks import run_ranks\n", "testkit/ranks.py": "from common.dist import x\n",
    "common/tests/test_dist.py": "from testkit import run_ranks\n",
    "lab-a/tests/fake.py": "", "lab-b/train.py": "import report\n", "lab-b/report.py": "",
}


def test_the_layering_checker_passes_a_clean_tree_and_names_each_break(tmp_path):
    root = _tree(tmp_path, CLEAN)
    (root / "lab-b" / "common").symlink_to("../common")  # as in the repository: read once, not per lab
    assert layering_violations(root) == []
    _tree(root, {"common/dist.py": "from planner.costs import x\n",
                 "common/hardware.py": "def f():\n    import report\n",
                 "planner/costs.py": "import importlib\nimportlib.import_module('bench')\n",
                 "planner/shapes.py": "import costs\n",
                 "lab-b/train.py": "import bench\nimport shapes\n",
                 "lab-b/report.py": "from provision import archive\n",
                 "lab-a/bench.py": "from testkit import run_ranks\n",
                 "common/results.py": "from testkit.ranks import free_port\n",
                 "testkit/ranks.py": "from planner import costs\n",
                 "provision/kit.py": "from planner import costs\nfrom common import dist\n"})
    assert layering_violations(root) == [
        "common/dist.py:1: common imports planner",
        "common/hardware.py:2: common imports report, a module of lab-a, lab-b",
        "common/results.py:1: common imports testkit outside its tests (test support: only tests import it)",
        "lab-a/bench.py:1: lab-a imports testkit outside its tests (test support: only tests import it)",
        "lab-b/report.py:1: lab-b imports provision (a tool that runs labs, never a dependency of one)",
        "lab-b/train.py:1: lab-b imports bench, a module of lab-a",
        "lab-b/train.py:2: lab-b imports the planner's shapes by a bare name; import it as planner.shapes",
        "planner/costs.py:2: planner imports bench, a module of lab-a",
        "planner/shapes.py:1: planner imports its own costs by a bare name; import it as planner.costs",
        "provision/kit.py:1: provision imports planner",
        "testkit/ranks.py:1: testkit imports planner"]


def test_the_path_checker_reads_code_not_comments(tmp_path):
    root = _tree(tmp_path, {
        "a.py": "import sys\n# sys.path.append('x') in a comment\ns = 'sys.path.insert'\nsys.path.insert(0, 'x')\n",
        "b.py": "import importlib.util as u\nspec = u.spec_from_file_location('m', 'm.py')\n",
        "c.py": "from importlib.util import spec_from_file_location as load\n",
        "d.py": "import runpy\nrunpy.run_path('x.py')\n", "e.py": "from sys import path\n",
        "e2.py": "def test(monkeypatch):\n    monkeypatch.syspath_prepend('planner')\n",
        "f.py": "import sys\nimport importlib\nimportlib.import_module('json')\nprint(sys.argv)\n",
        "g.py": "run_path = 'out'\nprint(folder.run_path, run_path)\n",  # a variable of that name is no loader
        "h.py": "import subprocess\nsubprocess.run(['git', 'show', f'{c}:x.py'])\n",  # old code read from git
        "i.py": "cmd = ('git', '-C', 'r', 'archive', 'HEAD')\nlog = ['git', 'log', 'show']\n"})  # log reads no files
    files = python_files(root)
    assert path_import_violations(files, root, {}) == [
        "a.py:4: sys.path", "b.py:2: spec_from_file_location", "c.py:1: spec_from_file_location",
        "d.py:2: run_path", "e.py:1: sys.path", "e2.py:2: sys.path", "h.py:2: git show", "i.py:1: git archive"]
    assert path_import_violations(files, root, {"b.py": "spec_from_file_location"})[1:2] == [
        "c.py:1: spec_from_file_location"]


# ---- the repository ---------------------------------------------------------------------------------------------

def test_labs_then_planner_then_common_and_provision_beside_the_planner():
    assert layering_violations(LABS) == []


def test_no_sys_path_edit_and_no_file_path_import():
    files = python_files(LABS) + [REPO / "conftest.py"]
    assert path_import_violations(files, REPO, ALLOWED) == []
    for rel, what in ALLOWED.items():  # each exception is still needed, or it goes from the list
        assert what in {w for _, w in path_uses(REPO / rel)}, rel


# ---- inside a lab: its rooms ------------------------------------------------------------------------------------
# A lab with rooms (its packages) keeps them layered: each room imports only the rooms named here (relative imports
# resolved too), no room imports one of the lab's top-level scripts (the commands users run, which may import any
# room, as its tests may), and every room has a rule. ONLY narrows what a room may import of another.
ROOMS = {"fp8-train": {
    "precision": set(),  # the arithmetic and the backend records: no loop around them
    "health": set(),  # metrics, alerts, panels, the dashboard's page: whatever precision ran
    "training": {"precision", "health"},
    "benchmarks": {"training", "precision", "health"},  # time the step a run takes
    "reporting": {"precision", "health"},  # reads CSVs, never a run
}}
ONLY = {  # (lab, room, a room it imports) -> the only modules of that room it may import
    ("fp8-train", "reporting", "precision"): {"modes", "backends", "formats"},  # names, never the layers that run
    ("fp8-train", "reporting", "health"): {"panels"},  # the panels it draws, not the metrics or alerts of a run
}


def rooms_of(lab: Path) -> set[str]:
    return {p.parent.name for p in lab.glob("*/__init__.py") if not p.parent.is_symlink()}


def dotted_imports(path: Path, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, dotted name) of each import, relative ones resolved against the file's package: in precision/,
    `from .formats import E4M3` -> precision.formats.E4M3, `from precision import modes` -> precision.modes."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) + 1 - node.level]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__") and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            out.append((node.lineno, node.args[0].value))  # a literal name: an import all the same
    return out


def room_violations(root: Path, rules: dict[str, dict[str, set[str]]],
                    only: dict[tuple[str, str, str], set[str]]) -> list[str]:
    """One line per room without a rule, rule without a room, and import that breaks a lab's rooms."""
    out = []
    for lab, allowed in rules.items():
        rooms, scripts = rooms_of(root / lab), {p.stem for p in (root / lab).glob("*.py")}
        out += [f"{lab}/{r}: a room with no rule" for r in sorted(rooms - set(allowed))]
        out += [f"{lab}/{r}: a rule for no room" for r in sorted(set(allowed) - rooms)]
        for path in python_files(root / lab):
            rel = path.relative_to(root / lab)
            if rel.parts[0] not in rooms:
                continue
            room = rel.parts[0]
            for line, dotted in dotted_imports(path, rel.parts[:-1]):
                top, _, rest = dotted.partition(".")
                keep = only.get((lab, room, top))
                where = f"{lab}/{rel.as_posix()}:{line}: {room} imports"
                if top in scripts:
                    out.append(f"{where} the command {top}.py")
                elif top in rooms and top != room and top not in allowed.get(room, set()):
                    out.append(f"{where} {top}")
                elif keep is not None and rest.split(".")[0] not in keep:
                    out.append(f"{where} {top}.{rest.split('.')[0]}, not one of {top}'s {', '.join(sorted(keep))}")
    return out


ROOMY = {
    "common/__init__.py": "", "lab-r/train.py": "from training import runner\nfrom precision.modes import LOW\n",
    "lab-r/precision/__init__.py": "", "lab-r/precision/modes.py": "from . import formats\n",
    "lab-r/precision/formats.py": "import torch\nfrom common.dist import x\n",
    "lab-r/precision/prepare.py": "from precision.formats import E4M3\n",
    "lab-r/training/__init__.py": "", "lab-r/training/loop.py": "",
    "lab-r/training/runner.py": "from precision import prepare\nfrom .loop import run\n",
    "lab-r/reporting/__init__.py": "",
    "lab-r/reporting/sections.py": "from precision import modes\nfrom precision.formats import E4M3\n",
    "lab-r/tests/test_runner.py": "import train\nfrom training import loop\nfrom precision import prepare\n",
}
RULES = {"lab-r": {"precision": set(), "training": {"precision"}, "reporting": {"precision"}, "bench": set()}}


def test_the_room_checker_passes_a_clean_lab_and_names_each_break(tmp_path):
    root = _tree(tmp_path, ROOMY)
    (root / "lab-r" / "common").symlink_to("../common")  # a linked package is no room of the lab
    only = {("lab-r", "reporting", "precision"): {"modes", "formats"}}
    assert room_violations(root, RULES, only) == ["lab-r/bench: a rule for no room"]
    _tree(root, {"lab-r/precision/prepare.py": "from training.loop import run\n",
                 "lab-r/precision/formats.py": "def f():\n    import train\n",
                 "lab-r/reporting/sections.py": "from precision import modes, prepare\nfrom ..training import loop\n",
                 "lab-r/reporting/plots.py": "import precision.prepare\nfrom precision import LOW\n",
                 "lab-r/health/__init__.py": ""})
    assert room_violations(root, RULES, only) == [
        "lab-r/health: a room with no rule", "lab-r/bench: a rule for no room",
        "lab-r/precision/formats.py:2: precision imports the command train.py",
        "lab-r/precision/prepare.py:1: precision imports training",
        "lab-r/reporting/plots.py:1: reporting imports precision.prepare, not one of precision's formats, modes",
        "lab-r/reporting/plots.py:2: reporting imports precision.LOW, not one of precision's formats, modes",
        "lab-r/reporting/sections.py:1: reporting imports precision.prepare, not one of precision's formats, modes",
        "lab-r/reporting/sections.py:2: reporting imports training"]


def test_inside_a_lab_each_room_imports_only_the_rooms_its_rule_names():
    assert room_violations(LABS, ROOMS, ONLY) == []


def test_the_common_package_indexes_every_module_in_one_line():
    """common/__init__.py is the package's map: every module named once, on one line of its own."""
    text = (LABS / "common" / "__init__.py").read_text()
    listed = [line.split()[0] for line in text.splitlines() if line.startswith("    ") and len(line.split()) > 1
              and line[4] != " " and line.split()[0].isidentifier()]
    assert sorted(listed) == sorted(p.stem for p in (LABS / "common").glob("*.py") if p.stem != "__init__")


# ---- inside the planner: its rooms ------------------------------------------------------------------------------
# The planner's rooms stand model first (the module docstring): each imports only the rooms PLANNER_ROOMS names, the
# model no reader of a file, no room an entry point; every module of the planner lives in a room or is an entry
# point, and a room's __init__.py imports nothing (its docstring is the room's map).
PLANNER_ROOMS = {  # the planner's inner packages -> the rooms each may import
    "model": set(),  # what a plan costs: pure functions of shape, cluster and stack
    "calibrate": {"model"},  # measurements of your cluster become a Cluster's figures
    "search": {"model"},  # enumerate, price, choose
    "evidence": {"model", "calibrate", "search"},  # the model beside published and measured runs
    "guide": {"model", "calibrate", "search", "evidence"},  # the documents
}
PLANNER_ENTRIES = {"plan"}  # the planner's top holds its entry points (and __init__), which no room imports
FILE_READERS = ("csv", "pandas", "common.csvread", "common.runs", "common.results")  # what reads a result file


def planner_room_violations(planner: Path) -> list[str]:
    """One line per import that breaks the planner's inner layering (PLANNER_ROOMS), per module outside a room, and
    per room whose __init__.py imports (its docstring is the room's map; importing a room stays cheap)."""
    out = []
    for path in python_files(planner):
        rel = path.relative_to(planner.parent)
        inner = path.relative_to(planner).parts
        if inner[0] == "tests":
            continue
        room = inner[0] if len(inner) > 1 else None
        if room is None and path.stem not in PLANNER_ENTRIES | {"__init__"}:
            out.append(f"{rel}: a module outside the planner's rooms ({', '.join(PLANNER_ROOMS)}) and not an entry "
                       "point")
            continue
        if room is not None and room not in PLANNER_ROOMS:
            out.append(f"{rel}: planner/{room}/ is not one of the planner's rooms ({', '.join(PLANNER_ROOMS)})")
            continue
        for line, name in dotted_imports(path, ("planner",) + inner[:-1]):
            if room is not None and len(inner) == 2 and inner[1] == "__init__.py" \
                    and not name.startswith("__future__"):
                out.append(f"{rel}:{line}: a room's __init__ imports nothing (its docstring is the map), not {name}")
            parts = name.split(".")
            if parts[0] == "planner" and room is not None and len(parts) > 1 and parts[1] != room:
                if parts[1] in PLANNER_ENTRIES:
                    out.append(f"{rel}:{line}: planner.{room} imports {name}, an entry point")
                elif parts[1] not in PLANNER_ROOMS[room]:
                    out.append(f"{rel}:{line}: planner.{room} imports planner.{parts[1]}")
            if room == "model" and any(name == r or name.startswith(r + ".") for r in FILE_READERS):
                out.append(f"{rel}:{line}: planner.model imports {name}: the cost model reads no file (a measured "
                           "row reaches it as a Cluster's figures, planner.calibrate)")
    return out


PLANNER_CLEAN = {
    "planner/__init__.py": "", "planner/plan.py": "from planner.search import search\nfrom planner.evidence import x\n",
    "planner/model/__init__.py": "from __future__ import annotations\n",
    "planner/model/costs.py": "import numpy\nfrom common.collective_cost import x\nfrom . import shapes\n",
    "planner/model/shapes.py": "from planner.model.costs import y\nfrom common.model import GPTConfig\n",
    "planner/calibrate/__init__.py": "",
    "planner/calibrate/network.py": "import pandas\nfrom ..model import cluster\n",
    "planner/search/__init__.py": "", "planner/search/search.py": "from ..model.costs import step_costs\n",
    "planner/evidence/__init__.py": "",
    "planner/evidence/runs.py": "import csv\nfrom planner.search import search\n"
                                "from planner.calibrate import gemm_rates\n",
    "planner/guide/__init__.py": "",
    "planner/guide/guide.py": "from planner import evidence, model\nfrom ..search import x\n",
    "planner/guide/__main__.py": "from .guide import main\n",
    "planner/tests/test_plan.py": "from planner import plan\n",
}


def test_the_planner_room_checker_passes_clean_rooms_and_names_each_break(tmp_path):
    planner = _tree(tmp_path, PLANNER_CLEAN) / "planner"
    assert planner_room_violations(planner) == []
    _tree(tmp_path, {"planner/model/costs.py": "from planner.search.search import Pins\n",
                     "planner/model/shapes.py": "def f():\n    from ..evidence import runs\n",
                     "planner/model/memory.py": "import csv\nfrom common.csvread import read_rows\n",
                     "planner/search/search.py": "from planner.calibrate import network\n",
                     "planner/calibrate/network.py": "from planner import search\n",
                     "planner/evidence/runs.py": "import importlib\nimportlib.import_module('planner.guide.guide')\n",
                     "planner/guide/guide.py": "from planner import plan\n",
                     "planner/search/__init__.py": "from .search import search\n",
                     "planner/helpers.py": "", "planner/extra/x.py": ""})
    assert planner_room_violations(planner) == [
        "planner/helpers.py: a module outside the planner's rooms (model, calibrate, search, evidence, guide) and not "
        "an entry point",
        "planner/calibrate/network.py:1: planner.calibrate imports planner.search",
        "planner/evidence/runs.py:2: planner.evidence imports planner.guide",
        "planner/extra/x.py: planner/extra/ is not one of the planner's rooms (model, calibrate, search, evidence, "
        "guide)",
        "planner/guide/guide.py:1: planner.guide imports planner.plan, an entry point",
        "planner/model/costs.py:1: planner.model imports planner.search",
        "planner/model/memory.py:1: planner.model imports csv: the cost model reads no file (a measured row reaches it "
        "as a Cluster's figures, planner.calibrate)",
        "planner/model/memory.py:2: planner.model imports common.csvread.read_rows: the cost model reads no file (a "
        "measured row reaches it as a Cluster's figures, planner.calibrate)",
        "planner/model/shapes.py:2: planner.model imports planner.evidence",
        "planner/search/__init__.py:1: a room's __init__ imports nothing (its docstring is the map), not "
        "planner.search.search.search",
        "planner/search/search.py:1: planner.search imports planner.calibrate"]


def test_the_planners_rooms_stand_model_first():
    assert planner_room_violations(LABS / "planner") == []
