"""trace() of generate() outputs, word-start rules from a real BPE and from bytes, and the two
views (terminal, HTML) escaping what they show."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from infinigram_hf import InfiniGramLogitsProcessor, trace
from infinigram_hf.build import build_index
from infinigram_hf.tracing import render_html, word_start_ids

from attribution_reference import ref_attribute
from conftest import Reference
from hf_tiny import TEXTS, tiny_index, tiny_model, tiny_tok  # noqa: F401


def test_word_starts_from_a_byte_level_bpe(tiny_tok):
    ws = word_start_ids(tiny_tok)
    assert len(ws) == len(tiny_tok)
    for t in range(len(tiny_tok)):
        piece = tiny_tok.convert_ids_to_tokens(t)
        if piece.startswith("Ġ") or piece.startswith("Ċ"):
            assert ws[t], piece
        elif (piece[0].isascii() and piece[0].isalnum()) or piece[0] == "_":  # (byte-level: ASCII is itself)
            assert not ws[t], piece


def test_word_starts_of_bytes():
    ws = word_start_ids(None)
    assert ws[ord(" ")] and ws[ord("\n")] and ws[ord("(")]
    assert not ws[ord("a")] and not ws[ord("_")] and not ws[ord("7")] and not ws[0xC3] and not ws[0xA9]


def _docs_ids(index):
    return [index.get_doc(d).token_ids.tolist() for d in range(index.num_docs)]


@pytest.mark.parametrize("kind", ["bpe", "bytes"])
def test_word_boundaries_equal_brute_force(kind, tiny_tok, tmp_path):
    texts = [t[:3000] for t in TEXTS[:3]]
    tok = tiny_tok if kind == "bpe" else None
    index = build_index(texts, tmp_path / kind, tokenizer=tok, progress=False)
    try:
        enc = (lambda s: tiny_tok.encode(s)) if tok is not None else (lambda s: list(s.encode()))
        ws = word_start_ids(tok, index.vocab_size)
        ws_ids = set(np.flatnonzero(ws).tolist())
        ref = Reference(_docs_ids(index), index.vocab_size)
        probe = enc(" " + texts[0][200:320] + " novel words, zebra quux " + texts[1][500:600])
        got = index.attribute(probe, word_starts=ws, min_len=2)
        want = ref_attribute(ref, probe, 2, None, set(), ws_ids)
        assert [(s.start, s.end, s.count) for s in got.spans] == want
        decode = tiny_tok.decode if tok is not None else (lambda ids: bytes(ids).decode("utf-8", "replace"))
        for s in got.spans:  # the span's text starts a word and the next text does too
            text, after = decode(probe[s.start:s.end]), decode(probe[s.end:s.end + 1])
            assert not (text[0].isalnum() or text[0] == "_"), text
            assert s.end == len(probe) or not (after[:1].isalnum() or after[:1] == "_"), (text, after)
        assert got.spans and max(s.length for s in got.spans) > 20
    finally:
        index.close()


def test_trace_generate_outputs(tiny_tok, tiny_model, tiny_index):
    prompt = tiny_tok(["def fill(text, width=70, **kwargs):\n", "import"], return_tensors="pt", padding=True)
    proc = InfiniGramLogitsProcessor(tiny_index, lambda_sparse=1.0, lambda_dense=1.0)
    torch.manual_seed(0)
    out = tiny_model.generate(**prompt, logits_processor=[proc], max_new_tokens=40, do_sample=False,
                              pad_token_id=tiny_tok.pad_token_id)
    traces = trace(out, tiny_index, tiny_tok, prompt=prompt.input_ids, min_len=3)
    assert len(traces) == 2
    p = prompt.input_ids.shape[1]
    for row, t in zip(out.tolist(), traces):
        gen = row[p:]
        if tiny_tok.eos_token_id in gen:
            gen = gen[:gen.index(tiny_tok.eos_token_id)]
        assert t.ids.tolist() == gen and t.offset == p
        # the ∞-gram drives decoding: the output is copied from the corpus, and the spans say so
        assert t.spans and t.copied_share(3) > 0.5
        for s in t.spans:
            assert tiny_index.count(gen[s.start:s.end]) == s.count
            d = s.docs[0]
            assert tiny_index.get_doc(d.doc_id).token_ids[d.offset:d.offset + s.length].tolist() == gen[s.start:s.end]
        json.dumps(t.as_dict())
    whole = trace(out[0], tiny_index, tiny_tok, include_prompt=True, min_len=3, stop_at_eos=False)
    assert whole.offset == 0 and len(whole.ids) == out.shape[1]


def test_ids_beyond_the_index_vocabulary_split_the_text(tiny_tok, tiny_index):
    ids = tiny_tok.encode(TEXTS[0][100:200])
    big = tiny_index.vocab_size + 3  # a model row past the tokenizer's
    t = trace(ids[:10] + [big] + ids[10:], tiny_index, tiny_tok, min_len=2, word_starts=None, stop_at_eos=False)
    assert all(not (s.start <= 10 < s.end) for s in t.spans)
    assert [s.start for s in t.spans][:1] == [0] and t.spans[-1].end == len(ids) + 1


def test_views_escape_what_they_show(tmp_path):
    evil = "<script>alert(1)</script>\x1b]0;pwned\x07\x1b[2J & \u202e" + " plain words repeated here"
    docs = [evil, "other doc " * 5]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d, "meta": "<b>x</b>\x1b[31m"}) + "\n" for d in docs))
    index = build_index(src, tmp_path / "ix", tokenizer=None, metadata_columns=["meta"], progress=False)
    try:
        t = trace(list(evil.encode()), index, None, min_len=4, word_starts=None, stop_at_eos=False)
        assert t.spans
        term = t.render_terminal(color=False)
        assert "\x1b" not in term and "\x07" not in term and "\u202e" not in term and "\\x1b" in term
        colored = t.render_terminal(color=True)
        assert "\x1b]" not in colored and "\x07" not in colored and "\x1b[2J" not in colored
        page = render_html(t)
        assert "<script>" not in page and "<b>x</b>" not in page and "&lt;script&gt;" in page
        assert "default-src 'none'" in page
    finally:
        index.close()
