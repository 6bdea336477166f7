"""Tokenizers for building and querying: any HF tokenizer, or raw UTF-8 bytes.

The index records the tokenizer's name and a fingerprint of its vocabulary so that an index is
never silently used with another tokenizer.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, List, Optional, Sequence

from .safe_text import printable

BYTES_NAME = "bytes-utf8"
# Valid UTF-8 never contains the byte 0xFF, so it is free to be the 8-bit document separator.
BYTE_VOCAB_SIZE = 255


class ByteTokenizer:
    """Character-level work: a text's token ids are its UTF-8 bytes (0..254)."""

    name_or_path = BYTES_NAME
    eos_token_id = None
    pad_token_id = None

    def __len__(self) -> int:
        return BYTE_VOCAB_SIZE

    def encode(self, text: str, add_special_tokens: bool = False) -> List[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], **_: Any) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def encode_batch(self, texts: Sequence[str]) -> List[List[int]]:
        return [list(t.encode("utf-8")) for t in texts]

    def __repr__(self) -> str:
        return "ByteTokenizer()"


def resolve_tokenizer(tokenizer: Any) -> Any:
    """None -> bytes; a name or local path -> AutoTokenizer; a `tokenizers.Tokenizer` -> wrapped."""
    if tokenizer is None or tokenizer == BYTES_NAME:
        return ByteTokenizer()
    if isinstance(tokenizer, ByteTokenizer):
        return tokenizer
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        # trust_remote_code=False, said explicitly: a tokenizer saved in an index someone else made
        # may name code of its own (auto_map); transformers would otherwise ask on stdin whether
        # to run it (and wait there), and never should it run.
        try:
            return AutoTokenizer.from_pretrained(tokenizer, trust_remote_code=False)
        except (OSError, ValueError) as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(
                f"could not load tokenizer {tokenizer!r}: pass a local tokenizer directory, a "
                f"tokenizer object, or None for bytes ({printable(why)})") from None
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover
        Tokenizer = None
    if Tokenizer is not None and isinstance(tokenizer, Tokenizer):
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    if not callable(getattr(tokenizer, "encode", None)):
        raise ValueError(f"tokenizer must be an HF tokenizer, a name, or None; got {type(tokenizer).__name__}")
    return tokenizer


def tokenizer_name(tok: Any) -> str:
    if isinstance(tok, ByteTokenizer):
        return BYTES_NAME
    return str(getattr(tok, "name_or_path", "") or type(tok).__name__)


def tokenizer_vocab_size(tok: Any) -> int:
    """Ids the tokenizer can produce: len() counts added tokens, unlike .vocab_size."""
    return len(tok)


def vocab_fingerprint(tok: Any) -> str:
    """sha256 of the (token, id) table: equal fingerprints mean the same ids for the same text."""
    if isinstance(tok, ByteTokenizer):
        return "sha256:" + hashlib.sha256(BYTES_NAME.encode()).hexdigest()
    vocab = tok.get_vocab()
    items = sorted(vocab.items(), key=lambda kv: (kv[1], kv[0]))
    return "sha256:" + hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()


def encode_texts(tok: Any, texts: Sequence[str]) -> List[List[int]]:
    """Batched encoding without special tokens (fast tokenizers parallelise this in Rust)."""
    if isinstance(tok, ByteTokenizer):
        return tok.encode_batch(texts)
    backend = getattr(tok, "_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch"):
        return [e.ids for e in backend.encode_batch(list(texts), add_special_tokens=False)]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def eos_token_id(tok: Any) -> Optional[int]:
    eos = getattr(tok, "eos_token_id", None)
    return int(eos) if eos is not None else None
