"""Eight threads querying one index at once get exactly the serial answers; closing an index
while other threads query it waits for them and then makes every call raise, never crash."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import make_index
from infinigram_hf import InfiniGramError


@pytest.fixture(scope="module")
def corpus_index(tmp_path_factory):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 50, size=2000)
    docs = [np.concatenate([base[i * 50:i * 50 + 400], rng.integers(0, 50, size=200)]).tolist() for i in range(30)]
    ix = make_index(docs, tmp_path_factory.mktemp("conc"), vocab_size=60, max_shard_tokens=8000,
                    ntd_cache_min_cost=64)
    yield ix, docs
    ix.close()


def _workload(ix, docs, seed: int):
    """A mix of every query type; returns plain Python values to compare."""
    rng = np.random.default_rng(seed)
    out = []
    cache = ix.suffix_cache(max_states=64)
    for _ in range(15):
        d = docs[int(rng.integers(len(docs)))]
        i = int(rng.integers(0, len(d) - 40))
        q = d[i:i + int(rng.integers(0, 40))]
        out.append(ix.count(q))
        out.append(ix.infgram_prob(q, 3).count)
        out.append(sorted(ix.infgram_ntd(q).as_dict().items()))
        out.append(ix.score(q).counts.tolist())
        out.append(ix.count_batch([q, q[:3]], n_threads=2).tolist())
        nb = ix.infgram_ntd_batch([q, q[1:], [int(rng.integers(50))]], n_threads=2)
        out.append((nb.offsets.tolist(), nb.token_ids.tolist(), nb.counts.tolist(), nb.suffix_len.tolist()))
        out.append(ix.score_batch([q, d], n_threads=2).counts.tolist())
        out.append(sorted(cache.ntd(q).as_dict().items()))
    return out


def test_eight_threads_match_serial(corpus_index) -> None:
    ix, docs = corpus_index
    serial = [_workload(ix, docs, seed) for seed in range(8)]
    barrier = threading.Barrier(8)

    def run(seed: int):
        barrier.wait()  # start together
        return _workload(ix, docs, seed)

    with ThreadPoolExecutor(8) as pool:
        parallel = list(pool.map(run, range(8)))
    assert parallel == serial


def test_batch_thread_counts_agree(corpus_index) -> None:
    ix, docs = corpus_index
    queries = [d[i:i + 20] for d in docs for i in range(0, 500, 37)]
    base = ix.infgram_ntd_batch(queries, n_threads=1)
    for t in (0, 2, 8, 64):
        other = ix.infgram_ntd_batch(queries, n_threads=t)
        for f in ("offsets", "token_ids", "counts", "total", "suffix_len", "sparse"):
            assert np.array_equal(getattr(base, f), getattr(other, f)), (t, f)
        assert np.array_equal(ix.count_batch(queries, n_threads=t), ix.count_batch(queries, n_threads=1))
        sa, sb = ix.score_batch(docs, n_threads=t), ix.score_batch(docs, n_threads=1)
        assert np.array_equal(sa.counts, sb.counts) and np.array_equal(sa.suffix_len, sb.suffix_len)


def test_close_while_querying(tmp_path) -> None:
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 30, size=3000).tolist() for _ in range(4)]
    ix = make_index(docs, tmp_path, vocab_size=30)
    started, errors, done = threading.Event(), [], []

    def hammer():
        started.set()
        try:
            while True:
                ix.score_batch(docs, n_threads=2)
                ix.count([1, 2])
                ix.infgram_ntd([3])
        except InfiniGramError as exc:
            done.append(str(exc))
        except Exception as exc:  # anything else is a bug
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    started.wait()
    ix.close()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(done) == 4 and all("closed" in m for m in done)
    assert ix.closed
    for call in (lambda: ix.count([1]), lambda: ix.count_batch([[1]]), lambda: ix.infgram_ntd([1]),
                 lambda: ix.score([1]), lambda: ix.suffix_cache().ntd([1])):
        with pytest.raises(InfiniGramError, match="closed"):
            call()
    ix.close()  # idempotent
