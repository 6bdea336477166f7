"""InfiniGramLogitsProcessor over a decoding batch carried across steps (its rows' states extended
in one batched C call, infinigram_hf/index/row_states.py) equals the processor applied to every
row alone with a fresh processor: through rows that grow by one token, left padding, EOS inside a
row, ids the index cannot hold, reordered beams, rejected drafts and batches that change size."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_tiny import MODEL_EXTRA_ROWS, tiny_index, tiny_tok  # noqa: F401
from infinigram_hf import InfiniGramLogitsProcessor


def alone(index, tok, row: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    return InfiniGramLogitsProcessor(index, 0.7, 0.3, tokenizer=tok)(row[None], scores[None])[0]


@pytest.mark.parametrize("seed", range(4))
def test_batch_across_steps_equals_rows_alone(tiny_index, tiny_tok, seed):  # noqa: F811
    from hf_tiny import TEXTS
    rng = np.random.default_rng(seed)
    docs = [tiny_tok.encode(t) for t in TEXTS]
    width = len(tiny_tok) + MODEL_EXTRA_ROWS
    pad, eos = tiny_tok.pad_token_id, tiny_tok.eos_token_id
    proc = InfiniGramLogitsProcessor(tiny_index, 0.7, 0.3, tokenizer=tiny_tok, pad_token_id=pad)
    n, length = 6, 10
    # left-padded rows taken from the documents (so that the ∞-gram matches are long)
    src = [(int(rng.integers(len(docs))), 0) for _ in range(n)]
    src = [(d, int(rng.integers(0, len(docs[d]) - 60))) for d, _ in src]
    rows = []
    for i, (d, at) in enumerate(src):
        k = length - (i % 3)
        rows.append([pad] * (length - k) + docs[d][at:at + k])
    ids = torch.tensor(rows, dtype=torch.long)
    pos = [at + length - (i % 3) for i, (d, at) in enumerate(src)]
    for step in range(14):
        scores = torch.from_numpy(rng.normal(size=(len(ids), width)).astype(np.float32) * 2)
        got = proc(ids, scores)
        for r in range(len(ids)):
            want = alone(tiny_index, tiny_tok, ids[r], scores[r])
            # (equal up to float32 rounding: a batch where some rows stay neural shifts the others
            # in a different torch call than a batch of one does)
            assert torch.equal(torch.isneginf(got[r]), torch.isneginf(want)), f"step {step} row {r}"
            fin = ~torch.isneginf(want)
            torch.testing.assert_close(got[r][fin], want[fin], rtol=1e-6, atol=2e-6, msg=f"step {step} row {r}")
        # the next step's batch: mostly each row plus one token, sometimes something else
        event = rng.integers(10)
        nxt = []
        for r in range(len(ids)):
            d = src[r][0]
            t = docs[d][pos[r]] if pos[r] < len(docs[d]) and rng.random() < 0.8 else int(rng.integers(width))
            if rng.random() < 0.05:
                t = eos
            nxt.append(t)
            pos[r] += 1
        ids = torch.cat([ids, torch.tensor(nxt, dtype=torch.long)[:, None]], dim=1)
        if event == 0:  # beams reordered
            perm = rng.permutation(len(ids))
            ids, src, pos = ids[perm], [src[i] for i in perm], [pos[i] for i in perm]
        elif event == 1 and ids.shape[1] > length + 2:  # a draft rejected: two tokens taken back
            ids, pos = ids[:, :-2], [p - 2 for p in pos]
        elif event == 2 and len(ids) > 2:  # a finished row leaves the batch
            ids, src, pos = ids[:-1], src[:-1], pos[:-1]
    assert proc._rows.stats["extended"] > 0 and proc._rows.stats["looked_up"] > 0
