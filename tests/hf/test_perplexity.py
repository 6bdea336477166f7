"""Interpolated perplexity: a tiny case against a hand computation (per-token forward passes and a
brute-force ∞-gram), λ = 0 = the neural perplexity exactly, λ tuning, inputs and errors."""
from __future__ import annotations

import math

import datasets
import numpy as np
import pytest
import torch

from conftest import Reference
from hf_tiny import TEXTS, make_tokenizer, tiny_index, tiny_model, tiny_tok  # noqa: F401
from infinigram_hf import TokenizerMismatchError
from infinigram_hf.build import build_index
from infinigram_hf.lm.mixture import TokenScores, interpolate, relative_improvement, tune_lambdas
from infinigram_hf.hf.perplexity import perplexity, windows, with_index

# Three short "documents": one copied from the index, one partly, one not at all.
DOCS = [TEXTS[1][500:620], "def heapify(x):\n    n = len(x)\n    return None\n", "zebra quux 42 !!"]


SMALL_CORPUS = [TEXTS[1][:3000], TEXTS[4][:1500]]


@pytest.fixture(scope="module")
def small_index(tiny_tok, tmp_path_factory):
    """A small index (the brute-force reference scans the whole corpus for every n-gram)."""
    index = build_index(SMALL_CORPUS, tmp_path_factory.mktemp("ppl") / "ix", tokenizer=tiny_tok, progress=False)
    yield index
    index.close()


def hand_window_start(t: int, n: int, window: int, stride: int) -> int:
    """Where the window that scores position t starts (its end: first of window, window+stride,
    ..., clipped to n, that lies past t)."""
    end = window
    while end <= t:
        end = min(end + stride, n) if end < n else n
    return max(0, end - window)


def test_windows_cover_every_target_once():
    for n in range(0, 40):
        for window, stride in ((4, 1), (4, 3), (8, 4), (16, 5)):
            got = windows(n, window, stride)
            targets = [t for b, e, f in got for t in range(f, e)]
            assert targets == list(range(1, n)), (n, window, stride)
            assert all(e - b <= window and b < f for b, e, f in got)


def test_tiny_case_equals_hand_computation(tiny_model, tiny_tok, small_index):
    window, stride, ls, ld = 12, 5, 0.7, 0.25
    res = perplexity(tiny_model, tiny_tok, DOCS, small_index, window=window, stride=stride, lambda_sparse=ls,
                     lambda_dense=ld, batch_size=3, progress=False)
    ref = Reference([tiny_tok.encode(t) for t in SMALL_CORPUS], small_index.vocab_size)
    logs, logs_nn, n_sparse = [], [], 0
    for text in DOCS:
        doc = tiny_tok.encode(text)
        seq = [tiny_tok.bos_token_id] + doc
        for t in range(1, len(seq)):
            b = hand_window_start(t, len(seq), window, stride)
            with torch.no_grad():
                logits = tiny_model(torch.tensor([seq[b:t]])).logits[0, -1].double()
            p_nn = torch.softmax(logits, -1)[seq[t]].item()
            p = ref.infgram_prob(doc[: t - 1], doc[t - 1])
            lam = ls if p.sparse else ld
            n_sparse += p.sparse
            logs.append(math.log(lam * p.prob + (1 - lam) * p_nn))
            logs_nn.append(math.log(p_nn))
    assert res.num_tokens == len(logs)
    assert res.neural_perplexity == pytest.approx(math.exp(-np.mean(logs_nn)), rel=1e-5)
    assert res.perplexity == pytest.approx(math.exp(-np.mean(logs)), rel=1e-5)
    assert res.sparse_fraction == pytest.approx(n_sparse / len(logs))
    assert res.relative_improvement == pytest.approx(
        (1 - (res.perplexity - 1) / (res.neural_perplexity - 1)) * 100)
    assert res.by_effective_n.num_tokens.sum() == res.num_tokens


def test_lambda_zero_is_the_neural_perplexity_exactly(tiny_model, tiny_tok, tiny_index):
    res = perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=16, stride=8, lambda_sparse=0.0,
                     lambda_dense=0.0, progress=False)
    assert res.perplexity == res.neural_perplexity
    assert res.relative_improvement == 0.0
    again = interpolate(res.scores, 0.0, 0.0)
    np.testing.assert_array_equal(again.by_effective_n.perplexity, again.by_effective_n.neural_perplexity)


def test_first_token_without_bos_and_dataset_input(tiny_model, tiny_tok, tiny_index):
    ds = datasets.Dataset.from_dict({"content": DOCS})
    with_bos = perplexity(tiny_model, tiny_tok, ds, tiny_index, text_column="content", window=32, stride=16,
                          progress=False)
    assert with_bos.num_tokens == sum(len(tiny_tok.encode(t)) for t in DOCS)
    no_bos = perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=32, stride=16, add_bos=False, progress=False)
    assert no_bos.num_tokens == with_bos.num_tokens - len(DOCS)
    ids = [tiny_tok.encode(t) for t in DOCS]   # pre-tokenized input scores the same
    pre = perplexity(tiny_model, None, ids, tiny_index, window=32, stride=16, progress=False)
    assert pre.perplexity == pytest.approx(with_bos.perplexity, rel=1e-6)
    with pytest.raises(ValueError, match="text_column"):
        perplexity(tiny_model, tiny_tok, ds, tiny_index, window=32, stride=16, progress=False)


def test_bad_arguments_and_tokenizer_mismatch(tiny_model, tiny_tok, tiny_index):
    with pytest.raises(ValueError, match="stride"):
        perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=8, stride=8, progress=False)
    with pytest.raises(ValueError, match="lambda_dense"):
        perplexity(tiny_model, tiny_tok, DOCS, tiny_index, lambda_dense=2.0, progress=False)
    with pytest.raises(ValueError, match="single string"):
        perplexity(tiny_model, tiny_tok, "abc", tiny_index, window=32, stride=16, progress=False)
    with pytest.raises(TokenizerMismatchError):
        perplexity(tiny_model, make_tokenizer(TEXTS[:1], vocab_size=270), DOCS, tiny_index, window=32, stride=16,
                   progress=False)


def test_tuning_finds_the_minimum_and_em_agrees_with_grid(tiny_model, tiny_tok, tiny_index):
    scores = perplexity(tiny_model, tiny_tok, DOCS + [TEXTS[0][:800]], tiny_index, window=64, stride=32,
                        progress=False).scores
    em = tune_lambdas(scores)
    grid = tune_lambdas(scores, method="grid", grid_step=0.001)
    assert em.lambda_sparse == pytest.approx(grid.lambda_sparse, abs=2e-3)
    assert em.lambda_dense == pytest.approx(grid.lambda_dense, abs=2e-3)
    assert em.result.perplexity <= grid.result.perplexity * (1 + 1e-6)
    rng = np.random.default_rng(0)
    for ls, ld in rng.uniform(0, 1, size=(20, 2)):
        assert em.result.perplexity <= interpolate(scores, ls, ld).perplexity * (1 + 1e-9)
    assert em.result.perplexity < em.result.neural_perplexity


def test_token_scores_roundtrip_and_concat(tmp_path):
    s = TokenScores.from_arrays([-1.0, -2.5, -0.1], [0.5, 0.0, 1.0], [False, False, True], [2, 1, 9], [0, 0, 1])
    s.save(tmp_path / "s.npz")
    back = TokenScores.load(tmp_path / "s.npz")
    for name in ("neural_logprob", "infgram_prob", "sparse", "effective_n", "doc_index"):
        np.testing.assert_array_equal(getattr(back, name), getattr(s, name))
    both = s.concat(s)
    assert len(both) == 6 and both.doc_index.tolist() == [0, 0, 1, 2, 2, 3]
    assert relative_improvement(1.0, 5.0) == 100.0 and relative_improvement(5.0, 5.0) == 0.0
    with pytest.raises(ValueError):
        TokenScores.from_arrays([1.0], [1.0, 2.0], [True], [1])


def test_with_index_rescores_only_the_infgram_side(tiny_model, tiny_tok, tiny_index, small_index):
    full = perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=16, stride=8, progress=False).scores
    small = perplexity(tiny_model, tiny_tok, DOCS, small_index, window=16, stride=8, progress=False).scores
    swapped = with_index(full, tiny_tok, DOCS, small_index)
    for name in ("neural_logprob", "infgram_prob", "sparse", "effective_n", "doc_index"):
        np.testing.assert_array_equal(getattr(swapped, name), getattr(small, name))
    no_bos = perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=16, stride=8, add_bos=False,
                        progress=False).scores
    np.testing.assert_array_equal(with_index(no_bos, tiny_tok, DOCS, tiny_index).infgram_prob, no_bos.infgram_prob)
    with pytest.raises(ValueError, match="documents"):
        with_index(full, tiny_tok, DOCS[:2], tiny_index)


def test_demo_model_trains_and_is_cached(tiny_index, tiny_tok, tmp_path):
    from infinigram_hf.demo_model import tiny_gpt2

    model, tok = tiny_gpt2(tiny_index, tiny_tok, tmp_path / "m", steps=2, batch=2, seq_len=16, n_embd=16,
                           verbose=False)
    again, _ = tiny_gpt2(tiny_index, tiny_tok, tmp_path / "m", steps=2, batch=2, seq_len=16, n_embd=16)
    for a, b in zip(model.parameters(), again.parameters()):
        assert torch.equal(a, b)
    assert model.config.vocab_size == len(tiny_tok)


def test_window_longer_than_the_model_is_refused(tiny_model, tiny_tok, tiny_index):
    with pytest.raises(ValueError, match="context"):
        perplexity(tiny_model, tiny_tok, DOCS, tiny_index, window=tiny_model.config.n_positions + 1, progress=False)
