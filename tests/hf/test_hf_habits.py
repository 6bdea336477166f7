"""issue 13, friction: what a transformers user does by habit works, or is refused clearly --
perplexity's default window on a short-context model, a tokenizer with an added pad token, a
byte-level index with a subword model, a drafter whose index cannot match the model, paths
wherever an index goes."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_tiny import MODEL_EXTRA_ROWS, TEXTS, make_tokenizer, tiny_index, tiny_model, tiny_tok  # noqa: F401
from infinigram_hf import (InfiniGramDrafter, InfiniGramLogitsProcessor, TokenizerMismatchError, build_index,
                           perplexity, speculative_generate)


def _short_model(vocab: int, positions: int = 256):
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=16, n_layer=1, n_head=2,
                     bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def test_perplexity_window_defaults_to_the_model_context(tiny_tok, tiny_index) -> None:
    model = _short_model(len(tiny_tok) + MODEL_EXTRA_ROWS, positions=64)
    res = perplexity(model, tiny_tok, [TEXTS[1][:1500]], str(tiny_index.paths[0]), progress=False)  # a path too
    assert res.num_tokens > 64  # longer than one window: the window slid
    with pytest.raises(ValueError, match="longer than the model's context"):
        perplexity(model, tiny_tok, [TEXTS[1][:200]], tiny_index, window=128, progress=False)


def test_tokenizer_with_an_added_pad_token_is_accepted(tiny_index, tiny_tok) -> None:
    tok = copy.deepcopy(tiny_tok)
    tok.add_special_tokens({"pad_token": "<pad>"})
    assert tok.pad_token_id == len(tok) - 1 == tiny_index.vocab_size
    proc = InfiniGramLogitsProcessor(tiny_index, tokenizer=tok)
    assert proc.pad_token_id == tiny_index.vocab_size
    other = make_tokenizer(TEXTS[:2])  # another vocabulary: still refused
    with pytest.raises(TokenizerMismatchError):
        InfiniGramLogitsProcessor(tiny_index, tokenizer=other)


def test_byte_index_with_a_subword_model_is_refused(tmp_path) -> None:
    tiny_model = _short_model(1000)  # a subword vocabulary (more ids than bytes and specials)
    byte_ix = build_index(TEXTS[:2], tmp_path / "bytes", progress=False)
    proc = InfiniGramLogitsProcessor(byte_ix)
    with pytest.raises(TokenizerMismatchError, match="byte-level"):
        proc(torch.tensor([[1, 2, 3]]), torch.zeros(1, tiny_model.config.vocab_size))
    with pytest.raises(TokenizerMismatchError, match="byte-level"):
        perplexity(tiny_model, None, [[1, 2, 3, 4]], byte_ix, progress=False)
    with pytest.warns(UserWarning, match="cannot match the model's vocabulary"):
        speculative_generate(tiny_model, torch.tensor([[1, 2, 3]]), byte_ix, max_new_tokens=2, pad_token_id=0)


def test_paths_are_accepted_wherever_an_index_is(tiny_model, tiny_index, tiny_tok) -> None:
    path = str(tiny_index.paths[0])
    proc = InfiniGramLogitsProcessor(path, tokenizer=tiny_tok)
    drafter = InfiniGramDrafter(path)
    ids = torch.tensor([tiny_tok.encode(TEXTS[0][:80])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the matching drafter raises no vocabulary warning
        out = speculative_generate(tiny_model, ids, drafter=drafter, max_new_tokens=4, pad_token_id=0,
                                   logits_processor=[proc])
    assert out.shape[1] == ids.shape[1] + 4
    with pytest.raises(ValueError, match="index must be an InfiniGramIndex, a RemoteIndex or an index directory"):
        InfiniGramLogitsProcessor(42)


def test_results_print_short() -> None:
    """issue 13: the LambdaFit repr printed whole per-token arrays."""
    import numpy as np

    from infinigram_hf import TokenScores, interpolate, tune_lambdas

    n = 50_000
    rng = np.random.default_rng(0)
    s = TokenScores.from_arrays(neural_logprob=-rng.random(n), infgram_prob=rng.random(n), sparse=rng.random(n) < .3,
                                effective_n=rng.integers(1, 9, n))
    fit = tune_lambdas(s)
    assert len(repr(fit)) < 300 and "lambda_sparse=" in repr(fit)
    assert len(repr(interpolate(s))) < 300 and "perplexity=" in repr(interpolate(s))


def test_difference_index_goes_where_an_index_goes(tiny_model, tiny_tok, tmp_path) -> None:
    """The processor and perplexity on `full minus removed` equal those on an index built
    without the removed documents."""
    full = build_index(TEXTS, tmp_path / "full", tokenizer=tiny_tok, progress=False)
    removed = build_index(TEXTS[4:], tmp_path / "removed", tokenizer=tiny_tok, progress=False)
    rebuilt = build_index(TEXTS[:4], tmp_path / "rebuilt", tokenizer=tiny_tok, progress=False)
    diff = full.difference(removed)
    tiny_tok.padding_side = "left"
    batch = tiny_tok([TEXTS[0][100:160], TEXTS[4][50:70]], return_tensors="pt", padding=True)
    scores = torch.randn(2, tiny_model.config.vocab_size)
    got = InfiniGramLogitsProcessor(diff, tokenizer=tiny_tok)(batch.input_ids, scores)
    want = InfiniGramLogitsProcessor(rebuilt, tokenizer=tiny_tok)(batch.input_ids, scores)
    assert torch.allclose(got, want)
    docs = [TEXTS[4][:600]]
    a = perplexity(tiny_model, tiny_tok, docs, diff, progress=False)
    b = perplexity(tiny_model, tiny_tok, docs, rebuilt, progress=False)
    assert abs(a.perplexity - b.perplexity) < 1e-9 * b.perplexity
