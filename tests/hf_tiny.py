"""Tiny HuggingFace pieces for the integration tests: a BPE tokenizer trained in a second on a few
standard-library files, a GPT-2 built from a config, and an index of those files.

Everything is made locally (no hub). Import the fixtures into a test module:

    from hf_tiny import tiny_tok, tiny_model, tiny_index, TEXTS   # noqa: F401

Example:
    >>> tok = make_tokenizer(TEXTS, vocab_size=300)
    >>> tok.eos_token_id
    0
"""
from __future__ import annotations

import bisect
import colorsys
import heapq
import keyword
import textwrap
from pathlib import Path
from typing import Sequence

import pytest
import torch

from infinigram_hf.build import build_index

EOS = "<|endoftext|>"
# A few small standard-library modules: present in every CPython, real code with repeats.
TEXTS = [Path(m.__file__).read_text(encoding="utf-8") for m in (textwrap, heapq, bisect, colorsys, keyword)]
MODEL_EXTRA_ROWS = 12  # the model's vocabulary is padded past the tokenizer's


def make_tokenizer(texts: Sequence[str], vocab_size: int = 300):
    """A byte-level BPE tokenizer trained on `texts`; EOS (= BOS = pad) is id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    raw.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token=EOS, bos_token=EOS, pad_token=EOS)


def make_model(vocab_size: int, seed: int = 0, n_layer: int = 2, n_embd: int = 32):
    """A randomly initialised tiny GPT-2 (eval mode)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab_size, n_positions=512, n_embd=n_embd, n_layer=n_layer, n_head=2,
                     bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture(scope="session")
def tiny_tok():
    return make_tokenizer(TEXTS)


@pytest.fixture(scope="session")
def tiny_model(tiny_tok):
    return make_model(len(tiny_tok) + MODEL_EXTRA_ROWS)


@pytest.fixture(scope="module")
def model(tiny_tok):
    """The tiny GPT-2 of the decoding tests (seed 3) in float64: identity with greedy decoding
    must hold whatever the weights, and float64 keeps near-ties from flipping between a
    one-token step and a verification pass. Import it into a test module to use it."""
    return make_model(len(tiny_tok) + MODEL_EXTRA_ROWS, seed=3).double()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Torch on one thread for a test module that imports this (it is autouse there): tiny models
    gain nothing from threads, and on a shared CPU every multi-threaded op waits for a
    descheduled thread."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tiny_index(tiny_tok, tmp_path_factory):
    """The TEXTS indexed with tiny_tok (one document per file)."""
    out = tmp_path_factory.mktemp("hf") / "index"
    index = build_index(TEXTS, out, tokenizer=tiny_tok, progress=False)
    yield index
    index.close()


# The learned-mixing tests' corpus and documents: a small index, so that many contexts back off
# to short matches, and documents in it, half in it, and out of it.
MIXING_CORPUS = [TEXTS[1][:3000], TEXTS[4][:1500]]
MIXING_DOCS = [TEXTS[1][500:620], "def heapify(x):\n    n = len(x)\n    return None\n", "zebra quux 42 !!"]


@pytest.fixture(scope="module")
def mixing_index(tiny_tok, tmp_path_factory):
    """MIXING_CORPUS indexed with tiny_tok."""
    index = build_index(MIXING_CORPUS, tmp_path_factory.mktemp("mix") / "ix", tokenizer=tiny_tok, progress=False)
    yield index
    index.close()


def scored_positions(model, tok, texts, window: int = 512):
    """(∞-gram context, target id, the model's log-probabilities (float64 numpy) at it) of every
    token that perplexity() scores in `texts` (each document after BOS, one window)."""
    for text in texts:
        doc = tok.encode(text)
        seq = [tok.bos_token_id] + doc
        with torch.no_grad():
            lp_all = torch.log_softmax(model(torch.tensor([seq[:window]])).logits[0].double(), -1).numpy()
        for t in range(1, len(seq)):
            yield doc[: t - 1], seq[t], lp_all[t - 1]
