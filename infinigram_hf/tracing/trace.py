"""`trace`: the verbatim corpus spans of generate() outputs, one `Trace` per sequence.

Example:
    >>> out = model.generate(**inputs, logits_processor=[processor], max_new_tokens=64)  # doctest: +SKIP
    >>> t = infinigram_hf.trace(out, index, tokenizer, prompt=inputs.input_ids)[0]      # doctest: +SKIP
    >>> print(t.render_terminal())                                                       # doctest: +SKIP
    >>> t.to_html("trace.html")                                                          # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from .._core.args import int_arg, opt_int_arg
from .._core.ids import to_numpy
from .._core.tokenization import index_tokenizer
from ..index.attribution import Attribution, Span
from .word_starts import word_start_ids

DEFAULT_MIN_LEN = 4  # shorter verbatim spans are mostly common phrases


@dataclass(frozen=True)
class Trace:
    """The spans of one traced sequence. `ids` are the tokens traced (the generated ones unless
    the prompt was included); span positions index `ids`; `offset` is ids[0]'s position in the
    output sequence. `tokenizer` (may be None) decodes texts for the views."""

    ids: np.ndarray
    attribution: Attribution
    offset: int = 0
    tokenizer: Any = None

    @property
    def spans(self) -> tuple:
        """The attribution's spans, positions relative to the traced ids."""
        return self.attribution.spans

    def decode(self, ids: Any) -> str:
        """Ids as text with the tokenizer (space-separated ids without one)."""
        ids = [int(t) for t in ids]
        return self.tokenizer.decode(ids) if self.tokenizer is not None else " ".join(map(str, ids))

    def copied_share(self, min_len: int = 1) -> float:
        """Share of the traced tokens inside a span of at least min_len tokens (0 when empty)."""
        cov = self.attribution.covered(min_len)
        return float(cov.mean()) if len(cov) else 0.0

    def segments(self) -> list:
        """The text cut for display: (start, end, span index or None) runs, each token shown under
        the best span covering it (`Attribution.ranked` order), overlapping spans thereby merged."""
        best = np.full(len(self.ids), -1, dtype=np.int64)
        order = {id(s): i for i, s in enumerate(self.spans)}
        for s in reversed(self.attribution.ranked()):  # paint worst first: the best stays on top
            best[s.start:s.end] = order[id(s)]
        out: list = []
        for i, b in enumerate(best.tolist()):
            key = None if b < 0 else b
            if out and out[-1][2] == key and (key is not None or out[-1][2] is None):
                out[-1] = (out[-1][0], i + 1, key)
            else:
                out.append((i, i + 1, key))
        return out

    def as_dict(self) -> dict:
        """JSON-ready: the attribution's spans and documents, the offset, the decoded text."""
        d = self.attribution.as_dict(self.tokenizer)
        d["offset"] = self.offset
        if self.tokenizer is not None:
            d["text"] = self.decode(self.ids)
        return d

    def render_terminal(self, **kw: Any) -> str:
        """Text for a terminal: spans highlighted, then each with its documents (see
        `infinigram_hf.tracing.render_terminal` for the options)."""
        from .terminal_view import render_terminal
        return render_terminal(self, **kw)

    def to_html(self, path: Optional[Union[str, Path]] = None, **kw: Any) -> str:
        """The self-contained HTML page (written to `path` when given)."""
        from .html_view import render_html
        page = render_html([self], **kw)
        if path is not None:
            Path(path).write_text(page, encoding="utf-8")
        return page


def _rows(output_ids: Any) -> tuple:
    arr = to_numpy(output_ids)
    if isinstance(arr, np.ndarray) and arr.ndim == 2:
        return [r for r in arr], True
    if isinstance(arr, np.ndarray) and arr.ndim == 1:
        return [arr], False
    if isinstance(arr, (list, tuple)) and arr and not isinstance(to_numpy(arr[0]), (int, np.integer)):
        return [np.asarray(to_numpy(r)) for r in arr], True
    return [np.asarray(arr)], False


def trace(output_ids: Any, index: Any, tokenizer: Any = None, *, prompt: Any = None, prompt_len: Optional[int] = None,
          include_prompt: bool = False, min_len: int = DEFAULT_MIN_LEN, max_count: Optional[int] = None,
          delimiters: Any = None, word_starts: Any = "auto", stop_at_eos: bool = True, max_docs: int = 5,
          context: Optional[int] = 24, n_threads: int = 0) -> Any:
    """Trace generate() outputs to the corpus: the verbatim spans of each sequence with their
    documents (`InfiniGramIndex.attribute`), as one `Trace` per row (a 1-D input gives one Trace).

    output_ids: what generate() returned (a 2-D tensor / array, a list of rows, or one row).
    prompt / prompt_len: the prompt (its ids, e.g. inputs.input_ids) or its length; its tokens are
    left out unless include_prompt. Without either the whole output is traced.
    word_starts: "auto" = derived from the tokenizer (`word_start_ids`), None = no word rule, or
    ids / a bool mask. stop_at_eos: cut each row at its first eos / pad token after the prompt.
    Ids the index does not know (beyond its vocabulary) are never part of a span.
    Other arguments: `infinigram_hf.index.attribution.attribute_batch`.
    """
    if prompt is not None and prompt_len is not None:
        raise ValueError("give prompt= or prompt_len=, not both")
    if prompt is not None:
        prompt_len = int(np.asarray(to_numpy(prompt)).shape[-1])
    start = 0 if include_prompt else (opt_int_arg("prompt_len", prompt_len, 0) or 0)
    min_len = int_arg("min_len", min_len, 1)
    tok = index_tokenizer(index, tokenizer)
    if isinstance(word_starts, str):
        if word_starts != "auto":
            raise ValueError(f"word_starts must be 'auto', None, ids or a bool mask, got {word_starts!r}")
        word_starts = word_start_ids(tok, index.vocab_size) if tok is not None else None
    stops = {int(t) for t in (getattr(tok, "eos_token_id", None), getattr(tok, "pad_token_id", None))
             if isinstance(t, (int, np.integer))} if stop_at_eos else set()
    rows, many = _rows(output_ids)
    traced, pieces, where = [], [], []
    for r, row in enumerate(rows):
        row = np.asarray(row).astype(np.int64).reshape(-1)
        ids = row[start:]
        if stops:
            hits = np.flatnonzero(np.isin(ids, list(stops)))
            if len(hits):
                ids = ids[:hits[0]]
        traced.append(ids)
        ok = (ids >= 0) & (ids < index.vocab_size)  # runs of ids the index knows
        edges = np.flatnonzero(np.diff(np.concatenate([[0], ok.astype(np.int8), [0]])))
        for a, b in zip(edges[::2], edges[1::2]):
            pieces.append(ids[a:b].astype(np.uint32))
            where.append((r, int(a)))
    results = index.attribute_batch(pieces, min_len=min_len, max_count=max_count, delimiters=delimiters,
                                    word_starts=word_starts, max_docs=max_docs, context=context,
                                    n_threads=n_threads) if pieces else []
    spans: list = [[] for _ in rows]
    for (r, a), res in zip(where, results):
        spans[r] += [Span(s.start + a, s.end + a, s.count, s.unigram_logprob_sum, s.docs) for s in res.spans]
    out = [Trace(ids, Attribution(ids, tuple(sp)), start, tok) for ids, sp in zip(traced, spans)]
    return out if many else out[0]
