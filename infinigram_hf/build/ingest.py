"""Documents into shard writers, in pieces of bounded size.

build_index's memory budget bounds the C writer (a shard's tokens and suffix array). What the
Python side holds on top must not grow with a document's length, or one long document (70M
tokens: ~2 GB of Python lists and int64 copies) blows through any budget. So documents are
taken in groups of at most CHUNK_TOKENS tokens, and a document longer than that is converted
and handed to the writer a CHUNK_TOKENS piece at a time (ShardWriter.add_part). Beyond the
documents as the source gives them (a list of ints, an array, a text), the build then holds a
few CHUNK_TOKENS-sized arrays, whatever the document lengths.

Every document is checked on the way in: a value that is not a sequence of token ids (None, an
int, a string, a dict) or ids that are not integers in the vocabulary are a ValueError naming
the document by its number in the corpus.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .shard_writer import ShardWriter

CHUNK_TOKENS = 1 << 20  # tokens converted at a time (a few MiB of arrays)


class ByteText:
    """A text whose token ids are its UTF-8 bytes (the byte tokenizer), encoded a piece at a
    time when it is long, so a long text is never held twice."""

    __slots__ = ("text", "nbytes")

    def __init__(self, text: str):
        self.text = text
        if text.isascii():
            self.nbytes = len(text)
        else:  # (lone surrogates raise UnicodeEncodeError here, as encoding the whole text would)
            self.nbytes = sum(len(text[i:i + CHUNK_TOKENS].encode("utf-8")) for i in range(0, len(text), CHUNK_TOKENS))

    def array(self) -> np.ndarray:
        return np.frombuffer(self.text.encode("utf-8"), dtype=np.uint8)

    def pieces(self) -> Iterator[np.ndarray]:
        for i in range(0, len(self.text), CHUNK_TOKENS):
            yield np.frombuffer(self.text[i:i + CHUNK_TOKENS].encode("utf-8"), dtype=np.uint8)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _to_array(value: Any, number: int) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"document {number}: cannot be read as token ids ({exc})") from None
    if arr.ndim == 0:
        raise ValueError(f"document {number} is {_describe(value)}, not a sequence of token ids")
    return arr.reshape(-1)


def as_document(value: Any, number: int) -> Any:
    """A document as a 1-D array, a flat list / tuple of ints, or a ByteText (checked)."""
    if isinstance(value, (ByteText, np.ndarray)):
        return value if isinstance(value, ByteText) else _to_array(value, number)
    if value is None or isinstance(value, (str, bytes, bytearray, dict, int, float, complex, np.generic)) \
            or not hasattr(value, "__len__"):
        hint = " (one document of ids is [[1, 2, 3]], not [1, 2, 3])" if isinstance(value, (int, np.integer)) else ""
        raise ValueError(f"document {number} is {_describe(value)}, not a sequence of token ids{hint}")
    if isinstance(value, (list, tuple)) and (not value or isinstance(value[0], (int, np.integer))):
        return value  # (converted a piece at a time)
    return _to_array(value, number)  # nested lists, tensors, array.array, range, ...


def doc_len(doc: Any) -> int:
    return doc.nbytes if isinstance(doc, ByteText) else (doc.size if isinstance(doc, np.ndarray) else len(doc))


def _int_ids(arr: np.ndarray, number: int) -> np.ndarray:
    if arr.ndim != 1:
        raise ValueError(f"document {number}: token ids must form a flat sequence, got shape {arr.shape}")
    if arr.size and not (np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"document {number}: token ids must be integers, got {arr.dtype}")
    return arr


class _Scratch:
    """Reusable memory for each group's concatenated ids. A fresh array costs a page fault and
    the kernel zeroing every page of it (on a 200M-token build that was a large share of the
    time spent taking documents in); memory used again costs neither."""

    def __init__(self) -> None:
        self._bufs: dict = {}

    def array(self, name: str, n: int, dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        buf = self._bufs.get(name)
        if buf is None or buf.nbytes < n * dtype.itemsize:
            buf = self._bufs[name] = np.empty(max(n * dtype.itemsize, 3 * (0 if buf is None else buf.nbytes) // 2),
                                              dtype=np.uint8)
        return buf[: n * dtype.itemsize].view(dtype)


def _narrow(flat: np.ndarray, vocab_size: int, numbers: Callable[[int], int], scratch: _Scratch) -> np.ndarray:
    """uint8/16/32 ids as they are (the C writer checks them against the vocabulary); other
    integers range-checked here (naming the document) and narrowed to uint32."""
    if flat.dtype in (np.uint8, np.uint16, np.uint32) or flat.size == 0:
        return flat
    lo, hi = int(flat.min()), int(flat.max())
    if lo < 0 or hi >= vocab_size:
        where = int(np.argmax((flat < 0) | (flat >= vocab_size)))
        raise ValueError(f"token id {int(flat[where])} of document {numbers(where)} is outside the vocabulary "
                         f"(vocab_size={vocab_size})")
    narrow = scratch.array("narrow", flat.size, np.uint32)
    np.copyto(narrow, flat, casting="unsafe")  # (in range: checked above)
    return narrow


def flatten(docs: Sequence[Any], first_number: int, vocab_size: int,
            scratch: Optional[_Scratch] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Documents -> (uint8/16/32 ids, int64 offsets); the ids may live in `scratch` (valid until
    its next use). Meant for groups of short documents (see ShardFeeder)."""
    scratch = scratch or _Scratch()
    parts = []
    for i, d in enumerate(docs):
        arr = d.array() if isinstance(d, ByteText) else _int_ids(d if isinstance(d, np.ndarray) else _to_array(d, first_number + i), first_number + i)
        parts.append(arr)
    lens = np.fromiter((p.size for p in parts), dtype=np.int64, count=len(parts))
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    nonempty = [p for p in parts if p.size]
    if total == 0:
        return np.zeros(0, dtype=np.uint32), offsets
    dtype = functools.reduce(np.promote_types, {p.dtype for p in nonempty})  # (result_type caps its arguments)
    if not np.issubdtype(dtype, np.integer):  # (uint64 with int64 promotes to float64)
        bad = next(i for i, p in enumerate(parts) if p.size and p.dtype == np.uint64)
        raise ValueError(f"document {first_number + bad}: token ids of dtype uint64 cannot be mixed with signed ones; "
                         "pass them as int64 or uint32")
    flat = np.concatenate(nonempty, out=scratch.array("ids", total, dtype))

    def number(pos: int) -> int:
        return first_number + int(np.searchsorted(offsets, pos, side="right")) - 1

    return _narrow(flat, vocab_size, number, scratch), offsets


def _pieces(doc: Any, number: int, vocab_size: int, scratch: _Scratch) -> Iterator[np.ndarray]:
    """A long document, CHUNK_TOKENS ids at a time, checked and narrowed."""
    if isinstance(doc, ByteText):
        yield from doc.pieces()
        return
    for i in range(0, doc_len(doc), CHUNK_TOKENS):
        piece = doc[i:i + CHUNK_TOKENS]
        arr = _int_ids(piece if isinstance(piece, np.ndarray) else _to_array(piece, number), number)
        yield _narrow(arr, vocab_size, lambda _: number, scratch)


class ShardFeeder:
    """Takes batches of documents into shard writers, ending a shard where the next document
    would overflow it (`end_shard`, then `new_shard` for the next one)."""

    def __init__(self, new_shard: Callable[[], Tuple[ShardWriter, Any]],
                 end_shard: Callable[[ShardWriter, Any], None], shard_cap: int, vocab_size: int):
        self._new, self._end = new_shard, end_shard
        self.shard_cap, self.vocab_size = shard_cap, vocab_size
        self.writer, self.metawriter = new_shard()
        self.docs_seen = 0
        self._scratch: Optional[_Scratch] = _Scratch()

    def _next_shard(self) -> None:
        self._end(self.writer, self.metawriter)
        self.writer, self.metawriter = self._new()

    def _make_room(self, need: int, number: int) -> None:
        """Room in the current shard for `need` tokens (a document and its separator)."""
        if self.writer.total_len + need <= self.shard_cap:
            return
        if need > self.shard_cap or self.writer.num_docs == 0:
            raise ValueError(f"document {number} of {need - 1} tokens does not fit a shard of {self.shard_cap} "
                             "tokens; raise memory_budget")
        self._next_shard()

    def add(self, seqs: Sequence[Any], metas: List[Optional[dict]]) -> int:
        """Take one batch in; returns its number of tokens."""
        first = self.docs_seen
        docs = [as_document(s, first + i) for i, s in enumerate(seqs)]
        lens = [doc_len(d) for d in docs]
        i, n = 0, len(docs)
        while i < n:
            if lens[i] > CHUNK_TOKENS:
                self._make_room(lens[i] + 1, first + i)
                left = lens[i]
                for piece in _pieces(docs[i], first + i, self.vocab_size, self._scratch):
                    left -= piece.size
                    self.writer.add_part(piece, end=left <= 0)  # (the last piece ends the document)
                if left != 0:
                    raise ValueError(f"document {first + i} changed its length while it was read")
                self._add_metas(metas[i:i + 1])
                i += 1
                continue
            j, total = i, 0
            while j < n and lens[j] <= CHUNK_TOKENS and (j == i or total + lens[j] <= CHUNK_TOKENS):
                total += lens[j]
                j += 1
            self._add_group(docs[i:j], metas[i:j], first + i)
            i = j
        self.docs_seen += n
        return sum(lens)

    def _add_group(self, docs: Sequence[Any], metas: List[Optional[dict]], first: int) -> None:
        ids, offsets = flatten(docs, first, self.vocab_size, self._scratch)
        # Split the group where the shard fills up (a single document may not exceed a shard).
        start, n_docs = 0, len(docs)
        while start < n_docs:
            room = self.shard_cap - self.writer.total_len
            sizes = offsets[start + 1:] - offsets[start] + np.arange(1, n_docs - start + 1)
            fit = int(np.searchsorted(sizes, room, side="right"))
            if fit == 0:
                self._make_room(int(sizes[0]), first + start)
                continue
            self.writer.add(ids, offsets[start:start + fit + 1])
            self._add_metas(metas[start:start + fit])
            start += fit

    def _add_metas(self, metas: Sequence[Optional[dict]]) -> None:
        if self.metawriter is not None:
            for m in metas:
                self.metawriter.add(m)

    def release(self) -> None:
        """Drop the conversion buffers (before the memory peak of finishing the last shard)."""
        self._scratch = None
