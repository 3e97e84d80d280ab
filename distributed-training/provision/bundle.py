"""What reaches a lent GPU: the checkout's tree and the offline kit, 64 MiB in all.

A lent machine takes a copy of the checkout (its tracked files and the untracked ones git does not ignore:
what `git ls-files --cached --others --exclude-standard` lists, about 19.4 MiB now) and the paths carried
beside it (the kit), 64 MiB together (BUNDLE_MIB). `make offline-kit` checks the tree alone before an hour of
building and the tree and the kit after it; over the limit is one line, exit 2.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class BundleError(ValueError):
    pass


def tree_bytes(root: Path = ROOT, leave_out: Path | None = None) -> int:
    """The bytes of the checkout that travel to a node: tracked files and untracked ones git does not ignore (a
    lent machine's copy takes exactly these), less those under `leave_out` (the kit, counted on its own)."""
    try:
        r = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise BundleError(f"cannot list the tree that travels with the kit (git ls-files in {root}: {e}); build "
                          "the kit in a git checkout") from None
    skip = leave_out.resolve() if leave_out else None
    total = 0
    for name in filter(None, r.stdout.decode().split("\0")):
        path = root / name
        if path.is_file() and not path.is_symlink() and not (skip and skip in path.resolve().parents):
            total += path.stat().st_size
    return total


def kit_bytes(kit: Path) -> int:
    return sum(f.stat().st_size for f in kit.rglob("*") if f.is_file()) if kit.is_dir() else 0


def bundle_problem(tree: int, kit: int, limit_mib: float) -> str | None:
    """One line when the tree and the kit together exceed what a node takes (BUNDLE_MIB), else None."""
    if tree + kit <= limit_mib * 2**20:
        return None
    return (f"the tree ({tree / 2**20:.1f} MiB) and the kit ({kit / 2**20:.1f} MiB) make {(tree + kit) / 2**20:.1f} "
            f"MiB, over the {limit_mib:g} MiB a lent machine takes in all (BUNDLE_MIB): fewer KIT_ARCHS, or a "
            "smaller tree")
