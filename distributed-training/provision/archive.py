"""Results that travel: one .tar.gz of every lab's results, plots and reports, and its import.

A GPU node is often lent for a short job with no way back but a copied file (a Slurm job's output
folder, a cloud VM given back at the end). `make results-archive` packs what the labs wrote there
into one archive; `make results-import ARCHIVE=...` unpacks it into a checkout on any machine and
regenerates the reports there with the pinned pandas/matplotlib (the CSVs are the results; reports
and plots are always regenerated from them).

    make results-archive                         # -> results_<tag>_<commit>_<UTC>.tar.gz in the repo root
    make results-archive ARCHIVE_DIR=$OUT        # somewhere else (what a GPU job copies back)
    make results-import ARCHIVE=results_h100_1a2b3c4d5e6f_20261122T2310Z.tar.gz

What goes in: every lab's `results/` folder and its `plots/`, `REPORT.md`, `TOPOLOGY.md`, its `runs/`
(runs not published into results/, e.g. experiments with non-preset flags: `python -m common.runs`
publishes them after import), and a MANIFEST.json naming the commit (git, or DT_GIT_COMMIT on a
node without .git), the machine and the time, with a SHA-256 per file. Checkpoints never travel: a run keeps
them in its run folder (runs/<tag>/checkpoints/, with the initial-weights cache of a big model: tens of GB at
the GPU presets' size), and no `checkpoints/` folder nor any *.pt or *.tmp file goes into an archive. The file name uses letters, digits, '.', '_' and '-' only,
so any copy tool keeps it intact.

Import is strict: members must be regular files under `distributed-training/<lab>/` (no absolute
paths, no '..', no links), and each must match the manifest's hash; anything else is one line and
exit code 2, with nothing written.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import tarfile
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from common.hardware import describe_hardware, detect_preset
from common.results import REPO_ROOT, git_commit

LABS = REPO_ROOT / "distributed-training"
CARRIED = ("results", "plots", "runs", "REPORT.md", "TOPOLOGY.md")
NEVER_DIRS = {"checkpoints"}  # folders that stay where they are: a run's checkpoints
NEVER_SUFFIXES = (".pt", ".tmp")  # checkpoints and weights anywhere, half-written files
MANIFEST = "MANIFEST.json"


class ArchiveError(ValueError):
    pass


def collect(labs: Path = LABS) -> list[Path]:
    """Every file that travels, relative to the repository root, sorted."""
    out = []
    for lab in sorted(p for p in labs.iterdir() if p.is_dir() and not p.is_symlink()):
        for name in CARRIED:
            target = lab / name
            if target.is_file():
                out.append(target)
            elif target.is_dir():
                out += [f for f in sorted(target.rglob("*")) if f.is_file() and not f.is_symlink()
                        and f.suffix not in NEVER_SUFFIXES and not NEVER_DIRS & set(f.relative_to(target).parts)]
    return [f.relative_to(labs.parent) for f in out]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def archive_name(tag: str, commit: str, now: datetime) -> str:
    safe = lambda s: re.sub(r"[^A-Za-z0-9.-]+", "-", s).strip("-") or "unknown"  # noqa: E731
    return f"results_{safe(tag)}_{safe(commit)}_{now.strftime('%Y%m%dT%H%MZ')}.tar.gz"


def create(out_dir: Path, root: Path = REPO_ROOT) -> Path:
    files = collect(root / "distributed-training")
    now = datetime.now(timezone.utc)
    commit = git_commit()
    manifest = {"commit": commit, "machine": describe_hardware(), "preset": detect_preset().tag,
                "created_utc": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "files": {str(PurePosixPath(f)): _sha256((root / f).read_bytes()) for f in files}}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / archive_name(manifest["preset"], commit, now)
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        blob = json.dumps(manifest, indent=2, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mtime = len(blob), int(now.timestamp())
        tar.addfile(info, io.BytesIO(blob))
        for f in files:
            tar.add(root / f, arcname=str(PurePosixPath(f)), recursive=False)
    tmp.replace(path)
    return path


def _check_member(m: tarfile.TarInfo, expected: dict[str, str]) -> None:
    p = PurePosixPath(m.name)
    if not m.isfile() or p.is_absolute() or ".." in p.parts:
        raise ArchiveError(f"refusing member {m.name!r}: only plain files with relative paths are imported")
    if len(p.parts) < 3 or p.parts[0] != "distributed-training" or p.parts[2] not in CARRIED:
        raise ArchiveError(f"refusing member {m.name!r}: not a lab's results, plots or report")
    if m.name not in expected:
        raise ArchiveError(f"member {m.name!r} is not listed in {MANIFEST}")


def extract(archive: Path, root: Path = REPO_ROOT) -> dict:
    """Check everything first, then write: a bad archive changes nothing."""
    if not archive.is_file():
        raise ArchiveError(f"no archive at {archive}")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            by_name = {m.name: m for m in members}
            if MANIFEST not in by_name:
                raise ArchiveError(f"{archive.name} has no {MANIFEST}: not made by `make results-archive`")
            manifest = json.loads(tar.extractfile(by_name[MANIFEST]).read())
            payload = {}
            for m in members:
                if m.name == MANIFEST:
                    continue
                _check_member(m, manifest["files"])
                data = tar.extractfile(m).read()
                if _sha256(data) != manifest["files"][m.name]:
                    raise ArchiveError(f"{m.name} does not match its hash in {MANIFEST} (a damaged copy)")
                payload[m.name] = data
    except (tarfile.TarError, OSError, EOFError, json.JSONDecodeError, KeyError) as e:
        raise ArchiveError(f"{archive.name} is not a readable results archive ({type(e).__name__}: {e})") from None
    for name, data in payload.items():
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return {**manifest, "imported": len(payload)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="archive", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create", help="pack every lab's results into one .tar.gz")
    c.add_argument("--out", default=str(REPO_ROOT), help="folder for the archive")
    x = sub.add_parser("extract", help="unpack an archive into this checkout")
    x.add_argument("archive", help="a file made by `archive create`")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "create":
            path = create(Path(args.out))
            print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")
        else:
            m = extract(Path(args.archive))
            print(f"imported {m['imported']} files measured on {m['machine']} at commit {m['commit']} "
                  f"({m['created_utc']})")
    except ArchiveError as e:
        print(f"archive: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
