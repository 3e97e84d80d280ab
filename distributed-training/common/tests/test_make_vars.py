"""Every variable of every make target is checked in one place (common/make_vars.py) before anything starts.

The bulk runs in this process: each target's check line as make expands it (recorded once, by running make on every
target with a stand-in PYTHON that writes its arguments and stops) is replayed with each of its variables set to an
empty value, a word, zero, a negative number, an out-of-range value and a value with spaces. What this file's own
table allows passes silently; anything else is one line naming the variable and its value, exit 2, no traceback.
The makefiles' text says which variables each target uses (through make variables and the sub-makes it runs): its
check line must list them all. A few real make runs show the same from the command line (a GPU target's variables
come before its CUDA check), that no recipe's expansion fails on a bad value before the check line runs, and that
a checkout whose path holds a space works, with paths that hold spaces.
"""

from __future__ import annotations

import random
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common import make_vars
from common.value_checks import gpu_names

ROOT = Path(__file__).resolve().parents[3]
LABS = ROOT / "distributed-training"
MAKEFILES = [ROOT / "Makefile", *sorted(LABS.glob("*/lab.mk"))]
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"}  # no nvidia-smi: NGPUS=0, as in CI

# ---- what each variable allows, in this test's own words -----------------------------------------------------
EMPTY, WORD, ZERO, NEGATIVE, SPACES, OUT = "empty", "a word", "zero", "negative", "spaces", "out of range"
CLASSES = {EMPTY: "", WORD: "abc", ZERO: "0", NEGATIVE: "-1", SPACES: "1 2"}
INT_OUT = str(2**31)  # past a C int: no count, degree or size a launch can take
LONG_NAME = "x" * 256  # past a file name's 255 bytes
UNCLOSED = "--steps '5"
# variable: (the classes it accepts, its out-of-range value or None where it has no range). SPACES for a path is
# a folder (ARCHIVE: a file) whose name holds a space, made by the test; WORD, ZERO, NEGATIVE are paths that do
# not exist, relative to the checkout.
ACCEPTS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "GPU": ((), "h300"),
    "NNODES": ((), INT_OUT),
    "NODE_RANK": ((ZERO,), "1"),  # with NNODES=1
    "MASTER_ADDR": ((WORD,), "256.0.0.1"),
    "MASTER_PORT": ((), "65536"),
    "RDZV_ID": ((WORD, ZERO, NEGATIVE), "x" * 129),
    "TP": ((), INT_OUT), "PP": ((), INT_OUT), "CP": ((), INT_OUT),
    "DP": ((), INT_OUT),  # zero: only with several nodes (test_dp_zero_is_the_worlds_rest_on_several_nodes)
    "SP": ((ZERO,), "2"),
    "NPROC": ((), "100000"),  # more than one node takes (its GPUs, or 8 gloo ranks per core)
    "P3D_ACT_NPROC": ((), "100000"),
    "FSDP_WORLDS": ((SPACES,), "100000"),
    "ARGS": ((EMPTY, WORD, ZERO, NEGATIVE, SPACES), UNCLOSED),
    "FSDP_GPU_ARGS": ((EMPTY, WORD, ZERO, NEGATIVE, SPACES), UNCLOSED),
    "FP8_WIDE_ARGS": ((EMPTY, WORD, ZERO, NEGATIVE, SPACES), UNCLOSED),
    "FP8_DEMO_ARGS": ((EMPTY, WORD, ZERO, NEGATIVE, SPACES), UNCLOSED),
    "FP8_FIRST_HALF": ((WORD, ZERO), None),
    "NCCL_TESTS": ((ZERO,), "2"),
    "ARB_2AGENTS_PORT": ((), "65536"),
    "CALIBRATE": ((EMPTY, WORD, ZERO, NEGATIVE, SPACES), None),
    "DT_SMI_TIMEOUT_S": ((), "86401"),
    "BUDGET_S": ((), "86401"),
    "GPU_PART_LIMIT_S": ((), "86401"),
    "RUNS": ((EMPTY, WORD, ZERO), None),
    "REHEARSAL": ((EMPTY, ZERO), "2"),
    "KIT": ((EMPTY, SPACES), LONG_NAME),
    "KIT_SITE": ((WORD, ZERO, NEGATIVE, SPACES), LONG_NAME),
    "ARCHIVE_DIR": ((EMPTY, WORD, ZERO, NEGATIVE, SPACES), LONG_NAME),
    "ARCHIVE": ((SPACES,), LONG_NAME),
    "BUNDLE_MIB": ((), INT_OUT),
    "KIT_PYTHON": ((), "2.7"),
    "KIT_TORCH": ((), "2.11.0.0.1"),
    "KIT_ARCHS": ((), "1000"),
    "PART": ((), "7"),
    "WHEELHOUSE": ((EMPTY, WORD, ZERO, NEGATIVE, SPACES), LONG_NAME),
    "WHEEL_PY": ((EMPTY,), "2.7"),
    "TORCHAO": ((EMPTY,), "0.18.0.0.1"),
    "TE": ((EMPTY,), "2.20.2.0.1"),
    "TE_CUDA": ((EMPTY,), "cu11"),
    "TE_CUDA_ARCHS": ((EMPTY,), "1000"),
}
BY_TARGET = {  # a target's own reading
    ("offline-kit", "KIT"): ((WORD, ZERO, NEGATIVE, SPACES), LONG_NAME),  # a folder to fill
    ("offline-install", "KIT"): ((SPACES,), LONG_NAME),  # a kit to read: required
    ("wheelhouse", "WHEELHOUSE"): ((WORD, ZERO, NEGATIVE, SPACES), LONG_NAME),  # a folder to fill: required
    ("setup-fp8", "WHEELHOUSE"): ((EMPTY, SPACES), LONG_NAME),  # wheels to read
    ("allreduce-bench-2agents", "NODE_RANK"): ((), "1"),  # its agents meet at a c10d rendezvous
}


def test_the_table_covers_every_checked_variable():
    assert set(ACCEPTS) == set(make_vars.VARIABLES)


def test_gpu_names_are_the_hardware_tables():
    from common.hardware import CHOICES
    assert gpu_names() == CHOICES


# ---- the makefiles' text: each target's recipe, each variable's definitions ---------------------------------

def _logical_lines(text: str) -> list[str]:
    out, held = [], ""
    for line in text.splitlines():
        if line.endswith("\\"):
            held += line[:-1] + " "
        else:
            out.append(held + line)
            held = ""
    return out


ASSIGN = re.compile(r"^\s*(?:override\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?:\?|:|::|\+|!)?=\s*(.*)$")
RULE = re.compile(r"^([a-z0-9][a-z0-9 .-]*?)\s*:(?!=)\s*(.*)$")
DIRECTIVE = re.compile(r"^\s*(ifeq|ifneq|ifdef|ifndef|else|endif|include|\.PHONY|\.DEFAULT_GOAL)\b")


def read_makefiles() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(rules: target -> recipe lines, defs: variable -> every text any branch or target gives it)."""
    rules: dict[str, list[str]] = {}
    defs: dict[str, list[str]] = {}
    current: list[str] = []
    for path in MAKEFILES:
        for line in _logical_lines(path.read_text()):
            if line.startswith("\t"):
                for t in current:
                    rules[t].append(line.strip())
                continue
            if not line.strip() or line.lstrip().startswith("#") or DIRECTIVE.match(line):
                continue
            if (m := ASSIGN.match(line)) is not None:
                defs.setdefault(m[1], []).append(m[2])
                current = []
            elif (m := RULE.match(line)) is not None:
                if (tv := ASSIGN.match(m[2])) is not None:  # target: VAR = value
                    defs.setdefault(tv[1], []).append(tv[2])
                    current = []
                else:
                    current = m[1].split()
                    for t in current:
                        rules.setdefault(t, [])
            else:
                current = []
    return rules, defs


RULES, DEFS = read_makefiles()
CHECKED = set(make_vars.VARIABLES)
EVERY_CHECK = DEFS["EVERY_CHECK"][0].split()
# NGPUS is what make counted (DT_SMI_TIMEOUT_S goes with every check); KIT_SITE_ABS puts KIT_SITE on every target's
# PYTHONPATH (KIT_SITE goes with every check): neither makes a target one that takes variables.
NOT_A_USE = {"NGPUS", "KIT_SITE_ABS", "MAKE", "SETUP"}
REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)[):]")
SUBMAKE = re.compile(r"\$\(MAKE\)([^;|&]*)")


def uses(text: str, seen: frozenset = frozenset()) -> set[str]:
    """The checked variables `text` uses: directly, through the variables it expands, and through the sub-makes it
    runs (less what a sub-make's command line fixes)."""
    found: set[str] = set()
    for m in SUBMAKE.finditer(text):
        fixed = {w.split("=")[0] for w in m[1].split() if re.match(r"^[A-Z_][A-Z0-9_]*=", w)}
        words = [w for w in m[1].split() if "=" not in w and not w.startswith("-")]
        for w in words:
            names = DEFS.get(w[2:-1], [""])[0].split() if w.startswith("$(") else [w]
            for name in names:
                subs = [t for t in RULES if t == name or ("$$" in name and t.startswith(name.split("$$")[0]))]
                for sub in subs:
                    if sub not in seen:
                        found |= needed(sub, seen | {sub}) - fixed
    for name in REF.findall(text):
        if name in CHECKED:
            found.add(name)
        elif name not in NOT_A_USE and name in DEFS and name not in seen:
            found |= uses(" ".join(DEFS[name]), seen | {name})
    return found


def needed(target: str, seen: frozenset = frozenset()) -> set[str]:
    return uses(" ".join(line for line in RULES[target] if "check_vars" not in line), seen | {target})


def listed(target: str) -> list[str]:
    """The variables a target's check line names (its first recipe line), LAUNCH_VARS expanded; [] without one."""
    first = RULES[target][0] if RULES[target] else ""
    m = re.match(r"^\$\(call check_vars,(.*)\)$", first)
    if m is None:
        return []
    return m[1].replace("$(LAUNCH_VARS)", DEFS["LAUNCH_VARS"][0]).split() + EVERY_CHECK


TAKES_VARIABLES = sorted(t for t in RULES if needed(t) and t != "help")  # help prints a few, runs nothing


def test_the_makefiles_are_read():
    assert {"allreduce-bench-run", "parallel-3d-run", "tp-verify", "gpu-quick", "gpu-suite", "plan"} <= \
        set(TAKES_VARIABLES)
    assert needed("parallel-3d-run") >= {"TP", "PP", "DP", "CP", "NPROC", "NNODES", "NODE_RANK", "MASTER_PORT", "ARGS"}
    assert "GPU" not in needed("allreduce-bench-2agents") and "ARB_2AGENTS_PORT" in needed("allreduce-bench-2agents")


@pytest.mark.parametrize("target", TAKES_VARIABLES)
def test_every_target_checks_every_variable_it_uses_first(target):
    """A new target, or a variable a recipe starts to use, without its check line fails here."""
    assert RULES[target][0].startswith("$(call check_vars,"), RULES[target][:2]
    assert needed(target) <= set(listed(target)), sorted(needed(target) - set(listed(target)))


def test_a_gpu_target_checks_its_variables_before_cuda():
    gpu_targets = [t for t in RULES if any(line.startswith("$(call require_cuda") for line in RULES[t])]
    assert len(gpu_targets) >= 12
    for t in gpu_targets:
        assert RULES[t][0].startswith("$(call check_vars,") and RULES[t][1].startswith("$(call require_cuda"), t


# ---- each target's check line as make expands it ---------------------------------------------------------------

RECORDER = '#!/bin/sh\nf=$(mktemp "$DT_RECORD/XXXXXX") && printf \'%s\\0\' "$@" > "$f"\nexit 3\n'


def record(tmp: Path, *variables: str) -> tuple[dict[str, list[str]], list[str]]:
    """Run make on every target that takes variables, with PYTHON a stand-in that writes its arguments and stops
    (exit 3; -k goes on to the next target): (target -> the check line's VAR=value arguments, make's other stderr
    lines). Nothing else runs: every recipe's first line is its check."""
    rec = tmp / "record"
    rec.mkdir(exist_ok=True)
    for old in rec.iterdir():
        old.unlink()
    python = tmp / "python"
    python.write_text(RECORDER)
    python.chmod(0o755)
    r = subprocess.run(["make", "-k", "SETUP=", f"PYTHON={python}", *variables, *TAKES_VARIABLES], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env={**ENV, "DT_RECORD": str(rec)})
    lines: dict[str, list[str]] = {}
    for f in rec.iterdir():
        args = f.read_text().split("\0")[:-1]
        if args[:2] == ["-m", "common.make_vars"]:
            lines[args[2]] = args[3:]
    other = [line for line in r.stderr.splitlines() if not re.match(r"^make(\[\d+\])?: \*\*\* \[.*\] Error 3$", line)]
    return lines, other


@pytest.fixture(scope="module")
def check_lines(tmp_path_factory) -> dict[str, list[str]]:
    lines, other = record(tmp_path_factory.mktemp("rec"))
    assert set(lines) == set(TAKES_VARIABLES) and other == [], other
    return lines


@pytest.fixture(scope="module")
def paths_with_spaces(tmp_path_factory) -> dict[str, str]:
    """The SPACES value of a path variable: a folder (and a file) whose names hold a space."""
    tmp = tmp_path_factory.mktemp("spaced")
    (tmp / "my folder").mkdir()
    (tmp / "my archive.tar.gz").write_bytes(b"")
    return {"folder": str(tmp / "my folder"), "file": str(tmp / "my archive.tar.gz")}


def run_check(target: str, argv: list[str], capsys) -> tuple[int, list[str]]:
    code = make_vars.main([target, *argv])
    out, err = capsys.readouterr()
    assert out == ""
    return code, err.splitlines()


def cases_of(target: str, base: list[str], spaced: dict[str, str]):
    """(variable, class, value, accepted) for every variable of `target` and every class that applies to it."""
    names = [a.partition("=")[0] for a in base if not a.startswith("NGPUS=")]
    if "NODE_RANK" in listed(target) and "NODE_RANK" not in names:
        names.append("NODE_RANK")  # given only where one sets it: tried as well
    for name in names:
        accepts, out = BY_TARGET.get((target, name), ACCEPTS[name])
        values = dict(CLASSES)
        if name in ("KIT", "KIT_SITE", "ARCHIVE_DIR", "WHEELHOUSE"):
            values[SPACES] = spaced["folder"]
        elif name == "ARCHIVE":
            values[SPACES] = spaced["file"]
        if out is not None:
            values[OUT] = out
        for cls, value in values.items():
            yield name, cls, value, cls in accepts


def replace(base: list[str], name: str, value: str) -> list[str]:
    return [a for a in base if a.partition("=")[0] != name] + [f"{name}={value}"]


def with_required(base: list[str], spaced: dict[str, str]) -> list[str]:
    """A target's defaults, with a folder or file where it has none by default (offline-kit's KIT, ...)."""
    for name, kind in (("KIT", "folder"), ("WHEELHOUSE", "folder"), ("ARCHIVE", "file")):
        if any(a.startswith(f"{name}=") for a in base):
            base = replace(base, name, spaced[kind])
    return base


@pytest.mark.parametrize("target", TAKES_VARIABLES)
def test_every_variable_of_a_target_is_refused_in_one_line(target, check_lines, paths_with_spaces, capsys,
                                                           monkeypatch):
    monkeypatch.chdir(ROOT)  # make's folder: relative paths are the checkout's
    base = with_required(check_lines[target], paths_with_spaces)
    assert run_check(target, base, capsys) == (0, []), "the defaults pass"
    wrong = []
    for name, cls, value, accepted in cases_of(target, base, paths_with_spaces):
        code, err = run_check(target, replace(base, name, value), capsys)
        if accepted and (code, err) != (0, []):
            wrong.append(f"{name}={value!r} ({cls}) should pass: {err}")
        elif not accepted and not (code == 2 and len(err) == 1 and err[0].startswith(f"error: make {target}: ")
                                   and f"{name}={value!r}" in err[0] and "; allowed: " in err[0]):
            wrong.append(f"{name}={value!r} ({cls}) should be one line naming it: exit {code}, {err}")
    assert not wrong, "\n".join(wrong)


def test_the_cases_were_counted(check_lines, paths_with_spaces):
    n = sum(1 for t in TAKES_VARIABLES for _ in cases_of(t, with_required(check_lines[t], paths_with_spaces),
                                                          paths_with_spaces))
    assert n > 1500  # every target x its variables x 5-6 classes
    print(f"\n{n} cases over {len(TAKES_VARIABLES)} targets and {len(ACCEPTS)} variables")


# Values of the same classes that no table lists: whatever they are, one line or silence, never a traceback.
WHOLE_NUMBERS = {"NNODES", "NODE_RANK", "MASTER_PORT", "TP", "PP", "DP", "CP", "NPROC", "P3D_ACT_NPROC",
                 "ARB_2AGENTS_PORT", "BUNDLE_MIB"}
LOOKALIKES = ["+4", "4.0", "1e3", "0x10", "\u0664", "1_0", " 4", "4 ", "\u22121", "00", "9" * 30, "4,8", "4;", "$4",
              "'4'", '"', "\\", "*", "..", "/", ":", "-", "\t", "nan", "inf", "true"]


@pytest.mark.parametrize("name", sorted(make_vars.VARIABLES))
def test_values_no_table_lists_are_one_line_or_silence(name, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    rng = random.Random(name)
    alphabet = "0123456789 -+.,:;/'\"\\$*ab\u0664\u2212\t"
    values = LOOKALIKES + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(40)]
    for value in values:
        code, err = run_check("a-target", [f"{name}={value}"], capsys)
        assert (code, err) == (0, []) or (code == 2 and len(err) == 1 and f"{name}={value!r}" in err[0]), \
            (value, code, err)
    if name in WHOLE_NUMBERS:
        for value in LOOKALIKES[:9] + ["9" * 30]:  # numbers written another way are refused, not read
            assert run_check("a-target", [f"{name}={value}"], capsys)[0] == 2, value


# ---- the values together ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("target, argv, needle", [
    ("x", ["NNODES=2", "NODE_RANK=2"], "NODE_RANK='2': no node of NNODES=2; allowed: 0..1"),
    ("x", ["NNODES=1", "DP=0"], "DP='0': one node (NNODES=1)"),
    ("parallel-3d-run", ["TP=2", "PP=2", "DP=2", "CP=1", "NPROC=4"], "NPROC='4': TP=2 x PP=2 x DP=2 x CP=1 is 8 ranks "
                                                                     "on one node; allowed: 8, or NPROC unset"),
    ("parallel-3d-run", ["TP=64", "PP=2", "DP=2", "CP=1", "NGPUS=8"], "TP='64': TP=64 x PP=2 x DP=2 x CP=1 is 256 "
                                                                      "ranks on one node; allowed: at most 8 (this "
                                                                      "node's 8 GPUs)"),
    ("parallel-3d-run", ["NNODES=2", "NPROC=3", "TP=2", "PP=2", "DP=0", "CP=1"],
     "does not fit NNODES=2 x NPROC=3 = 6 ranks"),
    ("tp-verify", ["TP=16", "NGPUS=8", "GPU=h100"], "TP='16': more ranks than one node takes; allowed: at most 8"),
    ("x", ["NPROC=9", "NGPUS=8"], "NPROC='9': more ranks than one node takes; allowed: at most 8 (this node's 8 GPUs)"),
    ("x", ["NNODES=1000000000", "NPROC=8", "NGPUS=8"], "NNODES='1000000000': NNODES x NPROC = 8000000000 ranks"),
    ("x", ["FSDP_WORLDS=1 2 64", "NGPUS=8"], "FSDP_WORLDS='1 2 64': a world larger than one node takes"),
])
def test_values_that_do_not_fit_each_other(target, argv, needle, capsys):
    code, err = run_check(target, argv, capsys)
    assert code == 2 and len(err) == 1 and needle in err[0], err


def test_dp_zero_is_the_worlds_rest_on_several_nodes(capsys):
    assert run_check("parallel-3d-run", ["NNODES=2", "NPROC=4", "TP=2", "PP=2", "DP=0", "CP=1"], capsys) == (0, [])
    assert run_check("parallel-3d-run", ["NNODES=2", "NPROC=4", "TP=2", "PP=2", "DP=2", "CP=1"], capsys) == (0, [])
    assert run_check("x", ["NNODES=2", "NODE_RANK=1", "MASTER_ADDR=node-0.cluster", "MASTER_PORT=29500"],
                     capsys) == (0, [])


# ---- real make runs ----------------------------------------------------------------------------------------------

def git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60).stdout


@pytest.fixture(scope="module")
def clean_tree():
    """Around the real make runs: `git status` (new files included) is as before."""
    before = git_status()
    yield
    assert git_status() == before


def make(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["make", *args, f"PYTHON={sys.executable}"], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("target, variables, needle", [
    # was: `bash: line 1: x: unbound variable`, then `launch: error: unrecognized arguments: --gpu`
    ("parallel-3d-run", ["TP=x", "GPU=cpu"], "TP='x'; allowed: a tensor-parallel degree"),
    # was: a torch traceback from the rendezvous
    ("allreduce-bench-run", ["NNODES=2", "NODE_RANK=0", "MASTER_PORT=70000"], "MASTER_PORT='70000'; allowed: a TCP "
                                                                               "port, 1..65535"),
    ("fsdp-scaling", ["NPROC=1 2"], "NPROC='1 2'"),
    ("tp-verify", ["SP=yes"], "SP='yes'; allowed: 0, 1"),
    ("parallel-3d", ["TP=2", "PP=2", "DP=2", "NPROC=4"], "NPROC='4': TP=2 x PP=2 x DP=2 x CP=1 is 8 ranks"),
    ("plan", ["ARGS=--params '7B"], "ARGS=\"--params '7B\": no closing quotation"),
    ("results-import", [], "ARCHIVE='': none given"),
    # GPU targets: their variables before the CUDA check (which, on this machine, would refuse them)
    ("fp8-train-gpu", ["NPROC=abc"], "NPROC='abc'"),
    ("gpu-quick", ["BUDGET_S=-5", "ARCHIVE_DIR=/nonexistent/out"], "BUDGET_S='-5'"),
    ("gpu-suite", ["PART=9"], "PART='9'; allowed: 1, 2, 3, 4, 5, 6, all"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_make_refuses_a_bad_variable_in_one_line_before_anything(target, variables, needle, clean_tree):
    r = make(target, *variables)
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]
    assert r.returncode == 2 and len(ours) == 1 and ours[0].startswith(f"error: make {target}: "), r.stderr
    assert needle in ours[0] and r.stdout == "" and "Traceback" not in r.stderr, r.stderr


def test_a_compound_target_checks_its_later_runners_flags_before_its_first_step(clean_tree):
    """make parallel-3d trains the one-rank baseline, then the TP x PP x DP launch: ARGS the baseline takes but the
    launch does not (TP=2 does not divide one KV head) are refused by the launch's check pass (DT_CHECK_ARGS=1, through
    common.launch) before the baseline trains, not minutes later with its rows written."""
    r = make("parallel-3d", "GPU=cpu", "ARGS=--kv-heads 1", timeout=300)
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]
    assert r.returncode == 2 and ours == ["error: --tp 2 does not divide kv-heads 1"] and r.stdout == "", r.stderr


@pytest.mark.parametrize("variables", [
    ["TP=x", "PP=", "DP=-1", "CP=1 2", "NPROC=abc", "NNODES=x", "NODE_RANK=q", "MASTER_PORT=", "SP=2", "NGPUS=x",
     "FSDP_WORLDS=a b", "P3D_ACT_NPROC=", "DT_SMI_TIMEOUT_S=x y", "BUDGET_S=", "PART=", "GPU_PART_LIMIT_S=x"],
    ["TP=1 2", "PP='", "DP=\"", "NPROC=`touch dt-ran`", "NNODES=2", "KIT_SITE=a'b c", "KIT=it's",
     "ARCHIVE_DIR=a b", "WHEELHOUSE=w'h", "CALIBRATE=a'b", "ARGS=--x 'y", "GPU=h1 00", "RUNS=a'b"],
], ids=["non-numbers", "quotes-and-spaces"])
def test_no_expansion_fails_before_the_check_line(variables, tmp_path):
    """make expands every line of a recipe before it runs the first: bad values must reach the check line, not a
    shell error in a $(shell ...) or a recipe's arithmetic first. Every target, its PYTHON a stand-in that stops."""
    lines, other = record(tmp_path, *[v.replace("dt-ran", str(tmp_path / "dt-ran")) for v in variables])
    assert other == [] and set(lines) == set(TAKES_VARIABLES), other
    assert not (tmp_path / "dt-ran").exists()  # a value is never run as a command


# ---- a checkout whose path holds a space, and paths that hold spaces ---------------------------------------------

@pytest.fixture(scope="module")
def spaced_tree(tmp_path_factory) -> Path:
    """The makefiles, common/ and planner/ (what `make plan` runs) copied into a folder whose name holds a space."""
    tree = tmp_path_factory.mktemp("copy") / "my checkout"
    skip = shutil.ignore_patterns("tests", "__pycache__", "results", "runs")
    for name in ("Makefile", "requirements.txt", "requirements-fp8.txt"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    for lab in sorted(LABS.glob("*/lab.mk")):
        (tree / lab.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lab, tree / lab.relative_to(ROOT))
    for package in ("common", "planner"):
        shutil.copytree(LABS / package, tree / "distributed-training" / package, ignore=skip, symlinks=True,
                        dirs_exist_ok=True)
    return tree


def test_a_checkout_whose_path_holds_a_space_runs_python_targets(spaced_tree):
    r = make("help", cwd=spaced_tree)
    assert r.returncode == 0 and r.stdout.startswith("Targets (variables: GPU=auto"), r.stderr
    r = make("plan", "ARGS=--help", "KIT_SITE=kit site", cwd=spaced_tree)  # PYTHONPATH holds the checkout's path
    assert r.returncode == 0 and "--params" in r.stdout and r.stderr == "", r.stderr


def printed(r: subprocess.CompletedProcess, marker: str) -> list[str]:
    """The words of the one command `make -n` printed that holds `marker`, as the shell splits them."""
    commands = r.stdout.replace("\\\n", " ").replace("${PYTHONPATH:+:$PYTHONPATH}", "").splitlines()
    found = [shlex.split(line) for line in commands if marker in line]
    assert len(found) == 1, r.stdout + r.stderr
    return found[0]


def flag(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def test_paths_with_spaces_reach_each_tool_whole(spaced_tree):
    """make -n prints each command as the shell will get it (nothing runs): every path keeps its spaces and quotes."""
    kit, site, out = "/kits/my kit", "my site", "/data/out dir"
    words = printed(make("-n", "gpu-quick", "GPU=h100", f"KIT={kit}", f"KIT_SITE={site}", f"ARCHIVE_DIR={out}",
                         "RUNS=te-fused,native", cwd=spaced_tree), "provision.gpu_quick")
    assert (flag(words, "--kit"), flag(words, "--site"), flag(words, "--archive-dir")) == \
        (kit, f"{spaced_tree}/{site}", out)
    assert f"PYTHONPATH=distributed-training:{spaced_tree}/{site}" in words
    words = printed(make("-n", "offline-install", "KIT=it's a kit", "KIT_SITE=/opt/a site", cwd=spaced_tree),
                    "offline_kit install")
    assert (flag(words, "--kit"), flag(words, "--site")) == ("it's a kit", "/opt/a site")
    words = printed(make("-n", "results-archive", f"ARCHIVE_DIR={out}", cwd=spaced_tree), "archive create")
    assert flag(words, "--out") == out
    words = printed(make("-n", "guide", "CALIBRATE=my runs/*.csv,b.csv", cwd=spaced_tree), "planner.guide")
    assert flag(words, "--calibrate") == "my runs/*.csv,b.csv"
    words = printed(make("-n", "wheelhouse", "WHEELHOUSE=/w/my wheels", cwd=spaced_tree), "provision.wheelhouse")
    assert flag(words, "--dest") == "/w/my wheels"


def test_the_check_line_imports_no_torch(check_lines):
    """One Python start without torch: it runs before every target and every sub-make."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "common.make_vars", "allreduce-bench-run",
                           *check_lines["allreduce-bench-run"]], cwd=ROOT, capture_output=True, text=True,
                          env={**ENV, "PYTHONPATH": str(LABS)}, timeout=60)
    assert proc.returncode == 0 and " torch" not in proc.stderr and "numpy" not in proc.stderr
