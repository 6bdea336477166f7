"""issue 13, bug 4: a right-padded batch is refused by InfiniGramLogitsProcessor (it used to give
identical, wrong rows), while left padding and rows that finish early keep working."""
from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessorList

from hf_tiny import TEXTS, tiny_index, tiny_model, tiny_tok  # noqa: F401
from infinigram_hf import InfiniGramLogitsProcessor


def _batch(tok, side: str):
    tok.padding_side = side
    try:
        return tok([TEXTS[0][200:260], TEXTS[1][400:430]], return_tensors="pt", padding=True)
    finally:
        tok.padding_side = "left"


def test_right_padding_is_refused(tiny_model, tiny_index, tiny_tok) -> None:
    proc = InfiniGramLogitsProcessor(tiny_index, tokenizer=tiny_tok)
    batch = _batch(tiny_tok, "right")
    assert batch["input_ids"][1, -1] == tiny_tok.pad_token_id
    with pytest.raises(ValueError, match="right-padded.*left"):
        tiny_model.generate(**batch, logits_processor=LogitsProcessorList([proc]), max_new_tokens=3,
                            do_sample=False, pad_token_id=0)


def test_left_padding_and_finished_rows_pass(tiny_model, tiny_index, tiny_tok) -> None:
    proc = InfiniGramLogitsProcessor(tiny_index, tokenizer=tiny_tok)
    for _ in range(2):  # a second generate() with the same processor starts a new check
        out = tiny_model.generate(**_batch(tiny_tok, "left"), logits_processor=LogitsProcessorList([proc]),
                                  max_new_tokens=3, do_sample=False, pad_token_id=0)
        assert out.shape[0] == 2
    # a row that ended (EOS then padding) later in a generation is not mistaken for right padding
    proc = InfiniGramLogitsProcessor(tiny_index, tokenizer=tiny_tok)
    ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    for width in (3, 4, 5):
        proc(ids[:, :width], torch.zeros(2, tiny_model.config.vocab_size))
