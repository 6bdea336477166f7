"""issue 13, bug 3: speculative generate() streams every accepted token in order (a streamer used
to get only the prompt), stops at stop strings that span accepted drafts (they were dropped or
refused), and hf_assisted_generate works when called directly (it raised KeyError 'use_cache')."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.generation.streamers import BaseStreamer

from hf_tiny import TEXTS, model, tiny_index, tiny_tok  # noqa: F401
from infinigram_hf import speculative_generate
from infinigram_hf.candidate import hf_assisted_generate
from infinigram_hf.lm.drafter import Draft, InfiniGramDrafter
from infinigram_hf.speculative import generate as spec_generate


class Collect(BaseStreamer):
    def __init__(self):
        self.puts, self.ended = [], 0

    def put(self, value):
        self.puts.append(value.reshape(-1).tolist())

    def end(self):
        self.ended += 1


class Oracle(InfiniGramDrafter):
    """Drafts the true continuation (4 tokens at a time), so many tokens arrive per step."""

    def __init__(self, ref):
        super().__init__(None, max_draft=4)
        self.ref = np.asarray(ref)

    def draft_row(self, row, max_tokens=None):
        n = len(row.ids)
        return Draft(self.ref[n:n + self._limit(max_tokens)].astype(np.int64), "lookup", 1)


@pytest.fixture(scope="module")
def prompt(tiny_tok):
    return torch.tensor([tiny_tok.encode(TEXTS[0][300:420])])


def test_streamer_gets_every_accepted_token_in_order(model, prompt, tiny_index) -> None:
    ref = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    for kw in ({"index": tiny_index}, {"drafter": Oracle(ref[0])}):
        s = Collect()
        out, st = speculative_generate(model, prompt, max_new_tokens=12, do_sample=False, pad_token_id=0,
                                       streamer=s, return_stats=True, **kw)
        assert torch.equal(out, ref)
        assert s.puts[0] == prompt[0].tolist() and s.ended == 1
        assert sum(s.puts[1:], []) == ref[0, prompt.shape[1]:].tolist()
    assert st.steps < 12 and max(len(p) for p in s.puts[1:]) > 1  # the oracle's drafts: several per put


def test_streamer_refuses_batches(model, tiny_index) -> None:
    with pytest.raises(ValueError, match="batch size 1"):
        model.generate(torch.tensor([[1, 2], [3, 4]]), max_new_tokens=2, pad_token_id=0,
                       custom_generate=spec_generate, index=tiny_index, streamer=Collect())


def test_stop_strings_across_accepted_drafts(model, prompt, tiny_tok, tiny_index) -> None:
    ref = model.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0)
    new = tiny_tok.decode(ref[0, prompt.shape[1]:])
    stop = new[len(new) // 2:len(new) // 2 + 3]  # a string inside the greedy continuation
    plain = model.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0, stop_strings=[stop],
                           tokenizer=tiny_tok)
    assert plain.shape[1] < ref.shape[1]
    for kw in ({"drafter": Oracle(ref[0]), "tokenizer": tiny_tok}, {"index": tiny_index, "tokenizer": tiny_tok}):
        out = speculative_generate(model, prompt, max_new_tokens=16, do_sample=False, pad_token_id=0,
                                   stop_strings=[stop], **kw)
        assert torch.equal(out, plain)
    # through generate(custom_generate=...): the tokenizer saved in the index
    out = model.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0, custom_generate=spec_generate,
                         index=tiny_index, stop_strings=[stop])
    assert torch.equal(out, plain)
    with pytest.raises(ValueError, match="stop_strings needs the model's tokenizer"):
        model.generate(prompt, max_new_tokens=4, pad_token_id=0, custom_generate=spec_generate,
                       drafter=Oracle(ref[0]), stop_strings=[stop])


def test_hf_assisted_generate_called_directly(model, prompt, tiny_index) -> None:
    ref = model.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert torch.equal(hf_assisted_generate(model, prompt, index=tiny_index, max_new_tokens=10, do_sample=False,
                                            pad_token_id=0), ref)
