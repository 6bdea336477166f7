"""Objects shared by threads give exactly the serial answers (issue 12, finding 14).

RELIABILITY.md ("Thread safety of the public objects") states, object by object, what may be
shared; each statement is backed by a test here, in tests/index/test_concurrency.py / test_load.py
(InfiniGramIndex), tests/index/test_difference.py (DifferenceIndex) or by the code's structure.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import make_index

from infinigram_hf import InfiniGramDrafter, InfiniGramLM

THREADS = 6


@pytest.fixture(scope="module")
def shared_index(tmp_path_factory):
    rng = np.random.default_rng(7)
    base = rng.integers(0, 40, size=3000)
    docs = [np.concatenate([base[i * 40:i * 40 + 300], rng.integers(0, 40, size=80)]).tolist() for i in range(40)]
    ix = make_index(docs, tmp_path_factory.mktemp("threads"), vocab_size=48, max_shard_tokens=6000)
    yield ix, docs
    ix.close()


def _prompts(docs, seed: int, n: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d = docs[int(rng.integers(len(docs)))]
        i = int(rng.integers(0, len(d) - 30))
        p = d[i:i + int(rng.integers(1, 30))]
        if rng.random() < 0.3:  # something for prompt lookup: a repeat inside the sequence
            p = p + p[:int(rng.integers(1, len(p) + 1))]
        out.append(p)
    return out


def _in_threads(fn, n_items: int) -> list:
    barrier = threading.Barrier(THREADS)

    def run(t: int):
        barrier.wait()  # all threads start together
        return [fn(i) for i in range(t, n_items, THREADS)]

    with ThreadPoolExecutor(THREADS) as pool:
        parts = list(pool.map(run, range(THREADS)))
    out = [None] * n_items
    for t, part in enumerate(parts):
        out[t::THREADS] = part
    return out


def _draft_key(d) -> tuple:
    return d.tokens.tolist(), d.source, d.match_len, d.counts.tolist(), d.totals.tolist()


def test_shared_drafter_gives_the_serial_drafts(shared_index):
    """Before the fix the C calls of all threads wrote one set of output buffers (with the GIL
    released): with 6 threads about one draft in eleven differed from the serial one."""
    ix, docs = shared_index
    drafter = InfiniGramDrafter(ix, max_draft=12, min_match=1, adaptive=False)
    prompts = _prompts(docs, 1, 3000)

    def one(i: int):
        p = prompts[i]
        tree = drafter.tree(p, width=2, max_nodes=8) if i % 5 == 0 else None
        state = drafter.infgram_state(np.asarray(p, dtype=np.int64))
        return (_draft_key(drafter.draft(p)), _draft_key(drafter.lookup(np.asarray(p, dtype=np.int64))),
                _draft_key(drafter.infgram_chain(state, 6)),
                None if tree is None else (tree.tokens.tolist(), tree.parents.tolist()))

    serial = [one(i) for i in range(len(prompts))]
    assert _in_threads(one, len(prompts)) == serial
    # (stats count under a lock: a draft() and a tree() each count one draft)
    assert drafter.stats["drafts"] == 2 * (len(prompts) + len(range(0, len(prompts), 5)))


def test_shared_drafter_with_one_row_per_thread(shared_index):
    """A decoding loop per thread (start / append / draft_row / feedback) on one drafter: rows
    are per sequence, the drafter's adaptive caps travel with each call."""
    ix, docs = shared_index
    drafter = InfiniGramDrafter(ix, max_draft=8)
    seqs = [sum(_prompts(docs, 100 + k, 12), []) for k in range(THREADS * 4)]

    def loop(k: int):
        seq, out = seqs[k], []
        row = drafter.start(seq[:5])
        for a in range(5, len(seq), 3):
            d = drafter.draft_row(row)
            out.append(_draft_key(d))
            truth, kept = seq[a:a + len(d)], 0
            while kept < len(truth) and d.tokens[kept] == truth[kept]:
                kept += 1
            drafter.feedback(row, d, kept)
            drafter.append(row, seq[a:a + 3])
        return out

    serial = [loop(k) for k in range(len(seqs))]
    assert _in_threads(loop, len(seqs)) == serial


def test_shared_suffix_cache(shared_index):
    """One SuffixCache (small, so threads evict each other's entries) serving all threads."""
    ix, docs = shared_index
    cache = ix.suffix_cache(max_states=50, max_distributions=20)
    prompts = _prompts(docs, 2, 1500)

    def one(i: int):
        p = prompts[i]
        return (cache.state(p).values.tolist(), sorted(cache.ntd(p).as_dict().items()),
                cache.prob(p, i % 40).count, cache.states([p, p[:-1]]).tolist())

    want = [(None, sorted(ix.infgram_ntd(p).as_dict().items()), ix.infgram_prob(p, i % 40).count, None)
            for i, p in enumerate(prompts)]
    got = _in_threads(one, len(prompts))
    assert [(None, g[1], g[2], None) for g in got] == want
    assert [g[0] for g in got] == [g[3][0] for g in got]


def test_shared_lm(shared_index):
    """InfiniGramLM serializes its C calls under a lock: shared, it answers as serially."""
    ix, docs = shared_index
    lm = InfiniGramLM(ix, max_context=40)
    prompts = _prompts(docs, 3, 240)

    def one(i: int):
        p = prompts[i]
        method = ("kn", "wb", "backoff", "infgram")[i % 4]
        g = lm.generate(p, max_new_tokens=10, seed=i, eod=False)
        return (lm.score(p, method).probs.tolist(), lm.distribution(p, method).tolist(),
                None if g is None else g.token_ids.tolist())

    serial = [one(i) for i in range(len(prompts))]
    assert _in_threads(one, len(prompts)) == serial


def test_shared_logits_processor(shared_index):
    torch = pytest.importorskip("torch")
    from infinigram_hf import InfiniGramLogitsProcessor

    ix, docs = shared_index
    proc = InfiniGramLogitsProcessor(ix, 0.5, 0.2, eos_token_id=47, cache_size=16)
    gen = torch.Generator().manual_seed(0)
    batches = []
    for k in range(60):
        rows = _prompts(docs, 200 + k, 3)
        width = max(map(len, rows))
        ids = torch.tensor([[47] * (width - len(r)) + r for r in rows])
        batches.append((ids, torch.randn(3, 48, generator=gen)))

    def one(i: int):
        ids, scores = batches[i]
        return proc(ids, scores.clone()).tolist()

    serial = [one(i) for i in range(len(batches))]
    assert _in_threads(one, len(batches)) == serial
