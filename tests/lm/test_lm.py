"""InfiniGramLM: ∞-gram and back-off scoring and distributions against a brute-force reference,
sampling against the distributions (chi-square), sampling options, reproducibility, stop strings
and generation constraints, at byte, word and BPE level."""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf import build_index
from infinigram_hf.lm import InfiniGramLM
from infinigram_hf.lm.generation import GenerationError
from lm_reference import EOD, LMReference, chi_square_z, make_lm, random_corpus
from conftest import make_index


CASES = [(seed, shards) for seed in range(4) for shards in (1, 3)]


@pytest.mark.parametrize("seed,shards", CASES)
def test_infgram_and_backoff_scores_match_reference(tmp_path, seed, shards):
    docs = random_corpus(seed)
    ref = LMReference(docs, 4)
    lm = make_lm(tmp_path, docs, 4, shards=shards)
    rng = random.Random(100 + seed)
    query = [rng.randrange(4) for _ in range(30)]  # token 3 never occurs in the corpus
    for eod in (False, True):
        for mc in (2, 100):
            s = lm.score(query, "infgram", eod=eod, max_context=mc)
            for i, t in enumerate(query):
                p, L, sp = ref.infgram(query[:i], t, mc, eod)
                assert s.probs[i] == pytest.approx(p, abs=1e-12), (i, eod, mc)
                assert s.suffix_len[i] == L and s.sparse[i] == sp
        for k, decay in ((1, 0.1), (2, 0.1), (3, 0.5), (None, 0.1)):
            s = lm.score(query, "backoff", k=k, decay=decay, eod=eod, floor=0.0)
            for i, t in enumerate(query):
                want = ref.backoff(query[:i], t, k, decay, 100, eod)
                assert s.probs[i] == pytest.approx(want, rel=1e-12, abs=1e-15), (i, k, eod)


def test_backoff_floor_and_first_position(tmp_path):
    lm = make_lm(tmp_path, [[0, 1, 2, 0, 1]], 4)
    s = lm.score([3, 0, 1, 3], "backoff")  # default floor 1e-10
    assert s.probs[0] == 1e-10  # no context: no level
    assert s.probs[3] == 1e-10  # unseen token
    assert s.probs[2] == 1.0
    r = lm.perplexity([[3, 0, 1]], method="backoff")  # from the 2nd token: P(0|3) is floored
    assert r.num_tokens == 2 and np.isfinite(r.perplexity)


@pytest.mark.parametrize("seed,shards", CASES[:4])
def test_distributions_match_reference(tmp_path, seed, shards):
    docs = random_corpus(seed)
    ref = LMReference(docs, 4)
    lm = make_lm(tmp_path, docs, 4, shards=shards)
    rng = random.Random(seed)
    for _ in range(6):
        ctx = [rng.randrange(3) for _ in range(rng.randint(0, 8))]
        for eod in (False, True):
            d = lm.distribution(ctx, "infgram", eod=eod)
            assert d.sum() == pytest.approx(1.0)
            p, L, _ = ref.infgram(ctx, 0, 100, eod)
            f = ref.followers(tuple(ctx[len(ctx) - L:]), eod)
            T = sum(f.values())
            for w in range(4):
                assert d[w] == pytest.approx(f[w] / T)
            assert d[4] == pytest.approx(f[EOD] / T)  # slot vocab_size = end of document
            for k in (1, 2, None):
                d = lm.distribution(ctx, "backoff", k=k, eod=eod)
                assert d.sum() == pytest.approx(1.0)
                levels = ref.backoff_levels(ctx, k, 100, eod) or [(0, ref.followers((), eod))]  # unigram fallback
                num, den = Counter(), 0.0
                for i, (_, f) in enumerate(levels):
                    for w, c in f.items():
                        num[w] += 0.1 ** i * c
                    den += 0.1 ** i * sum(f.values())
                for w in range(4):
                    assert d[w] == pytest.approx(num[w] / den)
                assert d[4] == pytest.approx(num[EOD] / den)


def _draws(lm, ctx, n, **kw):
    """n independent one-token samples after ctx through the C sampler."""
    from infinigram_hf.lm.generation import _sampling

    cfg, keep = lm._config(kw.pop("method"), **{k: kw.pop(k) for k in list(kw) if k in ("k", "eod", "order", "decay")})
    smp = _sampling(kw.get("greedy", False), kw.get("temperature", 1.0), kw.get("top_k", 0), kw.get("top_p", 1.0))
    state = np.array([1, 2, 3, 4], dtype=np.uint64)
    out = Counter()
    ctx = np.asarray(ctx, dtype=np.uint32)
    for _ in range(n):
        ids, _, _, ended = lm._sample_chunk(cfg, smp, ctx, 1, state)
        out[lm.vocab_size if ended else int(ids[0])] += 1
    return out


@pytest.mark.parametrize("method,kw", [("infgram", {}), ("backoff", {"k": 2}), ("backoff", {"k": None}),
                                       ("kn", {"order": 3}), ("kn", {})])
def test_sampling_follows_the_distribution(tmp_path, method, kw):
    docs = [[0, 1, 2, 0, 1, 1, 0, 2, 2, 1], [1, 1, 2, 0, 0, 1], [2, 0, 1, 2]]
    lm = make_lm(tmp_path, docs, 3, shards=2)
    n = 3000
    for ctx in ([0, 1], [2], []):
        dist = lm.distribution(ctx, method, eod=True, **kw)
        probs = {i: float(p) for i, p in enumerate(dist) if p > 0}
        # plain path (exact suffix-array rank) and the materialised path (top_k >= support)
        for extra in ({}, {"top_k": 10}):
            got = _draws(lm, ctx, n, method=method, eod=True, **kw, **extra)
            assert chi_square_z(got, probs, n) < 4.5, (ctx, extra, got, probs)


def test_top_k_top_p_temperature_greedy(tmp_path):
    docs = [[0] * 6 + [1] * 3 + [2] * 1, [0, 1, 0, 0, 2, 0]]
    lm = make_lm(tmp_path, docs, 3)
    ctx: list = []
    dist = lm.distribution(ctx, "infgram")[:3]
    order = np.argsort(-dist)
    got = _draws(lm, ctx, 500, method="infgram", top_k=1)
    assert set(got) == {int(order[0])}
    got = _draws(lm, ctx, 2000, method="infgram", top_k=2)
    assert set(got) <= set(order[:2].tolist())
    p2 = dist[order[:2]] / dist[order[:2]].sum()
    assert chi_square_z(got, dict(zip(order[:2].tolist(), p2)), 2000) < 4.5
    # top_p: the smallest prefix (by probability) whose mass reaches top_p
    top_p = float(dist[order[0]]) + 1e-9
    got = _draws(lm, ctx, 300, method="infgram", top_p=top_p)
    assert set(got) == set(order[:2].tolist()) or set(got) == {int(order[0])}
    got = _draws(lm, ctx, 300, method="infgram", top_p=float(dist[order[0]]) - 1e-9)
    assert set(got) == {int(order[0])}
    # temperature: p^(1/T), renormalised
    t = 0.5
    pt = dist ** (1 / t)
    pt /= pt.sum()
    got = _draws(lm, ctx, 3000, method="infgram", temperature=t)
    assert chi_square_z(got, dict(enumerate(pt)), 3000) < 4.5
    assert _draws(lm, ctx, 20, method="infgram", greedy=True) == Counter({int(order[0]): 20})
    g = lm.generate([0], 5, method="infgram", temperature=0, eod=False)  # temperature 0 = greedy
    assert g.tries == 1


# ------------------------------------------------------------------ text-level generation


NAMES = ["maria", "marta", "mario", "martina", "anna", "annette", "antonio", "carla", "carlo", "carmen",
         "roberto", "roberta", "rosa", "rosalia", "bianca", "bruno", "giulia", "giulio", "marco", "marcella"]


@pytest.fixture(scope="module")
def names_lm(tmp_path_factory):
    idx = build_index(NAMES, tmp_path_factory.mktemp("names") / "ix", progress=False)
    return InfiniGramLM(idx)


def test_generation_is_reproducible_and_chunk_invariant(names_lm):
    a = names_lm.generate("", 40, seed=7, k=None)
    b = names_lm.generate("", 40, seed=7, k=None)
    c = names_lm.generate("", 40, seed=7, k=None, chunk_size=1)
    assert a.text == b.text == c.text
    assert np.array_equal(a.token_ids, c.token_ids)
    texts = {names_lm.generate("", 40, seed=s, k=None).text for s in range(10)}
    assert len(texts) > 1


def test_names_end_at_end_of_document(names_lm):
    for s in range(20):
        g = names_lm.generate("", 50, seed=s, method="backoff")
        assert g.finish_reason == "end_of_document"
        assert g.text and set(g.text) <= set("".join(NAMES))
        # Kneser-Ney (the default) keeps some mass on every token of the vocabulary, as its
        # scores do, so it may sample bytes no name has; it still ends at end of document
        assert names_lm.generate("", 50, seed=s).finish_reason == "end_of_document"
    # the ∞-gram copies a document verbatim once the match is unique
    g = names_lm.generate("rosal", 50, method="infgram", seed=0)
    assert g.text == "ia" and g.finish_reason == "end_of_document"


@pytest.mark.parametrize("seed", range(3))
def test_constraints_always_hold(names_lm, seed):
    cases = [
        dict(starts_with="ma"), dict(ends_with="a"), dict(contains="rt"), dict(contains=["o", "r"]),
        dict(min_length=6), dict(max_length=5), dict(min_length=4, max_length=5, length_unit="tokens"),
        dict(starts_with="car", ends_with="o", max_length=8), dict(starts_with="b", contains="n", ends_with="a"),
    ]
    for c in cases:
        for method in ("backoff", "infgram"):
            g = names_lm.generate("", 30, seed=seed, method=method, k=None, **c)
            assert g is not None, c
            t = g.text
            n = len(t) if c.get("length_unit", "chars") == "chars" else len(g.token_ids)
            assert t.startswith(c.get("starts_with", ""))
            assert t.endswith(c.get("ends_with", ""))
            for sub in ([c["contains"]] if isinstance(c.get("contains"), str) else c.get("contains", [])):
                assert sub in t
            assert n >= c.get("min_length", 0) and n <= c.get("max_length", 10 ** 9)


def test_impossible_constraints(names_lm):
    assert names_lm.generate("", 30, contains="zz", max_tries=5, seed=0) is None
    with pytest.raises(GenerationError, match="no output satisfied"):
        names_lm.generate("", 30, contains="zz", max_tries=5, seed=0, on_failure="raise")
    g = names_lm.generate("", 30, contains="zz", greedy=True, max_tries=50)
    assert g is None  # greedy is deterministic: tried once


def test_stop_strings(tmp_path):
    text = "the cat sat.\nthe dog ran.\nthe cat ran.\n" * 3
    # back-off samples only continuations the corpus has (KN's floor would spell new words here)
    lm = InfiniGramLM(build_index([text], tmp_path / "ix", progress=False), method="backoff", k=2)
    for s in range(10):
        g = lm.generate("the ", 100, seed=s, stop="\n", eod=False)
        assert "\n" not in g.text and g.finish_reason == "stop"
        assert g.text.endswith(".")
    g = lm.generate("the ", 100, seed=0, stop=[" ran", " sat"], eod=False)
    assert g.text in ("cat", "dog")


def test_argument_errors(names_lm):
    with pytest.raises(ValueError, match="method"):
        names_lm.score("ab", "nope")
    with pytest.raises(ValueError, match="k must"):
        names_lm.score("ab", "backoff", k=0)
    with pytest.raises(ValueError, match="max_context"):
        names_lm.score("ab", "infgram", max_context=1000)
    with pytest.raises(ValueError, match="top_p"):
        names_lm.generate("", 5, top_p=0)
    with pytest.raises(ValueError, match="temperature"):
        names_lm.generate("", 5, temperature=-1)
    with pytest.raises(ValueError, match="length_unit"):
        names_lm.generate("", 5, length_unit="words")
    with pytest.raises(ValueError, match="min_length"):
        names_lm.generate("", 5, min_length=5, max_length=2)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        names_lm.score([300], "infgram")


def _whitespace_wordlevel(texts):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    return tok


def _bpe(texts):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


SENTENCES = ["the quick brown fox jumps over the lazy dog", "the lazy dog sleeps all day",
             "a quick brown cat jumps over the fence", "the fox and the dog are friends"] * 3


@pytest.mark.parametrize("make_tok", [_whitespace_wordlevel, _bpe], ids=["word", "bpe"])
def test_word_and_bpe_level(tmp_path, make_tok):
    tok = make_tok(SENTENCES)
    idx = build_index(SENTENCES, tmp_path / "ix", tokenizer=tok, progress=False)
    lm = InfiniGramLM(idx, method="backoff", k=2)  # only words the corpus has (KN's floor spells new ones)
    g = lm.generate("the quick", 80, seed=0)
    assert g.text and g.finish_reason == "end_of_document"
    assert all(w in " ".join(SENTENCES).split() for w in g.text.split())
    g = lm.generate("the", 80, seed=1, starts_with=" lazy" if make_tok is _bpe else "lazy", ends_with="day")
    assert g is not None and g.text.strip().startswith("lazy") and g.text.endswith("day")
    r = lm.perplexity(["the quick brown dog sleeps"], method="kn")
    assert np.isfinite(r.perplexity) and r.num_tokens >= 3


def test_options_of_another_method_are_refused(tmp_path):
    """issue 13: method="kn", k=3 used to ignore k silently."""
    lm = InfiniGramLM(make_index([[1, 2, 3, 1, 2, 4]], tmp_path, vocab_size=8))
    with pytest.raises(ValueError, match="k applies to method 'backoff' only, not 'kn'"):
        lm.perplexity([[1, 2, 3]], method="kn", k=3)
    with pytest.raises(ValueError, match="order applies to method 'kn' and 'wb' only"):
        lm.score([1, 2, 3], "backoff", order=3)
    with pytest.raises(ValueError, match="decay applies"):
        lm.generate([1], 3, method="infgram", decay=0.5, seed=0)
    assert lm.generate([1], 3, seed=0) is not None            # the defaults still work
    assert lm.perplexity([[1, 2, 3]], method="backoff", k=2).perplexity > 0


def test_one_distribution_for_scoring_and_sampling(tmp_path):
    """issue 13: generate() sampled from back-off k=2 while score()/perplexity() used KN. Now the
    LM's method (and its options) is the default of every call; a call may name another."""
    ix = make_index([[1, 2, 3, 1, 2, 4, 1, 2, 3, 5]], tmp_path, vocab_size=8)
    kn, bo = InfiniGramLM(ix), InfiniGramLM(ix, method="backoff", k=2)
    assert kn.method == "kn" and bo.method == "backoff" and "k=2" in repr(bo)
    ctx = [1, 2]
    assert np.allclose(kn.distribution(ctx), kn.distribution(ctx, "kn"))
    assert np.allclose(bo.distribution(ctx), kn.distribution(ctx, "backoff", k=2))
    assert np.allclose(bo.score([1, 2, 3]).probs, kn.score([1, 2, 3], "backoff", k=2).probs)
    assert bo.perplexity([[1, 2, 3]]).method == "backoff"
    # greedy generation follows the same distribution as distribution()
    for lm in (kn, bo):
        g = lm.generate(ctx, 1, greedy=True, eod=False)
        assert g.token_ids[-1] == int(np.argmax(lm.distribution(ctx)[:-1]))
    # a call naming another method starts from that method's defaults, not the LM's options
    assert bo.perplexity([[1, 2, 3]], "kn").method == "kn"
    with pytest.raises(ValueError, match="k applies to method 'backoff' only"):
        InfiniGramLM(ix, method="kn", k=3)
    with pytest.raises(ValueError, match="method must be one of"):
        InfiniGramLM(ix, method="katz")


def test_perplexity_takes_a_dataset(tmp_path):
    """issue 13: InfiniGramLM.perplexity took lists only (infinigram_hf.perplexity takes a Dataset)."""
    datasets = pytest.importorskip("datasets")
    lm = InfiniGramLM(build_index(["the cat sat", "the cat ate"], tmp_path / "ix", progress=False))
    texts = ["the cat", "a cat sat"]
    want = lm.perplexity(texts).perplexity
    assert lm.perplexity(datasets.Dataset.from_dict({"text": texts})).perplexity == want
    assert lm.perplexity(datasets.Dataset.from_dict({"body": texts}), text_column="body").perplexity == want
    with pytest.raises(ValueError, match="no 'text' column"):
        lm.perplexity(datasets.Dataset.from_dict({"body": texts}))
