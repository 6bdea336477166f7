"""Tokenizers for building and querying: any HF tokenizer, or raw UTF-8 bytes.

The index records the tokenizer's name and a fingerprint of its vocabulary so that an index is
never silently used with another tokenizer. `index_tokenizer` is the one place that decides which
tokenizer goes with an index (the one given, checked; else the one saved in it; else bytes), and
`check_tokenizer` the one check. transformers is imported only when a tokenizer is loaded by name.
"""
from __future__ import annotations

import hashlib
import json
import threading
import weakref
from pathlib import Path
from typing import Any, List, Optional, Sequence

from .errors import TokenizerMismatchError
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
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise ImportError(f"loading tokenizer {tokenizer!r} needs transformers, which is not installed: "
                              f"pip install 'infinigram_hf[hf]' (or pass token ids / None for bytes)") from exc

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


class SavedTokenizer:
    """An index's saved fast tokenizer read with `tokenizers` alone: the same ids as the HF
    tokenizer (tokenizer.json holds its whole pipeline) without importing transformers and torch,
    which would add seconds to every CLI call."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(path))  # encode_texts batches on it
        self.name_or_path = str(path.parent)

    def encode(self, text: str, add_special_tokens: bool = False) -> List[int]:
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], **_: Any) -> str:
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def get_vocab(self) -> dict:
        """token -> id, added tokens included (what `vocab_fingerprint` hashes, as for the HF tokenizer)."""
        return self._tokenizer.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def __repr__(self) -> str:
        return f"SavedTokenizer({self.name_or_path!r})"


def _only_adds_tokens(tok: Any, vocab_size: int, stored: str) -> bool:
    """Whether `tok` is the index's tokenizer with tokens added after its ids (e.g. a pad token
    added with add_special_tokens): its table cut at the index's vocab_size hashes as stored."""
    if isinstance(tok, ByteTokenizer) or not callable(getattr(tok, "get_vocab", None)):
        return False
    vocab = tok.get_vocab()
    if len(vocab) <= vocab_size:
        return False
    items = sorted(((t, i) for t, i in vocab.items() if i < vocab_size), key=lambda kv: (kv[1], kv[0]))
    digest = hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()
    return "sha256:" + digest == stored


def check_tokenizer(index: Any, tokenizer: Any) -> None:
    """Raise TokenizerMismatchError unless `tokenizer` is the one the index was built with.

    Compares the vocabulary fingerprint stored in the index with the tokenizer's (a tokenizer that
    only adds tokens after the index's ids, such as a pad token, passes: the ids it shares with
    the index mean the same text); an index built from token ids without a tokenizer has none,
    and then only the sizes are compared.
    """
    stored = index.vocab_fingerprint
    if stored is not None:
        got = vocab_fingerprint(tokenizer)
        if got != stored and not _only_adds_tokens(tokenizer, index.vocab_size, stored):
            raise TokenizerMismatchError(
                f"tokenizer {tokenizer_name(tokenizer)!r} is not the one the index was built with "
                f"({index.tokenizer_name!r} at {index.paths[0]}; vocabulary fingerprints differ: "
                f"{stored[:19]}… vs {got[:19]}…): token ids would not mean the same text")
    elif len(tokenizer) > index.vocab_size:
        raise TokenizerMismatchError(
            f"the tokenizer given has {len(tokenizer)} ids but the index at {index.paths[0]} only "
            f"{index.vocab_size}: it was built with another vocabulary")


_SAVED: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_SAVED_LOCK = threading.Lock()


def index_tokenizer(index: Any, tokenizer: Any = None, *, light: bool = False) -> Optional[Any]:
    """The tokenizer that goes with an index (any object with paths, tokenizer_name,
    vocab_fingerprint and vocab_size).

    `tokenizer` (an HF tokenizer, a name or local path, or "bytes-utf8") wins, checked with
    `check_tokenizer`. Otherwise the one the index was opened with (``open(tokenizer=)``,
    ``from_pretrained``), else the one saved in ``<index>/tokenizer/`` (never running code from
    it; with ``light=True`` a saved tokenizer.json is read with `tokenizers` alone), else raw bytes
    for a byte-level index, else None (token ids only). The latter are cached per index.
    """
    if tokenizer is not None:
        tok = resolve_tokenizer(tokenizer)
        check_tokenizer(index, tok)
        return tok
    given = getattr(index, "_given_tokenizer", None)  # InfiniGramIndex.open(tokenizer=) / from_pretrained
    if given is not None:
        return given
    with _SAVED_LOCK:
        cached = _SAVED.get(index)
        if cached is not None and light in cached:
            return cached[light]
    # an object that carries its own tokenizer (not InfiniGramIndex.tokenizer, which asks here)
    tok = None if isinstance(getattr(type(index), "tokenizer", None), property) else getattr(index, "tokenizer", None)
    if tok is None:
        saved = Path(index.paths[0]) / "tokenizer"
        if light and (saved / "tokenizer.json").is_file():
            tok = SavedTokenizer(saved / "tokenizer.json")
        elif saved.is_dir():
            tok = resolve_tokenizer(str(saved))
        elif index.tokenizer_name == BYTES_NAME:
            tok = ByteTokenizer()
    with _SAVED_LOCK:
        _SAVED.setdefault(index, {})[light] = tok
    return tok
