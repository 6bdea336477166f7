"""InfiniGramLogitsProcessor: the mixture against a hand computation, and inside generate() in
every decoding mode (greedy, sampling, beam search, left-padded batches, assisted decoding)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LogitsProcessorList

from conftest import Reference
from hf_tiny import MODEL_EXTRA_ROWS, TEXTS, make_model, make_tokenizer, tiny_index, tiny_model, tiny_tok  # noqa: F401
from infinigram_hf import TokenizerMismatchError
from infinigram_hf.build import build_index
from infinigram_hf import InfiniGramLogitsProcessor

LS, LD = 0.6, 0.3


def hand_mixture(p_inf: np.ndarray, sparse: bool, scores: np.ndarray, ls: float = LS, ld: float = LD) -> np.ndarray:
    """log(λ·P_∞ + (1−λ)·softmax(scores)) in float64, P_∞ a dense row."""
    s = scores.astype(np.float64)
    p_nn = np.exp(s - s.max())
    p_nn /= p_nn.sum()
    lam = ls if sparse else ld
    with np.errstate(divide="ignore"):
        return np.log(lam * p_inf + (1 - lam) * p_nn)


def dense_row(index, context, width: int, eos: int):
    """P_∞ row from the index's ∞-gram next-token distribution, end-of-document moved to EOS."""
    d = index.infgram_ntd(np.asarray(context, dtype=np.int64))
    row = np.zeros(width)
    for t, p in zip(d.token_ids.tolist(), d.probs.tolist()):
        row[eos if t == index.separator_id else t] += p
    return row, d.sparse


@pytest.fixture(params=[True, False], ids=["one C step", "numpy path"])
def fused(request):
    """The processor's two CPU paths: the whole step in one C call (mix_step), and the numpy
    path other devices take (kept here on the CPU by turning the C step off)."""
    return request.param


def processor(*args, fused: bool, **kw) -> InfiniGramLogitsProcessor:
    proc = InfiniGramLogitsProcessor(*args, **kw)
    proc._fused = fused
    return proc


@pytest.fixture(scope="module")
def docs(tiny_tok):
    return [tiny_tok.encode(t) for t in TEXTS]


def test_mixture_matches_brute_force_hand_computation(tiny_index, tiny_tok, docs, fused):
    ref = Reference(docs, tiny_index.vocab_size)
    width = len(tiny_tok) + MODEL_EXTRA_ROWS
    proc = processor(tiny_index, LS, LD, fused=fused, tokenizer=tiny_tok)
    rng = np.random.default_rng(0)
    contexts = [docs[0][:7], docs[1][40:48], docs[4][-6:], [5, 9, 200, 17], [], docs[2][100:103]]
    seen_sparse = set()
    for ctx in contexts:
        counts, k = ref.infgram_ntd(ctx)
        total = sum(counts.values())
        p_inf = np.zeros(width)
        for t, c in counts.items():
            p_inf[tiny_tok.eos_token_id if t == ref.separator else t] += c / total
        sparse = len(counts) == 1
        seen_sparse.add(sparse)
        scores = rng.normal(size=(1, width)).astype(np.float32) * 3
        got = proc(torch.tensor([ctx], dtype=torch.long).reshape(1, -1), torch.from_numpy(scores))
        want = hand_mixture(p_inf, sparse, scores[0])
        np.testing.assert_allclose(got[0].numpy(), want, rtol=1e-5, atol=1e-5)
        assert abs(torch.logsumexp(got[0].double(), 0).item()) < 1e-5  # a distribution
    assert seen_sparse == {True, False}


def test_end_of_document_maps_to_eos_and_padded_vocab_gets_no_mass(tiny_index, tiny_tok, docs, fused):
    width = len(tiny_tok) + MODEL_EXTRA_ROWS
    proc = processor(tiny_index, 1.0, 1.0, fused=fused, tokenizer=tiny_tok)
    tail = docs[3][-40:]  # long enough to be unique: the document ends right after it
    out = proc(torch.tensor([tail]), torch.zeros(1, width))
    assert out[0, tiny_tok.eos_token_id].item() == pytest.approx(0.0, abs=1e-6)  # P = 1
    proc = processor(tiny_index, 0.5, 0.5, fused=fused, tokenizer=tiny_tok)
    scores = torch.randn(1, width)
    out = proc(torch.tensor([docs[0][:5]]), scores)
    extra = torch.log(0.5 * torch.softmax(scores, -1))[0, len(tiny_tok):]
    torch.testing.assert_close(out[0, len(tiny_tok):], extra)


def test_min_effective_n_leaves_neural_untouched(tiny_index, tiny_tok, docs, fused):
    width = len(tiny_tok) + MODEL_EXTRA_ROWS
    proc = processor(tiny_index, 0.9, 0.9, fused=fused, tokenizer=tiny_tok, min_effective_n=6)
    scores = torch.randn(2, width)
    short = [tiny_index.vocab_size - 1, 7]            # matches at most 2 tokens (effective n <= 3)
    long = docs[1][10:30]                             # matches all 20 tokens
    ids = torch.tensor([[0] * 18 + short, long])
    out = proc(ids, scores)
    torch.testing.assert_close(out[0], torch.log_softmax(scores[0], -1))
    row, sparse = dense_row(tiny_index, long, width, 0)
    np.testing.assert_allclose(out[1].numpy(), hand_mixture(row, sparse, scores[1].numpy(), 0.9, 0.9), atol=1e-5)


def test_left_padding_and_boundaries_are_stripped(tiny_index, tiny_tok, docs, fused):
    width = len(tiny_tok) + MODEL_EXTRA_ROWS
    pad = 7  # a pad id distinct from EOS, to see that only the leading run is stripped
    proc = processor(tiny_index, LS, LD, fused=fused, tokenizer=tiny_tok, pad_token_id=pad)
    ctx = docs[2][50:60]
    scores = torch.randn(1, width).repeat(4, 1)
    ids = torch.tensor([[pad] * 5 + ctx,
                        [9] * 5 + ctx,
                        [3, 4, 5, 6, 0] + ctx,                       # EOS: a document boundary
                        [3, 4, 5, 6, len(tiny_tok) + 2] + ctx])      # id outside the index: too
    out = proc(ids, scores)
    row, sparse = dense_row(tiny_index, ctx, width, 0)
    want = hand_mixture(row, sparse, scores[0].numpy())
    for r in (0, 2, 3):
        np.testing.assert_allclose(out[r].numpy(), want, atol=1e-5)
    assert proc.context(np.array([pad, pad, 5, pad, 6])).tolist() == [5, pad, 6]


def test_masked_tokens_stay_masked_and_dtype_kept(tiny_index, tiny_tok, docs, fused):
    width = len(tiny_tok) + MODEL_EXTRA_ROWS
    proc = processor(tiny_index, 1.0, 1.0, fused=fused, tokenizer=tiny_tok)
    tail = docs[3][-40:]
    scores = torch.zeros(1, width)
    scores[0, 0] = -float("inf")                      # e.g. min_new_tokens forbids EOS
    out = proc(torch.tensor([tail]), scores)
    assert torch.isneginf(out[0, 0])
    out16 = proc(torch.tensor([tail]), torch.zeros(1, width, dtype=torch.bfloat16))
    assert out16.dtype == torch.bfloat16


def test_tokenizer_and_vocab_mismatch_are_refused(tiny_index, tiny_tok):
    other = make_tokenizer(TEXTS[:2], vocab_size=280)
    with pytest.raises(TokenizerMismatchError, match="fingerprint"):
        InfiniGramLogitsProcessor(tiny_index, tokenizer=other)
    with pytest.raises(TokenizerMismatchError, match="model scores"):
        InfiniGramLogitsProcessor(tiny_index, model_vocab_size=len(tiny_tok) - 1)
    proc = InfiniGramLogitsProcessor(tiny_index)
    with pytest.raises(TokenizerMismatchError):
        proc(torch.tensor([[1, 2]]), torch.zeros(1, len(tiny_tok) - 5))
    for bad in (-0.1, 1.5, "0.3", None):
        with pytest.raises(ValueError, match="lambda_sparse"):
            InfiniGramLogitsProcessor(tiny_index, lambda_sparse=bad)
    with pytest.raises(ValueError, match="min_effective_n"):
        InfiniGramLogitsProcessor(tiny_index, min_effective_n=0)


def test_index_without_fingerprint_checks_sizes(tiny_tok, tmp_path):
    index = build_index([[1, 2, 3]], tmp_path / "ix", vocab_size=100, progress=False)
    with pytest.raises(TokenizerMismatchError, match="ids"):
        InfiniGramLogitsProcessor(index, tokenizer=tiny_tok)
    index.close()


# ------------------------------------------------------------------------ inside generate()


class Spy:
    """Wraps the processor: records the batch shapes and checks every row of every call against
    an independent mixture (P_∞ from the index's ∞-gram query, float64 numpy)."""

    def __init__(self, proc: InfiniGramLogitsProcessor):
        self.proc, self.shapes, self.checked = proc, [], 0

    def __call__(self, input_ids, scores):
        out = self.proc(input_ids, scores)
        self.shapes.append(tuple(input_ids.shape))
        for r in range(input_ids.shape[0]):
            if torch.isinf(scores[r]).any():
                continue
            ctx = self.proc.context(input_ids[r].numpy())
            row, sparse = dense_row(self.proc.index, ctx, scores.shape[-1], self.proc.eos_token_id)
            want = hand_mixture(row, sparse, scores[r].numpy(), self.proc.lambda_sparse, self.proc.lambda_dense)
            np.testing.assert_allclose(out[r].numpy(), want, atol=2e-4)
            self.checked += 1
        return out


def manual_greedy(model, proc, ids: torch.Tensor, steps: int) -> torch.Tensor:
    for _ in range(steps):
        with torch.no_grad():
            logits = model(ids).logits[:, -1, :]
        ids = torch.cat([ids, proc(ids, logits).argmax(-1, keepdim=True)], dim=1)
    return ids


def prompt(tiny_tok, n: int = 8, doc: int = 0, at: int = 30) -> torch.Tensor:
    return torch.tensor([tiny_tok.encode(TEXTS[doc])[at:at + n]])


def test_greedy_matches_a_manual_loop(tiny_model, tiny_index, tiny_tok):
    proc = InfiniGramLogitsProcessor(tiny_index, 0.9, 0.5, tokenizer=tiny_tok)
    ids = prompt(tiny_tok)
    spy = Spy(proc)
    out = tiny_model.generate(ids, attention_mask=torch.ones_like(ids), logits_processor=LogitsProcessorList([spy]),
                              max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(out, manual_greedy(tiny_model, proc, ids, 12))
    assert spy.checked == 12
    plain = tiny_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert not torch.equal(out, plain)  # the random model alone does not follow the corpus
    assert tiny_index.count(out[0]) > 0  # the ∞-gram steers it along the corpus


def test_sampling_warpers_act_on_the_mixture(tiny_model, tiny_index, tiny_tok):
    proc = InfiniGramLogitsProcessor(tiny_index, 0.9, 0.5, tokenizer=tiny_tok)
    ids = prompt(tiny_tok, doc=1, at=60)
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=8, pad_token_id=0)
    torch.manual_seed(0)
    top1 = tiny_model.generate(ids, logits_processor=LogitsProcessorList([proc]), do_sample=True, top_k=1, **kw)
    assert torch.equal(top1, manual_greedy(tiny_model, proc, ids, 8))
    spy = Spy(proc)
    res = tiny_model.generate(ids, logits_processor=LogitsProcessorList([spy]), do_sample=True, top_k=5, top_p=0.95,
                              temperature=0.7, output_scores=True, output_logits=True, return_dict_in_generate=True, **kw)
    assert spy.checked == 8
    for step, (logits, processed) in enumerate(zip(res.logits, res.scores)):
        context = res.sequences[:, : ids.shape[1] + step]
        mixed = proc(context, logits)[0]
        kept = torch.isfinite(processed[0]).nonzero().flatten()
        assert 1 <= len(kept) <= 5
        assert set(kept.tolist()) <= set(mixed.topk(5).indices.tolist())   # top-k of the mixture
        torch.testing.assert_close(processed[0, kept], mixed[kept] / 0.7)    # temperature on it


def test_beam_search_rows_are_batch_times_beams(tiny_model, tiny_index, tiny_tok):
    proc = InfiniGramLogitsProcessor(tiny_index, 0.9, 0.5, tokenizer=tiny_tok)
    ids = torch.cat([prompt(tiny_tok, doc=0, at=30), prompt(tiny_tok, doc=2, at=80)])
    spy = Spy(proc)
    out = tiny_model.generate(ids, attention_mask=torch.ones_like(ids), logits_processor=LogitsProcessorList([spy]),
                              num_beams=3, max_new_tokens=6, do_sample=False, pad_token_id=0, early_stopping=True)
    assert all(s[0] == 6 for s in spy.shapes) and spy.checked > 0
    assert tiny_index.count(out[0]) > 0 and tiny_index.count(out[1]) > 0


def test_left_padded_batch_equals_rows_alone(tiny_model, tiny_index, tiny_tok):
    proc = InfiniGramLogitsProcessor(tiny_index, 0.9, 0.5, tokenizer=tiny_tok)
    texts = [TEXTS[0][200:260], TEXTS[1][400:430]]
    tiny_tok.padding_side = "left"
    batch = tiny_tok(texts, return_tensors="pt", padding=True)
    assert (batch["input_ids"][1, :2] == tiny_tok.pad_token_id).all()
    spy = Spy(proc)
    out = tiny_model.generate(**batch, logits_processor=LogitsProcessorList([spy]), max_new_tokens=8,
                              do_sample=False, pad_token_id=0)
    assert spy.checked > 0
    for r, text in enumerate(texts):
        single = tiny_tok([text], return_tensors="pt")
        alone = tiny_model.generate(**single, logits_processor=LogitsProcessorList([proc]), max_new_tokens=8,
                                    do_sample=False, pad_token_id=0)
        assert out[r, -8:].tolist() == alone[0, -8:].tolist()


@pytest.mark.parametrize("mode", ["prompt_lookup", "assistant_model"])
def test_assisted_decoding_equals_plain_greedy(tiny_model, tiny_index, tiny_tok, mode):
    """Greedy assisted decoding is lossless: rejected drafts must leave no trace in the processor."""
    proc = InfiniGramLogitsProcessor(tiny_index, 0.9, 0.4, tokenizer=tiny_tok)
    ids = prompt(tiny_tok, n=12, doc=2, at=150)
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False, pad_token_id=0)
    plain = tiny_model.generate(ids, logits_processor=LogitsProcessorList([proc]), **kw)
    extra = {"prompt_lookup_num_tokens": 4} if mode == "prompt_lookup" else \
        {"assistant_model": make_model(len(tiny_tok) + MODEL_EXTRA_ROWS, seed=1, n_layer=1)}
    spy = Spy(proc)
    assisted = tiny_model.generate(ids, logits_processor=LogitsProcessorList([spy]), **extra, **kw)
    assert torch.equal(assisted, plain)
    assert spy.checked > 0
