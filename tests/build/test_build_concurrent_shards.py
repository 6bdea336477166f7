"""Shards finished on a second thread while the next one fills (when two shards fit the memory
budget): the same index, byte for byte, as finishing them one after the other; a failure on the
background thread fails the build and leaves nothing behind."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf.build import pipeline
from infinigram_hf.build.pipeline import build_index
from infinigram_hf.build.shard_finisher import concurrent_finish_fits
from infinigram_hf.build.shard_writer import ShardWriter, shard_peak_bytes


def corpus(seed: int = 5) -> list:
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, 70, size=int(rng.integers(0, 900)), dtype=np.uint16) for _ in range(300)]
    docs[7] = np.array([3, 4] * 400, dtype=np.uint16)  # long repeats cross the shards' work
    return docs


def index_files(path: Path) -> dict:
    return {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != "meta.json"}


def test_concurrent_finish_needs_two_shards_in_the_budget() -> None:
    cap = 10_000
    two = 2 * int(shard_peak_bytes(cap, 2))
    assert concurrent_finish_fits(two, cap, 2, cpus=2)
    assert not concurrent_finish_fits(two - 1, cap, 2, cpus=2)
    assert not concurrent_finish_fits(two, cap, 2, cpus=1)


@pytest.mark.parametrize("cap", [1500, 9000, 40_000])
def test_concurrent_and_sequential_shards_are_identical(tmp_path, monkeypatch, cap) -> None:
    docs = corpus()
    monkeypatch.setattr(pipeline, "usable_cpus", lambda: 2)
    started = []
    real_start = threading.Thread.start

    def counting_start(self):
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    together = build_index(iter(docs), tmp_path / "together", vocab_size=70, max_shard_tokens=cap,
                           batch_size=13, progress=False)
    n_shards = together.num_shards
    assert started.count("infinigram-shard-finish") == n_shards - 1
    started.clear()
    # a budget of one shard's peak: finished one after the other
    budget = int(shard_peak_bytes(cap, 2)) + 1
    apart = build_index(iter(docs), tmp_path / "apart", vocab_size=70, max_shard_tokens=cap, memory_budget=budget,
                        batch_size=13, progress=False)
    assert "infinigram-shard-finish" not in started
    assert apart.num_shards == n_shards and (cap > 100_000 or n_shards >= 2)
    assert index_files(tmp_path / "together") == index_files(tmp_path / "apart")
    assert together.meta["shards"] == apart.meta["shards"]
    flat = np.concatenate(docs)
    for t in (0, 3, 69):
        assert together.count([t]) == int(np.sum(flat == t))
    brute = sum(int(np.sum((d[:-1] == 3) & (d[1:] == 4))) for d in docs)
    assert together.count([3, 4]) == brute


@pytest.mark.parametrize("failing_shard", [0, 1, "last"])
def test_a_failing_shard_fails_the_build_and_leaves_nothing(tmp_path, monkeypatch, failing_shard) -> None:
    monkeypatch.setattr(pipeline, "usable_cpus", lambda: 2)
    docs = corpus()
    n_shards = build_index(iter(docs), tmp_path / "probe", vocab_size=70, max_shard_tokens=9000,
                           progress=False).num_shards
    assert n_shards >= 3
    bad = n_shards - 1 if failing_shard == "last" else failing_shard
    real_finish = ShardWriter.finish

    def finish(self):
        if self.dir.name.endswith(str(bad)):
            raise OSError(28, "No space left on device (test)")
        return real_finish(self)

    monkeypatch.setattr(ShardWriter, "finish", finish)
    out = tmp_path / "ix"
    with pytest.raises(OSError, match="No space left"):
        build_index(iter(docs), out, vocab_size=70, max_shard_tokens=9000, progress=False)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe"]
