"""Speculative decoding with ∞-gram drafts: the drafter against the index's counts and a
brute-force prompt lookup, and the decoding loop against plain greedy decoding (batch 1 and
batches, chains and trees, with and without the ∞-gram logits processor), sampling with seeds,
and transformers' own assisted loop with our candidate generator.

The model is a tiny random GPT-2 in float64: identity with greedy must hold whatever the
weights, and float64 keeps near-ties from flipping between a one-token step and a verification
pass. An "oracle" drafter that proposes the model's true continuation with random corruptions
makes every acceptance length happen (random weights rarely agree with the index).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_index
from hf_tiny import TEXTS, model, one_thread, tiny_index, tiny_tok  # noqa: F401
from infinigram_hf.hf.assisted import InfiniGramCandidateGenerator, hf_assisted_generate
from infinigram_hf.lm.drafter import Draft, DraftTree, InfiniGramDrafter
from infinigram_hf.index.states import init_state
from infinigram_hf.speculative import generate as spec_generate
from infinigram_hf import speculative_generate


def _prompts(tok, n, seed=0, lo=5, hi=120):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = TEXTS[i % len(TEXTS)]
        ids = tok.encode(t)
        a = int(rng.integers(0, len(ids) - hi - 1))
        out.append(ids[a:a + int(rng.integers(lo, hi))])
    return out


def _left_pad(rows, pad=0):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.tensor(r)
        mask[b, width - len(r):] = 1
    return ids, mask


# ---------------------------------------------------------------------------- the drafter


def _suffix(index, ctx):
    st = init_state(index, ctx)
    return list(ctx[len(ctx) - st.suffix_len:]) if st.suffix_len else []


def test_chain_follows_index_counts(tiny_tok, tiny_index):
    d = InfiniGramDrafter(tiny_index, max_draft=6, min_match=1, match_ratio=0, min_share=0.3, min_joint=0.0,
                          prompt_lookup=False)
    checked = 0
    for ctx in _prompts(tiny_tok, 40, seed=1, lo=2, hi=40):
        st = init_state(tiny_index, ctx)
        draft = d.infgram_chain(st.values, 6)
        suffix = _suffix(tiny_index, ctx)
        for i, t in enumerate(draft.tokens):
            q = suffix + [int(x) for x in draft.tokens[:i]]
            ntd = tiny_index.ngram_ntd(q)
            assert draft.totals[i] == tiny_index.count(q) == ntd.total
            assert draft.counts[i] == tiny_index.count(q + [int(t)])
            best = int(ntd.token_ids[np.argmax(ntd.counts)])  # most frequent, smallest id on ties
            assert int(t) == best
            assert draft.counts[i] / draft.totals[i] >= 0.3
            checked += 1
        if len(draft) < 6 and suffix:  # it stopped for a reason: the next token is too uncertain or a doc end
            q = suffix + [int(x) for x in draft.tokens]
            ntd = tiny_index.ngram_ntd(q)
            if ntd.total:
                j = np.argmax(ntd.counts)
                assert ntd.counts[j] / ntd.total < 0.3 or int(ntd.token_ids[j]) == tiny_index.separator_id
    assert checked > 20


def test_draft_thresholds_and_cap(tiny_tok, tiny_index):
    ctx = tiny_tok.encode(TEXTS[0])[:200]
    state = init_state(tiny_index, ctx).values
    long = InfiniGramDrafter(tiny_index, max_draft=8, min_share=0.0, min_joint=0.0).infgram_chain(state, 8)
    assert len(long) == 8  # a 200-token match of the corpus drafts its continuation to the cap
    assert list(long.tokens) == tiny_tok.encode(TEXTS[0])[200:208]
    strict = InfiniGramDrafter(tiny_index, min_count=2).infgram_chain(state, 8)
    assert all(c >= 2 for c in strict.counts)
    ratio = InfiniGramDrafter(tiny_index, max_draft=8, match_ratio=0.5, prompt_lookup=False)
    assert ratio.cap_for(3) == 2 and ratio.cap_for(100) == 8
    assert ratio.draft(tiny_tok.encode(TEXTS[0])[:3]).tokens.size <= 2
    off = InfiniGramDrafter(tiny_index, min_match=50, prompt_lookup=False)
    assert off.draft([int(x) for x in ctx[-10:]]).source == "none"  # the off-switch: short matches draft nothing


def test_children_and_sampled_contexts(tmp_path):
    rng = np.random.default_rng(0)
    docs = []
    for _ in range(6000):  # context [1] occurs 6000 times (> IG_DRAFT_EXACT_MAX): sampled candidates
        r = rng.random()
        docs.append([1, 5 if r < 0.5 else (7 if r < 0.8 else int(rng.integers(10, 400))), 2])
    index = make_index(docs, tmp_path, vocab_size=500)
    d = InfiniGramDrafter(index, min_match=1, prompt_lookup=False)
    st = init_state(index, [1]).values
    toks, cnts, child, total = d.children(st, 3)
    assert total == index.count([1])
    assert list(toks[:2]) == [5, 7]
    for t, c, cs in zip(toks, cnts, child):
        assert c == index.count([1, int(t)])
        assert cs[0] == 2 and cs[1] == c
    chain = d.infgram_chain(st, 4)
    assert list(chain.tokens) == [5, 2]  # then the document ends (no EOS id to draft it as)
    with_eos = InfiniGramDrafter(index, min_match=1, prompt_lookup=False, eos_token_id=0).infgram_chain(st, 4)
    assert list(with_eos.tokens) == [5, 2, 0]


def _lookup_ref(seq, min_len, max_len, k):
    n, best, at = len(seq), 0, -1
    for j in range(n - 2, -1, -1):
        m = 0
        while m < max_len and j - m >= 0 and seq[j - m] == seq[n - 1 - m]:
            m += 1
        if m > best:
            best, at = m, j
    if best < min_len:
        return 0, []
    out = []
    for i in range(k):
        src = at + 1 + i
        out.append(seq[src] if src < n else out[src - n])
    return best, out


def test_lookup_matches_brute_force():
    rng = np.random.default_rng(4)
    d = InfiniGramDrafter(None, max_draft=6, lookup_min_match=2, lookup_max_match=9, match_ratio=0)
    for _ in range(300):
        seq = [int(x) for x in rng.integers(0, 4, int(rng.integers(0, 40)))]
        m, cont = _lookup_ref(seq, 2, 9, 6)
        got = d.lookup(np.asarray(seq, dtype=np.int64))
        assert got.match_len == m
        assert list(got.tokens) == cont
    # a looping pattern keeps repeating past the end of the sequence
    assert list(d.lookup(np.array([7, 1, 2, 3, 1, 2, 3], dtype=np.int64)).tokens) == [1, 2, 3, 1, 2, 3]


def test_rows_advance_like_fresh_states(tiny_tok, tiny_index):
    d = InfiniGramDrafter(tiny_index, eos_token_id=0)
    for p in _prompts(tiny_tok, 12, seed=5, lo=3, hi=60):
        row = d.start(p[:2])
        done = p[:2]
        for k in (1, 3, 2, 5, 20):
            piece = p[len(done):len(done) + k]
            d.append(row, piece)
            done = done + piece
            d.sync(row)
            assert np.array_equal(row.state, init_state(tiny_index, d.context(np.asarray(done))).values)
            assert np.array_equal(row.ids, done)
    row = d.start([5, 6, 7])
    d.append(row, [8, 0, 9])  # EOS: a new document, the ∞-gram context restarts after it
    d.sync(row)
    assert np.array_equal(row.state, init_state(tiny_index, [9]).values)


def test_tree_holds_the_chain(tiny_tok, tiny_index):
    d = InfiniGramDrafter(tiny_index, min_match=1)
    for p in _prompts(tiny_tok, 10, seed=6):
        chain = d.draft(p)
        tree = d.tree(p, width=3, max_nodes=12)
        assert len(tree) <= 12
        assert list(tree.tokens[:len(chain)]) == list(chain.tokens)  # the main draft is the first path
        for i in range(len(tree)):
            par = tree.parents[i]
            assert par < i and tree.depth[i] == (1 if par < 0 else tree.depth[par] + 1)
    # the ∞-gram's best-first tree: probabilities are products of shares, most probable first
    for p in _prompts(tiny_tok, 10, seed=13, lo=2, hi=12):
        state = init_state(tiny_index, p).values
        t = d.best_first(state, max_nodes=10, max_depth=4, width=3, min_prob=0.05)
        suffix = _suffix(tiny_index, p)
        probs = []
        for i in range(len(t)):
            path = [int(x) for x in t.path(i)]
            if path[-1] == d.eos_token_id:  # a document end: drafted as EOS, not a corpus token
                continue
            prob = 1.0
            for k in range(len(path)):
                prob *= tiny_index.count(suffix + path[:k + 1]) / tiny_index.count(suffix + path[:k])
            probs.append(prob)
            assert prob >= 0.05 and t.depth[i] <= 4
        assert probs == sorted(probs, reverse=True)
    t = DraftTree.from_paths([[1, 2, 3], [1, 2, 4], [5]], max_nodes=10)
    assert list(t.tokens) == [1, 2, 3, 4, 5] and list(t.parents) == [-1, 0, 1, 1, -1]


# ---------------------------------------------------------------------------- the loop


class OracleDrafter(InfiniGramDrafter):
    """Proposes the reference continuation of a row, corrupted at a random position."""

    def __init__(self, refs, seed=0, max_draft=6):
        super().__init__(None, max_draft=max_draft)
        self.refs = [np.asarray(r) for r in refs]
        self.rng = np.random.default_rng(seed)

    def _guess(self, ids, limit):
        for ref in self.refs:
            if len(ref) > len(ids) and np.array_equal(ref[:len(ids)], ids):
                k = int(self.rng.integers(0, limit + 1))
                toks = ref[len(ids):len(ids) + k].astype(np.int64).copy()
                if len(toks) and self.rng.random() < 0.5:
                    toks[int(self.rng.integers(0, len(toks)))] += 1
                return toks
        return np.zeros(0, dtype=np.int64)

    def draft_row(self, row, max_tokens=None):
        return Draft(self._guess(row.ids, self._limit(max_tokens)), "lookup", 1)

    def tree_row(self, row, *, max_tokens=None, **kw):
        a = self._guess(row.ids, self._limit(max_tokens))
        b = self._guess(row.ids, self._limit(max_tokens))
        return DraftTree.from_paths([a, b], 12)


def _real_rows(ids, mask):
    return [ids[b][mask[b].bool()].tolist() for b in range(len(ids))]


@pytest.mark.parametrize("tree", [False, True])
def test_greedy_identity_batch(model, tiny_tok, tiny_index, tree):
    rows = _prompts(tiny_tok, 5, seed=7)
    ids, mask = _left_pad(rows)
    ref = model.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0)
    out, st = speculative_generate(model, ids, tiny_index, attention_mask=mask, max_new_tokens=24, do_sample=False,
                                   pad_token_id=0, draft_tree=tree, return_stats=True)
    assert torch.equal(out, ref)
    oracle = OracleDrafter(_real_rows(ref, torch.cat([mask, torch.ones_like(ref[:, mask.shape[1]:])], 1)))
    out2, st2 = speculative_generate(model, ids, attention_mask=mask, drafter=oracle, max_new_tokens=24,
                                     do_sample=False, pad_token_id=0, draft_tree=tree, return_stats=True)
    assert torch.equal(out2, ref)
    assert st2.accepted > 0 and st2.steps < 24


def test_greedy_identity_many_prompts_batch1(model, tiny_tok, tiny_index):
    drafter = InfiniGramDrafter(tiny_index, min_match=1)  # shared: its SuffixCache is reused across calls
    for p in _prompts(tiny_tok, 8, seed=8, lo=1, hi=80):
        x = torch.tensor([p])
        ref = model.generate(x, max_new_tokens=16, do_sample=False, pad_token_id=0)
        assert torch.equal(speculative_generate(model, x, drafter=drafter, max_new_tokens=16, do_sample=False,
                                                pad_token_id=0), ref)


def test_eos_and_budget_per_row(model, tiny_tok):
    rows = _prompts(tiny_tok, 4, seed=9)
    ids, mask = _left_pad(rows)
    ref = model.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, pad_token_id=0)
    # make each row's 3rd..6th generated token an EOS: rows finish at different steps
    width = ids.shape[1]
    eos = int(ref[0, width + 2])
    ref_e = model.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, pad_token_id=0,
                           eos_token_id=eos)
    oracle = OracleDrafter(_real_rows(ref, torch.cat([mask, torch.ones_like(ref[:, width:])], 1)), seed=1)
    out = speculative_generate(model, ids, attention_mask=mask, drafter=oracle, max_new_tokens=20, do_sample=False,
                               pad_token_id=0, eos_token_id=eos)
    assert torch.equal(out, ref_e)


def test_with_logits_processor(model, tiny_tok, tiny_index):
    from transformers import LogitsProcessorList

    from infinigram_hf import InfiniGramLogitsProcessor

    proc = InfiniGramLogitsProcessor(tiny_index, lambda_sparse=0.9, lambda_dense=0.6, tokenizer=tiny_tok)
    procs = LogitsProcessorList([proc])
    rows = _prompts(tiny_tok, 3, seed=10)
    ids, mask = _left_pad(rows)
    ref = model.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, pad_token_id=0,
                         logits_processor=procs)
    out, st = speculative_generate(model, ids, tiny_index, attention_mask=mask, max_new_tokens=20, do_sample=False,
                                   pad_token_id=0, logits_processor=procs, return_stats=True)
    assert torch.equal(out, ref)
    assert st.accepted > 0  # the mixture follows the index, so ∞-gram drafts get accepted
    x = ids[:1, mask[0].bool()]
    ref1 = model.generate(x, max_new_tokens=20, do_sample=False, pad_token_id=0, logits_processor=procs,
                          repetition_penalty=1.3)
    assert torch.equal(speculative_generate(model, x, tiny_index, max_new_tokens=20, do_sample=False, pad_token_id=0,
                                            logits_processor=procs, repetition_penalty=1.3, draft_tree=True), ref1)


def test_sampling_respects_seed(model, tiny_tok, tiny_index):
    rows = _prompts(tiny_tok, 3, seed=11)
    ids, mask = _left_pad(rows)
    kw = dict(attention_mask=mask, max_new_tokens=16, do_sample=True, top_k=20, temperature=0.7, pad_token_id=0)
    outs = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        outs.append(speculative_generate(model, ids, tiny_index, **kw))
    assert torch.equal(outs[0], outs[1])
    assert not torch.equal(outs[0], outs[2])
    assert outs[0].shape[1] == ids.shape[1] + 16


def test_custom_generate_and_hf_loop(model, tiny_tok, tiny_index):
    x = torch.tensor([_prompts(tiny_tok, 1, seed=12)[0]])
    ref = model.generate(x, max_new_tokens=16, do_sample=False, pad_token_id=0)
    stats = {}
    out = model.generate(x, max_new_tokens=16, do_sample=False, pad_token_id=0, custom_generate=spec_generate,
                         index=tiny_index, draft_options={"max_draft": 4}, draft_stats=stats)
    assert torch.equal(out, ref) and stats["stats"].generated[0] == 16
    out = model.generate(x, max_new_tokens=16, do_sample=False, pad_token_id=0, custom_generate=hf_assisted_generate,
                         index=tiny_index)
    assert torch.equal(out, ref)
    gen = InfiniGramCandidateGenerator(InfiniGramDrafter(tiny_index), max_length=x.shape[1] + 3)
    cand, logits = gen.get_candidates(x)
    assert logits is None and cand.shape[1] <= x.shape[1] + 2 and torch.equal(cand[:, :x.shape[1]], x)


def test_errors(model, tiny_index):
    x = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="num_beams"):
        speculative_generate(model, x, tiny_index, num_beams=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="index="):
        speculative_generate(model, x, max_new_tokens=4)
    with pytest.raises(ValueError, match="right-padded"):
        speculative_generate(model, torch.tensor([[1, 2], [3, 0]]), tiny_index,
                             attention_mask=torch.tensor([[1, 1], [1, 0]]), max_new_tokens=4, pad_token_id=0)
    with pytest.raises(ValueError, match="max_draft"):
        InfiniGramDrafter(tiny_index, max_draft=-1)
    with pytest.raises(ValueError, match="source"):
        InfiniGramDrafter(tiny_index, source="both")


def test_adaptive_caps_and_step_width(tiny_index):
    d = InfiniGramDrafter(tiny_index, max_draft=8, verify_cost=0.05)
    row = d.start([1, 2, 3])
    draft = Draft(np.arange(8, dtype=np.int64), "lookup", 3)
    assert d.step_width([row], [draft]) > 0  # prior: drafts are worth trying
    for _ in range(12):  # every lookup draft rejected at once: the source switches itself off
        d.feedback(row, draft, 0)
    assert d.rate(row, "lookup") < 0.05 and d.step_width([row], [draft]) == 0
    assert d._adaptive_cap(row.accepted[1], row.rejected[1]) == 0
    good = d.start([1, 2, 3])
    for _ in range(12):  # always fully accepted: the whole draft, whatever the batch
        d.feedback(good, draft, 8)
    assert d.step_width([good], [draft]) == 8
    assert d.step_width([good, row], [draft, Draft(np.zeros(0, dtype=np.int64), "none", 0)]) == 8
    assert InfiniGramDrafter(tiny_index, adaptive=False).step_width([row], [draft]) == 8
