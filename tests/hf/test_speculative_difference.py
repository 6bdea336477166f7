"""Speculative decoding with a DifferenceIndex as the drafter's corpus: greedy output equals plain
greedy generate() (tiny GPT-2 from a config), through speculative_generate (chains and trees),
custom_generate and hf_assisted_generate; and the drafts are those of an index rebuilt without
the removed documents."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_tiny import TEXTS, model, one_thread, tiny_tok  # noqa: F401
from infinigram_hf import speculative_generate
from infinigram_hf.build import build_index
from infinigram_hf.hf.assisted import hf_assisted_generate
from infinigram_hf.lm.drafter import InfiniGramDrafter
from infinigram_hf.speculative import generate as spec_generate


@pytest.fixture(scope="module")
def indexes(tiny_tok, tmp_path_factory):
    """(full minus removed, the rebuilt index of the kept files): TEXTS[1] and TEXTS[3] removed."""
    root = tmp_path_factory.mktemp("spec-diff")
    full = build_index(TEXTS, root / "full", tokenizer=tiny_tok, progress=False, max_shard_tokens=30000)
    gone = build_index([TEXTS[1], TEXTS[3]], root / "gone", tokenizer=tiny_tok, progress=False)
    kept = build_index([TEXTS[0], TEXTS[2], TEXTS[4]], root / "kept", tokenizer=tiny_tok, progress=False)
    yield full.difference(gone), kept
    for ix in (full, gone, kept):
        ix.close()


def _prompts(tok, n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = tok.encode(TEXTS[i % len(TEXTS)])  # removed files too: their text must not be drafted
        a = int(rng.integers(0, len(ids) - 100))
        out.append(ids[a:a + int(rng.integers(5, 80))])
    return out


@pytest.mark.parametrize("tree", [False, True])
def test_greedy_identity_with_a_difference(model, tiny_tok, indexes, tree):
    diff, _ = indexes
    rows = _prompts(tiny_tok, 4, seed=5)
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.tensor(r)
        mask[b, width - len(r):] = 1
    ref = model.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, pad_token_id=0)
    out, stats = speculative_generate(model, ids, diff, attention_mask=mask, max_new_tokens=20, do_sample=False,
                                      pad_token_id=0, draft_tree=tree, return_stats=True)
    assert torch.equal(out, ref)


def test_custom_generate_and_assisted_with_a_difference(model, tiny_tok, indexes):
    diff, _ = indexes
    x = torch.tensor([_prompts(tiny_tok, 1, seed=6)[0]])
    ref = model.generate(x, max_new_tokens=16, do_sample=False, pad_token_id=0)
    out = model.generate(x, max_new_tokens=16, do_sample=False, pad_token_id=0, custom_generate=spec_generate,
                         index=diff, draft_options={"max_draft": 4})
    assert torch.equal(out, ref)
    out = model.generate(x, max_new_tokens=16, do_sample=False, pad_token_id=0, custom_generate=hf_assisted_generate,
                         index=diff)
    assert torch.equal(out, ref)


def test_removed_text_is_not_drafted(tiny_tok, indexes):
    """A prompt from a removed file drafts what the rebuilt index drafts (not the file's text)."""
    diff, kept = indexes
    d, k = InfiniGramDrafter(diff, min_match=1), InfiniGramDrafter(kept, min_match=1)
    for seed in range(3):
        ids = tiny_tok.encode(TEXTS[1])
        p = ids[100 + 50 * seed:160 + 50 * seed]
        a, b = d.draft(p), k.draft(p)
        assert (list(a.tokens), a.source, a.match_len) == (list(b.tokens), b.source, b.match_len)
        assert list(a.counts) == list(b.counts) and list(a.totals) == list(b.totals)
