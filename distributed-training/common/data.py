"""Training data that exists on every machine, with no download.

Default: a byte-level corpus (vocab 256) made of the Python standard library's own source
files, read in sorted path order, so any machine with Python has real, structured text to learn
from (code and docstrings, not random tokens). The split is by file and deterministic: every
10th file (by sorted position) is validation, so no line of validation text is ever trained on.
The corpus differs between Python versions; its SHA-256 fingerprint is recorded with results.

With `--data DIR`: nanoGPT's format, DIR/train.bin and DIR/val.bin of uint16 token ids (read
through np.memmap, so a multi-GB file costs no RAM); the vocab size is then the model's to set.

Batches are a pure function of (seed, split, step): resuming at step k, or running another
precision mode, sees exactly the same tokens, and data-parallel ranks take disjoint slices of
one global batch.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

VAL_EVERY = 10  # every 10th stdlib file goes to validation


@dataclass(frozen=True)
class TokenData:
    train: np.ndarray  # 1-D token ids
    val: np.ndarray
    vocab_size: int  # 256 for bytes; for .bin files, meta.pkl's vocab_size or the largest id seen + 1
    source: str  # human-readable origin, no machine paths
    fingerprint: str  # sha256 prefix of the token stream(s)

    def batch(self, split: str, step: int, batch_size: int, seq_len: int, seed: int = 0,
              rank: int = 0, world_size: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice of global batch `step`: x, y of shape (batch_size // world_size, seq_len).

        The global batch has `batch_size` sequences at random offsets drawn from a generator seeded
        by (seed, split, step); rank r takes rows [r*b, (r+1)*b). y is x shifted by one token.
        """
        if batch_size % world_size:
            raise ValueError(f"global batch {batch_size} is not divisible by world size {world_size}")
        data = self.train if split == "train" else self.val
        if len(data) <= seq_len + 1:
            raise ValueError(f"{split} split has {len(data)} tokens, fewer than seq_len+1 = {seq_len + 1}")
        rng = np.random.default_rng([seed, 0 if split == "train" else 1, step])
        starts = rng.integers(0, len(data) - seq_len - 1, size=batch_size)
        b = batch_size // world_size
        starts = starts[rank * b:(rank + 1) * b]
        rows = np.stack([np.asarray(data[s:s + seq_len + 1], dtype=np.int64) for s in starts])  # (b, T+1)
        t = torch.from_numpy(rows)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("site-packages", "test", "tests", "idlelib", "__pycache__")
    files = [p for p in root.rglob("*.py") if not any(part in skip for part in p.relative_to(root).parts)]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def load_stdlib_corpus(max_bytes: int = 16 << 20) -> TokenData:
    """Up to `max_bytes` of stdlib source, split by file into train/val (vocab 256)."""
    train, val, total = [], [], 0
    for i, path in enumerate(stdlib_files()):
        raw = path.read_bytes()
        (val if i % VAL_EVERY == 0 else train).append(raw)
        total += len(raw)
        if total >= max_bytes:
            break
    if not train or not val:
        raise RuntimeError("found no Python standard-library sources to build the corpus from")
    tr = np.frombuffer(b"".join(train), dtype=np.uint8)
    va = np.frombuffer(b"".join(val), dtype=np.uint8)
    fp = hashlib.sha256(tr.tobytes() + va.tobytes()).hexdigest()[:12]
    version = sysconfig.get_python_version()
    return TokenData(tr, va, 256, f"Python {version} stdlib sources ({len(tr) + len(va):,} bytes)", fp)


def load_bin_dir(path: str | Path) -> TokenData:
    """nanoGPT-style DIR/train.bin + DIR/val.bin (uint16 token ids)."""
    d = Path(path)
    missing = [n for n in ("train.bin", "val.bin") if not (d / n).is_file()]
    if missing:
        raise ValueError(f"--data {path}: missing {', '.join(missing)} (expected nanoGPT uint16 token files)")
    tr = np.memmap(d / "train.bin", dtype=np.uint16, mode="r")
    va = np.memmap(d / "val.bin", dtype=np.uint16, mode="r")
    h = hashlib.sha256()
    for arr in (tr, va):  # fingerprint the ends, not gigabytes
        h.update(np.asarray(arr[:1 << 20]).tobytes() + np.asarray(arr[-(1 << 20):]).tobytes())
    vocab = _bin_vocab(d, tr, va)
    return TokenData(tr, va, vocab, f"token files {d.name}/ ({len(tr):,} train, {len(va):,} val tokens)",
                     h.hexdigest()[:12])


def _bin_vocab(d: Path, tr: np.ndarray, va: np.ndarray) -> int:
    meta = d / "meta.pkl"  # nanoGPT's prepare.py writes {'vocab_size': ...} here for char-level sets
    if meta.is_file():
        import pickle
        with open(meta, "rb") as f:
            return int(pickle.load(f)["vocab_size"])
    # GPT-2 BPE files carry no meta.pkl; scan the head of each split (a full scan of GBs is slow).
    return int(max(tr[: 1 << 24].max(initial=0), va[: 1 << 24].max(initial=0))) + 1


def load_data(data_dir: str | None = None, max_bytes: int = 16 << 20) -> TokenData:
    return load_bin_dir(data_dir) if data_dir else load_stdlib_corpus(max_bytes)
