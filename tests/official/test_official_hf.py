"""The HuggingFace side on an official index read in place: the logits processor inside
generate(), perplexity(), the drafter and speculative decoding give exactly what they give on
our own index of the same documents (itself checked against brute force elsewhere)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_tiny import TEXTS, model, tiny_index, tiny_tok  # noqa: F401
from infinigram_hf import InfiniGramIndex, InfiniGramLogitsProcessor, perplexity, speculative_generate
from infinigram_hf.build.convert import ours_to_official
from infinigram_hf.lm.drafter import InfiniGramDrafter


@pytest.fixture(scope="module")
def official_index(tiny_index, tiny_tok, tmp_path_factory):
    path = ours_to_official(tiny_index.paths[0], tmp_path_factory.mktemp("off") / "official", token_width=2,
                            progress=False)
    index = InfiniGramIndex.open(path, tokenizer=tiny_tok)
    yield index
    index.close()


def prompts(tok, n: int = 3, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = tok.encode(TEXTS[i % len(TEXTS)])
        a = int(rng.integers(0, len(ids) - 60))
        out.append(ids[a:a + int(rng.integers(5, 40))])
    return out


def test_generate_with_the_processor(model, tiny_tok, tiny_index, official_index):
    from transformers import LogitsProcessorList

    assert official_index.eos_token_id == tiny_index.eos_token_id
    for p in prompts(tiny_tok, 1):
        x = torch.tensor([p])
        outs = []
        for index in (tiny_index, official_index):
            proc = LogitsProcessorList([InfiniGramLogitsProcessor(index, 0.9, 0.6, tokenizer=tiny_tok)])
            outs.append(model.generate(x, max_new_tokens=10, do_sample=False, pad_token_id=0, logits_processor=proc))
            logits = model(x).logits[:, -1, :]
            outs.append(proc(x, logits))
        assert torch.equal(outs[0], outs[2])
        torch.testing.assert_close(outs[1], outs[3], rtol=0, atol=0)


def test_speculative_decoding_and_drafts(model, tiny_tok, tiny_index, official_index):
    ps = prompts(tiny_tok, 3, seed=1)
    for p in ps:
        a = InfiniGramDrafter(tiny_index, min_match=1).draft(np.array(p), 8)
        b = InfiniGramDrafter(official_index, min_match=1).draft(np.array(p), 8)
        assert (list(a.tokens), list(a.counts), list(a.totals)) == (list(b.tokens), list(b.counts), list(b.totals))
    x = torch.tensor([ps[0]])
    ref = model.generate(x, max_new_tokens=12, do_sample=False, pad_token_id=0)
    out, st = speculative_generate(model, x, official_index, max_new_tokens=12, do_sample=False, pad_token_id=0,
                                   return_stats=True)
    _, st_ours = speculative_generate(model, x, tiny_index, max_new_tokens=12, do_sample=False, pad_token_id=0,
                                      return_stats=True)
    assert torch.equal(out, ref)
    assert (st.accepted, st.steps) == (st_ours.accepted, st_ours.steps)


def test_perplexity(model, tiny_tok, tiny_index, official_index):
    texts = [TEXTS[0][:300], TEXTS[3][100:400]]
    a = perplexity(model, tiny_tok, texts, tiny_index, window=64, stride=32, progress=False)
    b = perplexity(model, tiny_tok, texts, official_index, window=64, stride=32, progress=False)
    assert (a.perplexity, a.neural_perplexity, a.num_tokens, a.sparse_fraction) == \
        (b.perplexity, b.neural_perplexity, b.num_tokens, b.sparse_fraction)


def test_the_smoothed_lm_says_convert_first(official_index, tiny_tok):
    from infinigram_hf import InfiniGramLM

    with pytest.raises(ValueError, match="convert"):
        InfiniGramLM(official_index, tiny_tok)
