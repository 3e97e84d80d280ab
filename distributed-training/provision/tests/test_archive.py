"""Results archives: a round trip keeps every byte; a damaged or foreign archive changes nothing."""

import io
import json
import tarfile

import pytest

from provision import archive, wheelhouse


def _tree(root):
    lab = root / "distributed-training" / "lab-a"
    (lab / "results" / "h100").mkdir(parents=True)
    (lab / "results" / "h100" / "steps.csv").write_text("step,loss\n0,5.5\n")
    (lab / "REPORT.md").write_text("# report\n")
    (lab / "runs" / "h100-bench").mkdir(parents=True)  # an unpublished experiment travels too
    (lab / "runs" / "h100-bench" / "bench_step.csv").write_text("d_model\n4096\n")
    (lab / "checkpoints").mkdir()
    (lab / "checkpoints" / "run.pt").write_bytes(b"\0" * 10)  # never travels
    (lab / "runs" / "h100" / "checkpoints").mkdir(parents=True)  # a run folder's checkpoints and weights: neither
    (lab / "runs" / "h100" / "checkpoints" / "fp8-native-s0.pt").write_bytes(b"\0" * 10)
    (lab / "runs" / "h100" / "checkpoints" / "initial-s0-0123.pt.tmp").write_bytes(b"\0" * 10)
    return lab


def test_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("DT_GIT_COMMIT", "abc123def456")
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    path = archive.create(tmp_path / "out", root=src)
    assert path.name.startswith("results_") and path.name.endswith(".tar.gz")
    assert all(c.isalnum() or c in "._-" for c in path.name)
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        manifest = json.loads(tar.extractfile("MANIFEST.json").read())
    lab = "distributed-training/lab-a"
    assert names == {"MANIFEST.json", f"{lab}/results/h100/steps.csv", f"{lab}/REPORT.md",
                     f"{lab}/runs/h100-bench/bench_step.csv"}
    assert manifest["commit"] in ("abc123def456",) or len(manifest["commit"]) >= 12
    info = archive.extract(path, root=dst)
    assert info["imported"] == 3
    assert (dst / "distributed-training/lab-a/results/h100/steps.csv").read_text() == "step,loss\n0,5.5\n"


def _archive_with(tmp_path, name, data, listed_hash=None):
    path = tmp_path / "bad.tar.gz"
    manifest = {"commit": "x", "machine": "m", "preset": "h100", "created_utc": "t",
                "files": {name: listed_hash or archive._sha256(data)}}
    with tarfile.open(path, "w:gz") as tar:
        for n, d in (("MANIFEST.json", json.dumps(manifest).encode()), (name, data)):
            info = tarfile.TarInfo(n)
            info.size = len(d)
            tar.addfile(info, io.BytesIO(d))
    return path


@pytest.mark.parametrize("name, listed, message", [
    ("../../etc/evil", None, "only plain files"),
    ("distributed-training/lab-a/src/bench.py", None, "not a lab's results"),
    ("distributed-training/lab-a/results/x.csv", "0" * 64, "does not match its hash"),
])
def test_bad_archives_write_nothing(tmp_path, name, listed, message):
    path = _archive_with(tmp_path, name, b"a,b\n1,2\n", listed)
    with pytest.raises(archive.ArchiveError, match=message):
        archive.extract(path, root=tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


def test_cli_reports_a_bad_archive_in_one_line(tmp_path, capsys):
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tar")
    assert archive.main(["extract", str(tmp_path / "junk.tar.gz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a readable results archive" in err


def test_wheelhouse_finds_the_sdist_on_a_simple_index():
    page = ('<a href="../../files/transformer_engine_torch-2.19.0.tar.gz#sha256=1">x</a>\n'
            '<a href="https://files.example/p/transformer_engine_torch-2.20.2.tar.gz#sha256=2">y</a>\n')
    at = "https://pypi.example/simple/transformer-engine-torch/"
    assert wheelhouse.find_sdist(page, at, "transformer-engine-torch", "2.20.2") == \
        "https://files.example/p/transformer_engine_torch-2.20.2.tar.gz"
    assert wheelhouse.find_sdist(page, at, "transformer-engine-torch", "2.19.0") == \
        "https://pypi.example/files/transformer_engine_torch-2.19.0.tar.gz"
    with pytest.raises(SystemExit, match="no transformer_engine_torch-9.9.tar.gz"):
        wheelhouse.find_sdist(page, at, "transformer-engine-torch", "9.9")
