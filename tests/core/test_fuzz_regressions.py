"""Regression tests for what fuzzing found (fuzz/, RELIABILITY.md), one per bug, through the
Python API where it reaches the bug and through the C API (cffi `lib`) where only a C caller
can. The inputs that found them are replayed by `make fuzz` (fuzz/regressions/). Several of these
are only visible under the sanitizers (`make sanitize` runs this file with ASan + UBSan).
"""
from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from infinigram_hf import IndexFormatError, InfiniGramIndex, InfiniGramLM
from infinigram_hf._core.native import err_buffer, ffi, lib
from infinigram_hf.build import build_index
from infinigram_hf.index.states import DecodingState, states_prob

from conftest import Reference

INT64_MAX, INT64_MIN = 2**63 - 1, -2**63
DOCS = [[1, 2, 3, 1, 2, 4] * 6, [2, 2, 2, 2], [], [4, 3, 2, 1, 0, 1, 2] * 5, [1, 2], [3] * 9, [0, 1, 2, 3, 4] * 7]


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    base = tmp_path_factory.mktemp("fuzzreg")
    one = build_index(DOCS, base / "one", vocab_size=10, ntd_cache_min_cost=0, progress=False)
    two = build_index(DOCS, base / "two", vocab_size=10, max_shard_tokens=60, progress=False)
    assert one.num_shards == 1 and two.num_shards > 1
    yield one, two
    one.close()
    two.close()


def test_sampled_rows_of_a_batch_stay_apart(indexes) -> None:
    """ntd_batch.c: with max_support, a sampled row's first token was merged into the previous
    row's last entry on a single-shard index (both rows wrong). Every row must add up to its
    total and equal the same prompt asked alone."""
    one, two = indexes
    rng = random.Random(0)
    prompts = [[rng.randrange(5) for _ in range(rng.randrange(0, 4))] for _ in range(60)]
    for ix in (one, two):
        for support in (1, 2, 3, 7):
            res = ix.infgram_ntd_batch(prompts, max_support=support, n_threads=1)
            for i, p in enumerate(prompts):
                row = slice(res.offsets[i], res.offsets[i + 1])
                assert int(res.counts[row].sum()) == int(res.total[i]), (support, i, p)
                alone = ix.infgram_ntd_batch([p], max_support=support, n_threads=1)
                assert res.token_ids[row].tolist() == alone.token_ids.tolist(), (support, i, p)
                assert res.counts[row].tolist() == alone.counts.tolist(), (support, i, p)


def test_unseen_contexts_in_a_multi_shard_batch(indexes) -> None:
    """ntd_batch.c: rows whose context occurs in no shard copied from NULL + 0 (UBSan)."""
    _, two = indexes
    res = two.infgram_ntd_batch([[9, 9, 9], [1, 2], [9]], infinite=False)
    assert res.offsets.tolist()[:2] == [0, 0] and res.total.tolist()[0] == 0


def test_match_at_position_zero(indexes) -> None:
    """query.c left_extension: prefetching the token before an occurrence at position 0 made a
    pointer below the token array (UBSan); the ∞-gram of such a prompt is exact."""
    one, _ = indexes
    ref = Reference(DOCS, 10)
    prompt = [7, 7] + DOCS[0][:9]  # its longest occurring suffix starts at corpus position 0
    got = one.infgram_prob(prompt, DOCS[0][9])
    want = ref.infgram_prob(prompt, DOCS[0][9])
    assert (got.count, got.prompt_count, got.suffix_len) == (want.count, want.prompt_count, want.suffix_len)


@pytest.mark.parametrize("field, value", [(0, INT64_MAX), (0, 2**31), (1, INT64_MIN), (2, -1), (3, INT64_MAX)])
def test_forged_decoding_states_are_refused(indexes, field, value) -> None:
    """state.c: a state with suffix_len near INT64_MAX overflowed (UBSan); any state that cannot
    be one of this index is a ValueError."""
    one, _ = indexes
    good = one.suffix_cache().state([1, 2, 3])
    values = good.values.copy()
    values[field] = value
    with pytest.raises(ValueError, match="state"):
        states_prob(one, [DecodingState(values)], [1])


def _search(ix, term_off, max_diff: int):
    ids = np.array([1, 2, 3], dtype=np.uint32)
    toff = np.array(term_off, dtype=np.int64)
    coff = np.array([0, 1, 2], dtype=np.int64)
    docs = np.zeros(64, dtype=np.int64)
    n_out = ffi.new("int64_t *")
    opts = ffi.new("ig_search_opts *", {"max_clause_freq": 1000, "max_diff_tokens": max_diff, "seed": 0, "check": 0})
    stats = ffi.new("ig_search_stats *")
    err = err_buffer()
    with ix.native_handle() as h:
        rc = lib.ig_search_docs(h, ffi.from_buffer("uint32_t[]", ids), ffi.from_buffer("int64_t[]", toff), 2,
                                ffi.from_buffer("int64_t[]", coff), 2, opts, ffi.from_buffer("int64_t[]", docs),
                                64, n_out, stats, err, len(err))
    return rc, ffi.string(err).decode(), int(stats.num_matches)


def test_search_offsets_and_distances_at_the_int64_limits(indexes) -> None:
    """search.c: a term offset of INT64_MIN overflowed before the check; max_diff_tokens near
    INT64_MAX overflowed p + D (C API; Python caps it at 2**62)."""
    _, two = indexes
    rc, msg, _ = _search(two, [0, INT64_MIN, 3], -1)
    assert rc == lib.IG_ERR_ARG and "empty" in msg
    rc, _, anywhere = _search(two, [0, 2, 3], -1)
    assert rc == 0 and anywhere > 0
    for far in (INT64_MAX, 2**62, 2**31):
        assert _search(two, [0, 2, 3], far) == (0, "", anywhere)


def test_lm_cache_size_is_bounded(indexes) -> None:
    """lm.c: cache_entries near 2**63 doubled the cache size until it overflowed, then looped
    forever."""
    one, _ = indexes
    for bad in (2**62, INT64_MAX, (1 << 26) + 1, -1):
        with pytest.raises(ValueError, match="cache_entries"):
            InfiniGramLM(one, cache_entries=bad)
    InfiniGramLM(one, cache_entries=1 << 10)


LM_LARGE_CACHE_CAP = textwrap.dedent("""
    import os, sys
    from infinigram_hf import InfiniGramIndex, InfiniGramLM

    def resident() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    ix = InfiniGramIndex.open(sys.argv[1])
    before = resident()
    lms = [InfiniGramLM(ix, max_context=8, cache_entries=n) for n in (29_080_507, 1 << 26)]
    for lm in lms:
        lm.score([0, 1, 2, 0, 1, 2, 3], "kn")
    print(resident() - before)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_lm_cache_cap_is_not_allocated_up_front(tmp_path) -> None:
    """lm_stats.c (py_api fuzz finding, out of memory): the continuation-count cache was
    allocated and cleared at its full requested size, 3.2 GB for cache_entries=29,080,507 and
    6.4 GB at the allowed maximum 2**26. It now starts small and grows as it fills."""
    build_index(DOCS, tmp_path / "ix", vocab_size=10, progress=False).close()
    proc = subprocess.run([sys.executable, "-c", LM_LARGE_CACHE_CAP, str(tmp_path / "ix")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[-1]) < 64 << 20


def test_backoff_decay_above_one_is_refused(indexes) -> None:
    """lm.c: decay > 1 made the level weights overflow to inf and the probability NaN."""
    one, _ = indexes
    lm = InfiniGramLM(one, max_context=16, cache_entries=1024)
    ids = DOCS[3] * 4
    for decay in (1e300, 2.0, float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match="decay"):
            lm.score(ids, "backoff", decay=decay)
    probs = lm.score(ids, "backoff", decay=1.0).probs
    assert np.isfinite(probs).all() and ((probs >= 0) & (probs <= 1)).all()


def test_count_of_counts_sizes_are_checked_before_allocating(indexes) -> None:
    """lm.py: max_n * kmax counters were allocated before the core checked max_n (a huge kmax
    asked for petabytes, a large one for gigabytes)."""
    one, _ = indexes
    lm = InfiniGramLM(one, cache_entries=1024)
    for max_n, kmax in ((3, 10**15), (3, 10**8), (5000, 2), (0, 2), (2, 0), (2, 2.5), (True, 2)):
        with pytest.raises(ValueError):
            lm.count_of_counts(max_n, kmax)
    raw, cont, types = lm.count_of_counts(2, 3)
    assert raw.shape == (2, 3) and types[0] == 5


def test_num_docs_beyond_int64_in_tokens_header(tmp_path) -> None:
    """index.c: tokens.bin's document count (aux2) was converted to int64 and subtracted before
    it was checked (UBSan overflow for values >= 2**63)."""
    build_index(DOCS, tmp_path / "ix", vocab_size=10, progress=False).close()
    path = tmp_path / "ix" / "shard_00000" / "tokens.bin"
    data = path.read_bytes()
    for value in (2**63, 2**64 - 1, 2**63 + 5):
        path.write_bytes(data[:32] + struct.pack("<Q", value) + data[40:])
        with pytest.raises(IndexFormatError, match="tokens.bin"):
            InfiniGramIndex.open(tmp_path / "ix")


LM_ON_CORRUPT_TOKENS = textwrap.dedent("""
    import json, sys
    from infinigram_hf import InfiniGramIndex, InfiniGramLM, InfiniGramError
    ix = InfiniGramIndex.open(sys.argv[1])
    lm = InfiniGramLM(ix, max_context=8, cache_entries=1024)
    out = []
    for method in ("infgram", "backoff", "kn", "wb"):
        for call in (lambda: lm.score([0, 1, 2, 0, 1], method), lambda: lm.distribution([0, 1], method),
                     lambda: lm.generate([0, 1], 20, method=method, seed=3),
                     lambda: lm.generate([2], 20, method=method, seed=4, top_k=2)):
            try:
                res = call()
            except (InfiniGramError, ValueError):
                continue
            if isinstance(res, list) or hasattr(res, "token_ids"):
                ids = getattr(res, "token_ids", res)
                out.extend(int(t) for t in ids)
    try:
        lm.count_of_counts(3, 3)
    except (InfiniGramError, ValueError):
        pass
    print(json.dumps(out))
""")


def test_lm_on_token_ids_beyond_the_vocabulary(tmp_path) -> None:
    """lm.c / lm_stats.c: ids >= vocab_size in a corrupt tokens.bin (opening does not scan the
    tokens) indexed the LM's V + 1 dense arrays out of bounds, and generation emitted them and
    used them as tokens. They now count as end of document; nothing crashes (in a child process;
    the sanitizer run checks every access)."""
    rng = random.Random(5)
    docs = [[rng.randrange(3) for _ in range(200)] for _ in range(6)]
    build_index(docs, tmp_path / "ix", vocab_size=3, progress=False, ntd_cache_min_cost=0).close()
    path = tmp_path / "ix" / "shard_00000" / "tokens.bin"
    data = bytearray(path.read_bytes())
    for i in range(64, len(data) - 1):
        if data[i] != 255 and rng.random() < 0.3:
            data[i] = rng.randrange(3, 255)
    path.write_bytes(bytes(data))
    proc = subprocess.run([sys.executable, "-c", LM_ON_CORRUPT_TOKENS, str(tmp_path / "ix")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    generated = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(0 <= t < 3 for t in generated), generated
