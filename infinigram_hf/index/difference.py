"""Index difference: an index of some documents minus an index of a subset of them (the paper's
subtractive property), to remove documents -- decontamination, opt-outs, a curated round of
filtering -- without re-indexing the rest.

Every query answers what an index built without the removed documents would: counts are
cnt(index) - cnt(removed), the ∞-gram backs off to the longest suffix with a positive net count,
next-token distributions and the sparse flag are those of the net counts. The work is in C
(native/src/diff.c), one call per query, as for a plain index.

Drafting takes a difference too: `InfiniGramDrafter` calls the C draft rules on net counts
(``ig_diff_draft_*``, decoding states from `init_state`), and so does the standalone
`InfiniGramLM` (``ig_diff_lm_*``: every method, its continuation counts and count-of-counts).

The removed index must hold a subset of the documents (same tokenizer). That cannot be proved
cheaply: opening checks the tokenizer, the sizes and every token's unigram count; ``verify=True``
also checks that sampled removed documents occur in the index; and any query that meets a
negative net count raises ValueError rather than answer.

Example:
    >>> full = InfiniGramIndex.open("corpus_index")                       # doctest: +SKIP
    >>> clean = full.difference(InfiniGramIndex.open("contaminated_docs"))  # doctest: +SKIP
    >>> clean.infgram_prob(prompt, token).prob                             # doctest: +SKIP
    >>> InfiniGramIndex.open("corpus_index", subtract=["contaminated_docs"])  # the same, owned
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from .._core.errors import TokenizerMismatchError
from .._core.ids import EMPTY_IDS, as_ids, as_token
from .._core.interrupt import call_interruptibly
from .._core.native import check, err_buffer, ffi, int64_len, lib, ptr
from .batch import as_batch
from .states import DecodingState
from .results import (BatchNextTokenDistributions, BatchProbResult, BatchScoreResult, NextTokenDistribution,
                      ProbResult, ScoreResult)

if TYPE_CHECKING:
    from .infinigram_index import InfiniGramIndex


class DifferenceIndex:
    """`index` minus `removed`: the query methods of `InfiniGramIndex` on the net counts.

    Args:
        index: the full index (may itself be a union of several directories).
        removed: an index of a subset of its documents.
        owns: close both indexes when this one is closed.
        verify: also check that `verify_docs` sampled documents of `removed` occur in `index`
            (costs one count per sampled document).
        seed: for that sample.

    Example:
        >>> clean = DifferenceIndex(full, removed)         # doctest: +SKIP
        >>> clean.count([464, 2068]) == full.count([464, 2068]) - removed.count([464, 2068])  # doctest: +SKIP
        True
    """

    def __init__(self, index: "InfiniGramIndex", removed: "InfiniGramIndex", *, owns: bool = False,
                 verify: bool = False, verify_docs: int = 32, seed: int = 0):
        # (InfiniGramIndex is recognised by its C handle: this module sits below infinigram_index.py,
        # which opens differences)
        if not all(callable(getattr(x, "native_handle", None)) for x in (index, removed)):
            raise ValueError("index and removed must be InfiniGramIndex objects")
        self.index, self.removed, self._owns = index, removed, owns
        try:
            self._check_compatible()
            err = err_buffer()
            with index.native_handle() as p, removed.native_handle() as m:
                rc = lib.ig_diff_check(p, m, err, len(err))
            check(rc, err)
            if verify:
                self.verify(verify_docs, seed)
        except BaseException:
            self.close()
            raise

    def _check_compatible(self) -> None:
        a, b = self.index, self.removed
        for key in ("vocab_fingerprint", "tokenizer_name"):
            if a.meta.get(key) != b.meta.get(key):
                raise TokenizerMismatchError(
                    f"cannot subtract {b.paths[0]} from {a.paths[0]}: their {key} differ "
                    f"({a.meta.get(key)!r} vs {b.meta.get(key)!r})")
        for key in ("vocab_size", "token_width"):
            if getattr(a, key) != getattr(b, key):
                raise ValueError(f"cannot subtract {b.paths[0]} from {a.paths[0]}: their {key} differ "
                                 f"({getattr(a, key)} vs {getattr(b, key)})")

    def verify(self, num_docs: int = 32, seed: int = 0) -> None:
        """Check that `num_docs` sampled documents of the removed index occur (as token sequences)
        at least as often in the index as in the removed one; ValueError naming the first that
        does not. A necessary condition for the subset property, not a proof."""
        n = self.removed.num_docs
        rng = np.random.default_rng(seed)
        picks = rng.choice(n, size=min(int(num_docs), n), replace=False) if n else []
        for d in sorted(int(x) for x in picks):
            ids = self.removed.get_doc(d, decode=False).token_ids
            if len(ids) and self.index.count(ids) < self.removed.count(ids):
                raise ValueError(f"removed document {d} ({len(ids)} tokens) occurs less often in "
                                 f"{self.index.paths[0]} than in {self.removed.paths[0]}: not a subset")

    # ------------------------------------------------------------ lifecycle and properties

    def close(self) -> None:
        """Close both indexes if this object owns them (InfiniGramIndex.open(..., subtract=))."""
        if self._owns:
            self.index.close()
            self.removed.close()

    def __enter__(self) -> "DifferenceIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether this difference (or either of its indexes) is closed."""
        return self.index.closed or self.removed.closed

    @property
    def num_tokens(self) -> int:
        """Tokens left after the removal (document separators excluded)."""
        return self.index.num_tokens - self.removed.num_tokens

    @property
    def num_docs(self) -> int:
        """Documents left after the removal."""
        return self.index.num_docs - self.removed.num_docs

    @property
    def meta(self) -> dict:
        """meta.json of the full index."""
        return self.index.meta

    def __getattr__(self, name: str) -> Any:
        # vocab_size, separator_id, token_width, tokenizer_name, vocab_fingerprint, eos_token_id
        if name in ("vocab_size", "separator_id", "token_width", "tokenizer_name", "vocab_fingerprint",
                    "eos_token_id", "paths"):
            return getattr(self.__dict__["index"], name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r} (document lookups and "
                             f"search need the documents' identities, which a difference does not have)")

    def __repr__(self) -> str:
        return f"DifferenceIndex({self.index!r} minus {self.removed!r})"

    # ------------------------------------------------------------ queries

    def __reduce__(self) -> tuple:
        """Pickled as its two indexes (each by path); the copy owns the indexes it reopens."""
        return _reopen_difference, (self.index, self.removed)

    @contextmanager
    def native_handles(self) -> Iterator[tuple]:
        """``with diff.native_handles() as (plus, minus):`` the two C ``ig_index *`` of the
        difference, for one call into the core's ``ig_diff_*`` functions."""
        with self.index.native_handle() as p, self.removed.native_handle() as m:
            yield p, m

    def _call(self, fn: Any, *args: Any) -> None:
        err = err_buffer()
        with self.native_handles() as (p, m):
            rc = fn(p, m, *args, err, len(err))
        check(rc, err)

    @property
    def state_size(self) -> int:
        """int64 values per decoding state of the difference: [suffix_len, net count, the
        index's ranges, the removed index's ranges] (`ig_diff_state_init`)."""
        with self.native_handles() as (p, m):
            return int(lib.ig_diff_state_size(p, m))

    def init_state(self, context: Any) -> DecodingState:
        """The decoding state of a context: its longest suffix with a positive net count (what
        the drafter starts from)."""
        q = as_ids(context, "context")
        out = np.zeros(self.state_size, dtype=np.int64)
        self._call(lib.ig_diff_state_init, ptr(q, "uint32_t"), len(q), ptr(out, "int64_t"), int64_len(out))
        return DecodingState(out)

    def count(self, ids: Any) -> int:
        """Net occurrences of the n-gram."""
        q = as_ids(ids)
        out = ffi.new("uint64_t *")
        self._call(lib.ig_diff_count, ptr(q, "uint32_t"), len(q), out)
        return int(out[0])

    def _prob(self, fn: Any, prompt: Any, token: Any) -> ProbResult:
        q, t = as_ids(prompt, "prompt"), as_token(token)
        out = ffi.new("ig_prob *")
        self._call(fn, ptr(q, "uint32_t"), len(q), int(t[0]), out)
        return ProbResult.from_counts(out.count, out.prompt_count, out.suffix_len, out.sparse)

    def ngram_prob(self, prompt: Any, token: int) -> ProbResult:
        """P(token | prompt) with n = len(prompt) + 1, on net counts."""
        return self._prob(lib.ig_diff_ngram_prob, prompt, token)

    def infgram_prob(self, prompt: Any, token: int) -> ProbResult:
        """∞-gram P(token | prompt), backing off to the longest suffix with a positive net count."""
        return self._prob(lib.ig_diff_infgram_prob, prompt, token)

    def infgram_suffix_len(self, prompt: Any) -> int:
        """Length of the longest suffix of the prompt with a positive net count."""
        q = as_ids(prompt, "prompt")
        out = ffi.new("int64_t *")
        self._call(lib.ig_diff_infgram_suffix, ptr(q, "uint32_t"), len(q), out)
        return int(out[0])

    def _ntd(self, q: np.ndarray, suffix_len: int) -> NextTokenDistribution:
        ctx = q[len(q) - suffix_len:] if suffix_len else EMPTY_IDS
        cap = min(self.vocab_size + 1, 4096)  # grown to what the core asks for
        n_out, total = ffi.new("int64_t *"), ffi.new("uint64_t *")
        while True:
            toks = np.empty(cap, dtype=np.uint32)
            cnts = np.empty(cap, dtype=np.uint64)
            err = err_buffer()
            with self.index.native_handle() as p, self.removed.native_handle() as m:
                rc = lib.ig_diff_ntd(p, m, ptr(ctx, "uint32_t"), len(ctx), ptr(toks, "uint32_t"),
                                     ptr(cnts, "uint64_t"), cap, n_out, total, err, len(err))
            if rc != lib.IG_ERR_CAPACITY or int(n_out[0]) <= cap:
                break
            cap = int(n_out[0])
        check(rc, err)
        n = int(n_out[0])
        return NextTokenDistribution.from_counts(toks[:n].copy(), cnts[:n].copy(), total[0], suffix_len, n == 1)

    def ngram_ntd(self, prompt: Any) -> NextTokenDistribution:
        """Exact net next-token distribution after the whole prompt."""
        q = as_ids(prompt, "prompt")
        return self._ntd(q, len(q))

    def infgram_ntd(self, prompt: Any) -> NextTokenDistribution:
        """Exact ∞-gram next-token distribution on net counts."""
        q = as_ids(prompt, "prompt")
        return self._ntd(q, self.infgram_suffix_len(q))

    def score(self, ids: Any) -> ScoreResult:
        """Dense ∞-gram scoring on net counts (about one search per token)."""
        q = as_ids(ids)
        n = len(q)
        num, den = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64)
        slen, sparse = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.uint8)
        err = err_buffer()
        with self.index.native_handle() as p, self.removed.native_handle() as m:  # (Ctrl-C: see _interrupt)
            rc = call_interruptibly(lib.ig_diff_score, p, m, ptr(q, "uint32_t"), n, ptr(num, "uint64_t"),
                                    ptr(den, "uint64_t"), ptr(slen, "int64_t"), ptr(sparse, "uint8_t"), work=n,
                                    tail=(err, len(err)))
        check(rc, err)
        return ScoreResult.from_counts(num, den, slen, sparse)


    # ------------------------------------------------------------ batches (row by row, exact)
    # The batch forms of InfiniGramIndex, so that a difference goes wherever an index does (the
    # logits processor, perplexity, analysis); each row is one net-count query.

    def count_batch(self, queries: Any, *, offsets: Any = None, lengths: Any = None, padding_side: str = "right",
                    n_threads: int = 0) -> np.ndarray:
        """Net counts of a batch of n-grams (the forms of `InfiniGramIndex.count_batch`)."""
        rows = self._rows(queries, offsets, lengths, padding_side, "queries")
        return np.array([self.count(r) for r in rows], dtype=np.int64)

    def infgram_prob_batch(self, prompts: Any, tokens: Any, *, infinite: bool = True, offsets: Any = None,
                           lengths: Any = None, padding_side: str = "right", n_threads: int = 0) -> BatchProbResult:
        """P(tokens[i] | prompts[i]) on net counts, ∞-gram or (infinite=False) fixed n."""
        rows = self._rows(prompts, offsets, lengths, padding_side, "prompts")
        toks = np.broadcast_to(np.asarray(tokens), (len(rows),))
        res = [(self.infgram_prob if infinite else self.ngram_prob)(r, int(t)) for r, t in zip(rows, toks)]
        return BatchProbResult.from_counts(np.array([r.count for r in res], dtype=np.uint64),
                                           np.array([r.prompt_count for r in res], dtype=np.uint64),
                                           np.array([r.suffix_len for r in res], dtype=np.int64),
                                           np.array([r.sparse for r in res], dtype=bool))

    def infgram_ntd_batch(self, prompts: Any, *, infinite: bool = True, offsets: Any = None, lengths: Any = None,
                          padding_side: str = "right", **_: Any) -> BatchNextTokenDistributions:
        """Next-token distributions of a batch on net counts, as CSR rows."""
        rows = self._rows(prompts, offsets, lengths, padding_side, "prompts")
        ds = [(self.infgram_ntd if infinite else self.ngram_ntd)(r) for r in rows]
        offs = np.concatenate([[0], np.cumsum([len(d) for d in ds])]).astype(np.int64)
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt))  # noqa: E731
        return BatchNextTokenDistributions(
            offsets=offs, token_ids=cat([d.token_ids for d in ds], np.uint32), counts=cat([d.counts for d in ds], np.uint64),
            total=np.array([d.total for d in ds], dtype=np.uint64), suffix_len=np.array([d.suffix_len for d in ds], dtype=np.int64),
            sparse=np.array([d.sparse for d in ds], dtype=bool), approximate=np.zeros(len(ds), dtype=bool))

    def score_batch(self, sequences: Any, *, offsets: Any = None, lengths: Any = None, padding_side: str = "right",
                    n_threads: int = 0) -> BatchScoreResult:
        """Dense scoring of a batch on net counts."""
        rows = self._rows(sequences, offsets, lengths, padding_side, "sequences")
        rs = [self.score(r) for r in rows]
        offs = np.concatenate([[0], np.cumsum([len(r) for r in rs])]).astype(np.int64)
        cat = (lambda f, dt: np.concatenate([getattr(r, f) for r in rs]).astype(dt) if rs else np.zeros(0, dt))  # noqa: E731
        return BatchScoreResult.from_counts(cat("counts", np.uint64), cat("prompt_counts", np.uint64),
                                            cat("suffix_len", np.int64), cat("sparse", bool), offsets=offs)

    def suffix_cache(self, **_: Any) -> "_DifferenceCache":
        """What decoding loops ask an index for (`SuffixCache`'s ntd / ntd_batch / prob / state),
        here answered query by query on net counts (no cached states)."""
        return _DifferenceCache(self)

    @staticmethod
    def _rows(batch: Any, offsets: Any, lengths: Any, padding_side: str, name: str) -> list:
        values, offs = as_batch(batch, offsets=offsets, lengths=lengths, padding_side=padding_side, name=name)
        return [values[a:b] for a, b in zip(offs[:-1].tolist(), offs[1:].tolist())]


class _DifferenceCache:
    """SuffixCache's query methods over a DifferenceIndex."""

    def __init__(self, index: DifferenceIndex):
        self.index = index

    def ntd(self, context: Any) -> NextTokenDistribution:
        return self.index.infgram_ntd(context)

    def ntd_batch(self, contexts: Any, **kw: Any) -> BatchNextTokenDistributions:
        return self.index.infgram_ntd_batch(contexts, **kw)

    def prob(self, context: Any, token: int) -> ProbResult:
        return self.index.infgram_prob(context, token)

    def state(self, context: Any) -> DecodingState:
        """The decoding state of a context on net counts (computed per call: no cache)."""
        return self.index.init_state(context)


def _reopen_difference(index: Any, removed: Any) -> DifferenceIndex:
    return DifferenceIndex(index, removed, owns=True)
