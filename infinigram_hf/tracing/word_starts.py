"""Which token ids begin a word, decided from the tokenizer itself (never from one BPE's "Ġ").

A token begins a word when the text it adds after a letter starts with whitespace or with a
character that is not a letter, digit or underscore (punctuation, a newline, a special token).
Decoding after an anchor letter makes the rule hold for byte-level BPE ("Ġthe" -> " the") and for
SentencePiece-style tokenizers alike (whose decoders drop the space of a text's first token).
A byte tokenizer (the raw UTF-8 index) has no decoder to ask: an ASCII byte that is not
alphanumeric or "_" begins a word; UTF-8 continuation and lead bytes do not.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Optional

import numpy as np

from .._core.tokenization import BYTES_NAME, resolve_tokenizer, tokenizer_vocab_size


def _starts_word(text: str) -> bool:
    if not text:
        return True
    c = text[0]
    if c == "\ufffd":  # part of a multi-byte character
        return False
    return not (c.isalnum() or c == "_")


# Masks already derived, per tokenizer object (decoding a 150k vocabulary takes a second or two).
_CACHE: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def word_start_ids(tokenizer: Any, vocab_size: Optional[int] = None) -> np.ndarray:
    """A bool mask over the vocabulary: True for the ids that begin a word (see the module doc).

    Example:
        >>> word_start_ids(None)[[ord(" "), ord("a")]].tolist()
        [True, False]
    """
    tok = resolve_tokenizer(tokenizer)
    v = int(vocab_size if vocab_size is not None else tokenizer_vocab_size(tok))
    if getattr(tok, "name_or_path", None) == BYTES_NAME:
        b = np.arange(v)
        ascii_word = np.array([i < 128 and (chr(i).isalnum() or chr(i) == "_") for i in range(v)])
        return (b < 128) & ~ascii_word
    try:
        with _LOCK:
            hit = _CACHE.get(tok, {}).get(v)
    except TypeError:  # not weak-referenceable: no cache
        hit = None
    if hit is not None:
        return hit.copy()
    mask = _derive(tok, v)
    try:
        with _LOCK:
            _CACHE.setdefault(tok, {})[v] = mask
    except TypeError:
        pass
    return mask.copy()


def _derive(tok: Any, v: int) -> np.ndarray:
    anchor = list(tok.encode("a", add_special_tokens=False))
    if not anchor:
        raise ValueError("word_start_ids: the tokenizer encodes 'a' as nothing; give word_starts= ids")
    base = tok.decode(anchor)
    rows = [anchor + [t] for t in range(v)]
    texts = tok.batch_decode(rows) if hasattr(tok, "batch_decode") else [tok.decode(r) for r in rows]
    return np.array([_starts_word(t[len(base):] if t.startswith(base) else t) for t in texts], dtype=bool)
