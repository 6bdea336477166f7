"""The memorisation guard (InfiniGramLogitsProcessor(max_copy_len=K)): the tokens it forbids are
exactly those that would end a verbatim corpus copy longer than K (brute force), generation under
it never copies more than K tokens in a row while the same run without it does, and the per-step
copy report matches the corpus."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from infinigram_hf import InfiniGramDrafter, InfiniGramLogitsProcessor
from infinigram_hf.lm.copy_guard import forbidden_next

from conftest import Reference, built_index, make_index
from hf_tiny import TEXTS, tiny_index, tiny_model, tiny_tok  # noqa: F401


@settings(max_examples=40, deadline=None)
@given(docs=st.lists(st.lists(st.integers(0, 5), max_size=15), min_size=1, max_size=5),
       ctxs=st.lists(st.lists(st.integers(0, 5), min_size=6, max_size=6), min_size=1, max_size=4),
       k=st.integers(1, 5))
def test_forbidden_tokens_equal_brute_force(tmp_path_factory, docs, ctxs, k):
    ref = Reference(docs, 6)
    with built_index(docs, tmp_path_factory.mktemp("g"), vocab_size=6) as ix:
        rows = np.array(ctxs, dtype=np.int64)
        r, t = forbidden_next(ix, rows, np.zeros(len(rows), dtype=np.int64), k)
        got = set(zip(r.tolist(), t.tolist()))
        want = {(i, tok) for i, c in enumerate(ctxs) for tok in range(6) if ref.suffix_len(c + [tok]) > k}
        assert got == want


def _longest_copy_in(index, seq, start):
    """The longest verbatim corpus copy ending at any token of seq[start:] (copies may begin earlier)."""
    return int(index.creativity(seq).copy_len[start:].max(initial=0))


def test_generation_under_the_guard_copies_at_most_k(tiny_tok, tiny_model, tiny_index):
    prompt = tiny_tok(TEXTS[0][:60], return_tensors="pt")
    p = prompt.input_ids.shape[1]
    outs = {}
    for k in (None, 6):
        proc = InfiniGramLogitsProcessor(tiny_index, lambda_sparse=1.0, lambda_dense=1.0, max_copy_len=k,
                                         copy_report=True, tokenizer=tiny_tok)
        out = tiny_model.generate(**prompt, logits_processor=[proc], max_new_tokens=30, do_sample=False,
                                  pad_token_id=tiny_tok.pad_token_id)[0].tolist()
        assert tiny_tok.eos_token_id not in out[p:]
        outs[k] = out
        assert len(proc.copy_steps) == len(out) - p
        # the report: the longest copy ending at the context's last token, at every step
        want = tiny_index.creativity(out).copy_len[p - 1:len(out) - 1].tolist()
        assert [int(s.copy_len[0]) for s in proc.copy_steps] == want
    assert _longest_copy_in(tiny_index, outs[None], p) > 20  # λ = 1: the ∞-gram recites the file
    assert _longest_copy_in(tiny_index, outs[6], p) <= 6


def test_guard_alone_and_arguments(tiny_tok, tiny_index):
    with pytest.raises(ValueError, match="max_copy_len"):
        InfiniGramLogitsProcessor(tiny_index, max_copy_len=0)
    full = tiny_tok.encode(TEXTS[1][:400])
    ids = torch.tensor([full[:60]])
    scores = torch.zeros(1, len(tiny_tok))
    proc = InfiniGramLogitsProcessor(tiny_index, lambda_sparse=0.0, lambda_dense=0.0, max_copy_len=3,
                                     copy_report=True)
    out = proc(ids, scores)
    nxt = full[60]
    assert torch.isneginf(out[0, nxt]) and proc.copy_steps[0].masked[0] >= 1
    assert torch.isfinite(out).sum() == len(tiny_tok) - proc.copy_steps[0].masked[0]


def test_drafter_copy_len(tiny_tok, tiny_index):
    ids = tiny_tok.encode(TEXTS[2][:120])
    d = InfiniGramDrafter(tiny_index, eos_token_id=tiny_tok.eos_token_id)
    assert d.copy_len(ids) == tiny_index.creativity(ids).copy_len[-1] == len(ids)
