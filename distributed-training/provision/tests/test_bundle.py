"""What reaches a lent GPU, checked where the kit is built: the tree git would copy (tracked files and untracked
ones it does not ignore) plus the kit, against 64 MiB; over it, `make offline-kit` is one line and exit 2 before
anything is downloaded or built."""

import subprocess
from pathlib import Path

from provision import offline_kit
from provision.bundle import bundle_problem, kit_bytes, tree_bytes

ROOT = Path(__file__).resolve().parents[3]


def test_the_tree_is_what_git_would_copy_less_the_kit(tmp_path):
    def put(name: str, size: int) -> None:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * size)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored/\n")  # 9 bytes
    put("tracked.py", 100)
    put("ignored/big.bin", 10_000)
    put("kit/a.whl", 3_000)  # not ignored here: counted as the kit, not twice
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.py", ".gitignore"], check=True)
    put("untracked.txt", 50)
    assert tree_bytes(tmp_path, leave_out=tmp_path / "kit") == 100 + 9 + 50
    assert tree_bytes(tmp_path) == 100 + 9 + 50 + 3_000 and kit_bytes(tmp_path / "kit") == 3_000


def test_the_limit_is_the_tree_and_the_kit_together():
    mib = 2**20
    assert bundle_problem(20 * mib, 44 * mib, 64) is None
    line = bundle_problem(20 * mib, 44 * mib + 1, 64)
    assert line == ("the tree (20.0 MiB) and the kit (44.0 MiB) make 64.0 MiB, over the 64 MiB a lent machine takes "
                    "in all (BUNDLE_MIB): fewer KIT_ARCHS, or a smaller tree")


def test_make_offline_kit_stops_before_building_when_the_tree_alone_is_over(tmp_path, capsys):
    build = tmp_path / "build"
    code = offline_kit.main(["build", "--kit", str(tmp_path / "kit"), "--build", str(build), "--bundle-mib", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("offline-kit: error: the tree (") \
        and "over the 1 MiB a lent machine takes in all" in err[0]
    assert not (tmp_path / "kit").exists() and not build.exists()
    assert tree_bytes(ROOT) < 64 * 2**20  # this checkout leaves room for a kit
