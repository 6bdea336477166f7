"""Checks and defaults shared by the processor, the perplexity wrapper and λ tuning (torch-free).

Example:
    >>> check_lambda(0.25, "lambda_dense")
    0.25
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import TokenizerMismatchError
from .index import InfiniGramIndex
from .tokenization import tokenizer_name, vocab_fingerprint

DEFAULT_LAMBDA_SPARSE = 0.5
DEFAULT_LAMBDA_DENSE = 0.3


def check_lambda(value: float, name: str) -> float:
    """A mixture weight in [0, 1], as float; ValueError naming the argument otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def check_tokenizer(index: InfiniGramIndex, tokenizer: Any) -> None:
    """Raise TokenizerMismatchError unless `tokenizer` is the one the index was built with.

    Compares the vocabulary fingerprint stored in the index with the tokenizer's; an index built
    from token ids without a tokenizer has none, and then only the sizes are compared.
    """
    stored = index.vocab_fingerprint
    if stored is not None:
        got = vocab_fingerprint(tokenizer)
        if got != stored:
            raise TokenizerMismatchError(
                f"the index at {index.paths[0]} was built with tokenizer {index.tokenizer_name!r} "
                f"(vocab fingerprint {stored[:19]}…), but the tokenizer given is "
                f"{tokenizer_name(tokenizer)!r} ({got[:19]}…): token ids would not mean the same text")
    elif len(tokenizer) > index.vocab_size:
        raise TokenizerMismatchError(
            f"the tokenizer given has {len(tokenizer)} ids but the index at {index.paths[0]} only "
            f"{index.vocab_size}: it was built with another vocabulary")


def check_model_vocab(index: InfiniGramIndex, model_vocab_size: int) -> None:
    """The model must have a row for every id of the index (more rows are fine: padding)."""
    if model_vocab_size < index.vocab_size:
        raise TokenizerMismatchError(
            f"the model scores {model_vocab_size} tokens but the index at {index.paths[0]} has "
            f"{index.vocab_size} ids: the index was built with another tokenizer than the model's")
