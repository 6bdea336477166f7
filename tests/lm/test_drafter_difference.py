"""InfiniGramDrafter over a DifferenceIndex (an index minus an index of a subset of its documents)
against the drafter over an index rebuilt without the removed documents: every draft, state,
chain, children list and tree is the same (the C draft rules run on net counts: ig_diff_draft_*)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_index
from infinigram_hf.index.states import init_state
from infinigram_hf.lm.drafter import InfiniGramDrafter

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def same_draft(a, b, what: str) -> None:
    assert (list(a.tokens), a.source, a.match_len) == (list(b.tokens), b.source, b.match_len), what
    assert list(a.counts) == list(b.counts) and list(a.totals) == list(b.totals), what


def same_tree(a, b, what: str) -> None:
    assert (list(a.tokens), list(a.parents)) == (list(b.tokens), list(b.parents)), what


def assert_drafts_agree(diff, kept, seqs, steps, options: dict) -> None:
    """Drafts, states, chains, children and trees of the difference equal the rebuilt index's."""
    d, k = InfiniGramDrafter(diff, **options), InfiniGramDrafter(kept, **options)
    for seq in seqs:
        what = f"{seq} {options}"
        same_draft(d.draft(seq), k.draft(seq), f"draft {what}")
        same_tree(d.tree(seq, width=3, max_nodes=10, min_prob=0.05), k.tree(seq, width=3, max_nodes=10, min_prob=0.05),
                  f"tree {what}")
        sd, sk = diff.init_state(seq).values, init_state(kept, seq).values
        assert list(sd[:2]) == list(sk[:2]), f"state {what}"
        assert list(d.infgram_state(np.asarray(seq, dtype=np.int64))[:2]) == list(
            k.infgram_state(np.asarray(seq, dtype=np.int64))[:2]), f"drafter state {what}"
        same_draft(d.infgram_chain(sd, 6), k.infgram_chain(sk, 6), f"chain {what}")
        td, cd, csd, nd = d.children(sd, 3)
        tk, ck, csk, nk = k.children(sk, 3)
        assert (list(td), list(cd), nd) == (list(tk), list(ck), nk), f"children {what}"
        assert [list(c[:2]) for c in csd] == [list(c[:2]) for c in csk], f"child states {what}"
        same_tree(d.best_first(sd, max_nodes=8, max_depth=4, width=2, min_prob=0.0),
                  k.best_first(sk, max_nodes=8, max_depth=4, width=2, min_prob=0.0), f"best_first {what}")
    # a decoding loop: rows carry their state through accepted tokens (advance + back-off in C)
    for seq in seqs:
        rd, rk = d.start(seq), k.start(seq)
        for chunk in steps:
            d.append(rd, chunk)
            k.append(rk, chunk)
            a, b = d.draft_row(rd), k.draft_row(rk)
            same_draft(a, b, f"row {seq} + {chunk}")
            assert list(rd.state[:2]) == list(rk.state[:2]), f"row state {seq} + {chunk}"
            d.feedback(rd, a, len(a) // 2)
            k.feedback(rk, b, len(b) // 2)


@st.composite
def split_corpus(draw: st.DrawFn):
    vocab = draw(st.sampled_from([4, 7, 300]))
    alphabet = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=3, unique=True))
    sym = st.sampled_from(alphabet)
    long_docs = draw(st.booleans())  # runs past IG_BACKOFF_SHORT (32): the long back-off path
    docs = draw(st.lists(st.lists(sym, max_size=60 if long_docs else 12), min_size=2, max_size=10))
    removed = draw(st.lists(st.booleans(), min_size=len(docs), max_size=len(docs)))
    removed[draw(st.integers(0, len(docs) - 1))] = False  # keep at least one document
    # shard caps hold the longest document and its separator (a longer one is refused at build)
    room = max(len(d) for d in docs) + 1
    shard_a = draw(st.sampled_from([None, 14, 40]))
    shard_b = draw(st.sampled_from([None, 14]))
    shard_a, shard_b = (None if c is None else max(c, room) for c in (shard_a, shard_b))
    probe = st.sampled_from(alphabet + [vocab - 1])
    seqs = draw(st.lists(st.lists(probe, min_size=1, max_size=50 if long_docs else 8), min_size=1, max_size=3))
    steps = draw(st.lists(st.lists(probe, min_size=1, max_size=5), min_size=1, max_size=6))
    options = draw(st.sampled_from([
        {"min_match": 1, "match_ratio": 0, "min_share": 0.0, "min_joint": 0.0, "prompt_lookup": False,
         "source": "infgram"},
        {"min_match": 1, "min_share": 0.3, "prompt_lookup": True, "source": "longest", "eos_token_id": alphabet[0]},
        {"min_count": 2, "max_draft": 4},
    ]))
    return vocab, docs, removed, shard_a, shard_b, seqs, steps, options


@given(case=split_corpus())
@SETTINGS
def test_drafts_over_a_difference_equal_the_rebuilt_index(case, scratch_dir):
    vocab, docs, removed, shard_a, shard_b, seqs, steps, options = case
    kept_docs = [d for d, r in zip(docs, removed) if not r]
    gone = [d for d, r in zip(docs, removed) if r]
    full = make_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=shard_a)
    sub = make_index(gone[::-1], scratch_dir, vocab_size=vocab, max_shard_tokens=shard_b)  # any order
    kept = make_index(kept_docs, scratch_dir, vocab_size=vocab)
    try:
        assert_drafts_agree(full.difference(sub), kept, seqs, steps, options)
    finally:
        for ix in (full, sub, kept):
            ix.close()


def test_long_matches_back_off_on_net_counts(tmp_path):
    """Matches far longer than IG_BACKOFF_SHORT, broken by a token whose only continuation was
    removed: the row's state backs off to what the rebuilt index gives."""
    run = [3] * 70
    docs = [run + [5, 6], run + [7], [3, 3, 4] * 20, run[:40] + [5]]
    removed = [True, False, False, True]
    full = make_index(docs, tmp_path, vocab_size=10, max_shard_tokens=90)
    sub = make_index([d for d, r in zip(docs, removed) if r], tmp_path, vocab_size=10)
    kept = make_index([d for d, r in zip(docs, removed) if not r], tmp_path, vocab_size=10)
    seqs = [[3] * 60, [3] * 65 + [5], [3, 3, 4] * 15 + [3]]
    steps = [[3] * 5, [5], [3, 3, 4], [3] * 30, [7, 3]]
    for options in ({"min_match": 1, "prompt_lookup": False}, {"max_draft": 12, "match_ratio": 0}):
        assert_drafts_agree(full.difference(sub), kept, seqs, steps, options)


def test_sampled_candidates_are_those_of_the_rebuilt_index(tmp_path):
    """Above IG_DRAFT_EXACT_MAX (2048) net occurrences, candidates come from evenly spaced net
    ranks, as in a single-shard index of the remaining documents (the full index is sharded)."""
    rng = np.random.default_rng(0)
    docs = []
    for _ in range(6000):
        r = rng.random()
        docs.append([1, 5 if r < 0.3 else (7 if r < 0.55 else int(rng.integers(10, 400))), 2])
    removed = rng.random(len(docs)) < 0.35
    removed[[i for i, d in enumerate(docs) if d[1] == 5][:900]] = True  # 5 drops below 7 once removed
    full = make_index(docs, tmp_path, vocab_size=500, max_shard_tokens=7000)
    sub = make_index([d for d, r in zip(docs, removed) if r], tmp_path, vocab_size=500)
    kept = make_index([d for d, r in zip(docs, removed) if not r], tmp_path, vocab_size=500)
    diff = full.difference(sub)
    assert diff.count([1]) == kept.count([1]) > 2048 and kept.count([1, 7]) > kept.count([1, 5])
    d, k = (InfiniGramDrafter(x, min_match=1, prompt_lookup=False, min_share=0.0) for x in (diff, kept))
    sd, sk = diff.init_state([1]).values, init_state(kept, [1]).values
    for width in (1, 3, 8):
        td, cd, _, nd = d.children(sd, width)
        tk, ck, _, nk = k.children(sk, width)
        assert (list(td), list(cd), nd) == (list(tk), list(ck), nk)
    assert list(td[:2]) == [7, 5]
    same_draft(d.infgram_chain(sd, 4), k.infgram_chain(sk, 4), "chain")
    same_tree(d.best_first(sd, max_nodes=10, max_depth=3, width=4, min_prob=0.0),
              k.best_first(sk, max_nodes=10, max_depth=3, width=4, min_prob=0.0), "best_first")


def test_refusals(tmp_path):
    full = make_index([[1, 2, 3], [1, 2, 4], [2, 2]], tmp_path, vocab_size=6)
    sub = make_index([[1, 2, 4]], tmp_path, vocab_size=6)
    diff = full.difference(sub)
    d = InfiniGramDrafter(diff, min_match=1)
    forged = diff.init_state([1, 2]).values.copy()
    forged[1] += 1
    with pytest.raises(ValueError, match="not a state of this difference"):
        d.infgram_chain(forged, 3)
    plain_state = init_state(full, [1, 2]).values  # a state of the full index has too few values
    with pytest.raises(ValueError):
        d.children(plain_state, 2)
    # the right shape but int32: half the bytes a state needs, refused by the C step itself (it
    # takes the buffer's length in int64 values; the step advances the caller's array in place)
    narrow = diff.init_state([1, 2]).values.astype(np.int32)
    with pytest.raises(ValueError, match="int64 values given.*states of this difference"):
        d.step_call(np.array([1, 2], dtype=np.int64), narrow, 0, 3, (-1, -1))
    # a removed index that is not a subset, past the cheap checks: a negative net count is an error
    sneaky = make_index([[2, 1]], tmp_path, vocab_size=6)
    bad = InfiniGramDrafter(full.difference(sneaky), min_match=1, prompt_lookup=False)
    with pytest.raises(ValueError, match="not a subset"):
        bad.draft([2, 1])
