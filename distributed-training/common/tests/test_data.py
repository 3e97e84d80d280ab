"""The corpus and the batches: deterministic, split by file, disjoint across data-parallel ranks."""

import numpy as np
import pytest
import torch

from common.data import load_bin_dir, load_data, load_stdlib_corpus


@pytest.fixture(scope="module")
def corpus():
    return load_stdlib_corpus(max_bytes=2 << 20)


def test_stdlib_corpus_is_real_text_and_deterministic(corpus):
    again = load_stdlib_corpus(max_bytes=2 << 20)
    assert corpus.fingerprint == again.fingerprint and corpus.vocab_size == 256
    assert len(corpus.train) > 8 * len(corpus.val) / 2 > 0
    assert b"def " in corpus.train[:200_000].tobytes()
    assert corpus.source.startswith("Python ") and "/" not in corpus.source  # no machine paths in results


def test_batches_are_a_function_of_step_and_ranks_split_the_global_batch(corpus):
    x, y = corpus.batch("train", step=7, batch_size=8, seq_len=32, seed=3)
    x2, _ = corpus.batch("train", step=7, batch_size=8, seq_len=32, seed=3)
    assert x.shape == (8, 32) and x.dtype == torch.int64 and torch.equal(x, x2)
    torch.testing.assert_close(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one
    assert not torch.equal(x, corpus.batch("train", step=8, batch_size=8, seq_len=32, seed=3)[0])
    parts = [corpus.batch("train", 7, 8, 32, seed=3, rank=r, world_size=4)[0] for r in range(4)]
    assert torch.equal(torch.cat(parts), x)
    with pytest.raises(ValueError, match="not divisible by world size"):
        corpus.batch("train", 0, 6, 32, rank=0, world_size=4)


def test_bin_files(tmp_path):
    rng = np.random.default_rng(0)
    rng.integers(0, 1000, 5000, dtype=np.uint16).tofile(tmp_path / "train.bin")
    rng.integers(0, 1000, 500, dtype=np.uint16).tofile(tmp_path / "val.bin")
    data = load_data(str(tmp_path))
    assert data.vocab_size <= 1000 and len(data.train) == 5000
    x, y = data.batch("val", 0, 4, 16)
    assert x.shape == (4, 16) and int(x.max()) < 1000
    (tmp_path / "val.bin").unlink()
    with pytest.raises(ValueError, match="missing val.bin"):
        load_bin_dir(tmp_path)
