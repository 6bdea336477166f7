"""DraftBatch (one C call per step for all rows) against the per-row drafter API (start /
draft_row / step_width / feedback / append): every draft, width, state and acceptance rate is the
same, on random batches of rows of different lengths with EOS and out-of-vocabulary ids in them,
drafts accepted in part (rejected tails), width cuts and rows leaving the batch."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_index
from infinigram_hf.lm.draft_batch import BatchDrafts, DraftBatch
from infinigram_hf.lm.drafter import _NONE, Draft, InfiniGramDrafter

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _cut(d: Draft, w: int) -> Draft:
    """A draft cut to the step's width, as the speculative loop cuts it (source kept)."""
    return Draft(d.tokens[:w], d.source, d.match_len, d.counts[:w], d.totals[:w])


def run_both(make, prompts, texts, steps: int, rng: np.random.Generator, room: bool = True) -> None:
    """Drive the same rows through both APIs (two drafters from `make`); the "model" accepts a
    random prefix of each draft and then a token of the row's text; some rows are not drafted
    for in a step (no room left); rows finish at random and leave the batch."""
    drafter, twin = make(), make()
    rows = [drafter.start(p) for p in prompts]
    batch = DraftBatch(twin, prompts)
    live = list(range(len(prompts)))  # original row of each batch row
    for step in range(steps):
        limits = rng.integers(0, drafter.max_draft + 2, len(live)) if room else None
        skip = rng.random(len(live)) < 0.2
        per = [_NONE if skip[r] else drafter.draft_row(rows[b], None if limits is None else int(limits[r]))
               for r, b in enumerate(live)]
        got = batch.draft(limits, skip=skip)
        for r, b in enumerate(live):
            want = per[r]
            have = got.row(r)
            what = f"step {step} row {b}"
            assert (have.tokens.tolist(), have.source, have.match_len) == \
                (want.tokens.tolist(), want.source, want.match_len), what
            assert have.counts.tolist() == want.counts.tolist() and have.totals.tolist() == want.totals.tolist(), what
            if rows[b].state is not None and not skip[r]:
                assert batch.states[r].tolist() == rows[b].state.tolist(), what
        w = drafter.step_width([rows[b] for b in live], per)
        assert batch.width(got) == w, f"step {step} width"
        per = [d if len(d) <= w else _cut(d, w) for d in per]
        got = got.cut(w)
        accepted = np.array([rng.integers(0, len(d) + 1) for d in per], dtype=np.int64)
        new = np.zeros((len(live), w + 1), dtype=np.int64)
        n_new = accepted + 1
        for r, b in enumerate(live):
            toks = per[r].tokens[:accepted[r]].tolist() + [int(texts[b][step % len(texts[b])])]
            new[r, :len(toks)] = toks
            drafter.feedback(rows[b], per[r], int(accepted[r]))
            drafter.append(rows[b], toks)
        batch.accept(got, accepted, new, n_new)
        for r, b in enumerate(live):
            assert batch.ids(r).tolist() == rows[b].ids.tolist(), f"step {step} ids {b}"
            assert batch.accepted[r].tolist() == rows[b].accepted and batch.rejected[r].tolist() == rows[b].rejected
        assert twin.stats == drafter.stats, f"step {step} stats"
        if len(live) > 1 and rng.random() < 0.3:  # some rows finish
            keep = sorted(rng.choice(len(live), rng.integers(1, len(live)), replace=False).tolist())
            batch.select(keep)
            live = [live[k] for k in keep]


@st.composite
def cases(draw: st.DrawFn):
    vocab = draw(st.sampled_from([5, 9, 300]))
    alphabet = draw(st.lists(st.integers(1, vocab - 1), min_size=1, max_size=4, unique=True))
    sym = st.sampled_from(alphabet)
    docs = draw(st.lists(st.lists(sym, max_size=40), min_size=1, max_size=8))
    shard = draw(st.sampled_from([None, 50]))
    probe = st.sampled_from(alphabet + [0, vocab + 3])  # 0 = EOS; vocab + 3: an id the index cannot hold
    prompts = draw(st.lists(st.lists(probe, min_size=1, max_size=30), min_size=1, max_size=7))
    texts = draw(st.lists(st.lists(probe, min_size=1, max_size=12), min_size=len(prompts), max_size=len(prompts)))
    options = draw(st.sampled_from([
        {},
        {"min_match": 1, "match_ratio": 0, "min_share": 0.0, "min_joint": 0.0, "source": "infgram"},
        {"min_match": 1, "source": "longest", "max_draft": 5},
        {"source": "infgram_first", "adaptive": False},
        {"source": "lookup", "lookup_min_match": 1},
        {"min_count": 2, "max_draft": 3, "verify_cost": 0.3},
    ]))
    return vocab, docs, shard, prompts, texts, options, draw(st.integers(0, 2**31))


@given(case=cases())
@SETTINGS
def test_batch_equals_rows(case, scratch_dir):
    vocab, docs, shard, prompts, texts, options, seed = case
    room = max((len(d) for d in docs), default=0) + 1
    ix = make_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=None if shard is None else max(shard, room))
    try:
        run_both(lambda: InfiniGramDrafter(ix, eos_token_id=0, **options), prompts, texts, 8, np.random.default_rng(seed),
                 room=bool(seed % 2))
    finally:
        ix.close()


def test_batch_over_a_difference_and_lookup_only(tmp_path):
    rng = np.random.default_rng(3)
    docs = [rng.integers(1, 6, 60).tolist() for _ in range(6)] + [[1, 2, 3, 4] * 20]
    full = make_index(docs, tmp_path, vocab_size=8)
    sub = make_index(docs[:2], tmp_path, vocab_size=8)
    prompts = [rng.integers(0, 7, n).tolist() for n in (1, 5, 17, 40, 3)] + [[1, 2, 3, 4] * 6]
    texts = [rng.integers(0, 6, 10).tolist() for _ in prompts]
    try:
        for index in (full, full.difference(sub)):
            run_both(lambda: InfiniGramDrafter(index, eos_token_id=0, min_match=1), prompts, texts, 12, rng)
        run_both(lambda: InfiniGramDrafter(None), prompts, texts, 12, rng)
    finally:
        full.close()
        sub.close()


def test_batch_grows_its_buffer_and_keeps_long_rows(tmp_path):
    ix = make_index([[1, 2, 3] * 100], tmp_path, vocab_size=5)
    rng = np.random.default_rng(0)
    try:
        run_both(lambda: InfiniGramDrafter(ix, max_draft=16, match_ratio=0), [[1, 2], [3] * 70], [[3, 1, 2]] * 2, 40, rng)  # 2 x 70 + 40 x 17 > 140 columns
    finally:
        ix.close()


def test_batch_arguments_are_checked(tmp_path):
    ix = make_index([[1, 2, 3] * 5], tmp_path, vocab_size=5)
    try:
        batch = DraftBatch(InfiniGramDrafter(ix), [[1, 2], [2, 3, 1]])
        batch.states = batch.states[:1]  # a states array of the wrong size is refused by C
        with pytest.raises(ValueError, match="states"):
            batch.draft()
        batch = DraftBatch(InfiniGramDrafter(ix), [[1, 2], [2, 3, 1]])
        batch.states[1, 2] = 10**6  # a forged state: the message names its row
        with pytest.raises(ValueError, match="row 1"):
            batch.draft()
    finally:
        ix.close()


def test_empty_batch_and_cut():
    d = BatchDrafts(np.zeros((2, 3), np.int64), np.array([3, 1]), np.array([0, 1], np.int8), np.array([4, 2]),
                    np.ones((2, 3), np.uint64), np.ones((2, 3), np.uint64))
    c = d.cut(2)
    assert c.lengths.tolist() == [2, 1] and c.tokens.shape == (2, 2)
    empty = DraftBatch(InfiniGramDrafter(None), [])
    assert len(empty) == 0 and len(empty.draft().lengths) == 0
