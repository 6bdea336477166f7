"""`RemoteIndex`: an index served by `infinigram-hf serve`, with the query API of `InfiniGramIndex`.

    >>> index = InfiniGramIndex.open("http://gpu-box:8000/code")          # doctest: +SKIP
    >>> index.infgram_ntd([5, 6]).as_dict()                                # doctest: +SKIP

The `LogitsProcessor`, `perplexity()`, the drafter and `InfiniGramLM.score` take it where they
take a local index. Batched queries travel as numpy arrays (`infinigram_hf.index.wire`), and a
decoding step of the processor is one request for the whole batch (the server keeps the
`SuffixCache`). Connections are pooled and kept alive (`http_pool`: sockets of the standard library, one write a request); every query is
idempotent and is retried with backoff on a refused or dropped connection or a 503; a dead or
slow server raises `InfiniGramError` within ``timeout`` seconds (each socket operation is
bounded by the time left).
"""
from __future__ import annotations

import json
import http.client
import random
import socket
import time
from typing import Any, Optional
from urllib.parse import quote, urlsplit

import numpy as np

from .._core.errors import InfiniGramError
from .._core.ids import as_ids, one_per_row
from . import wire
from .batch import as_batch
from .facts import IndexFacts
from .http_pool import Pool, Response
from .remote_rows import RemoteRowStates, ntd_result
from .results import (BatchNextTokenDistributions, BatchProbResult, BatchScoreResult, Document, NextTokenDistribution,
                      ProbResult, ScoreResult)
from .search import DocumentMatch, SearchResult
from .states import DecodingState

_BATCH_KW = ("offsets", "lengths", "padding_side")


def is_remote_url(path: Any) -> bool:
    return isinstance(path, str) and path.split("://", 1)[0].lower() in ("http", "https") and "://" in path


class RemoteIndex(IndexFacts):
    """An index on an `infinigram-hf serve` server, at ``http(s)://host:port/NAME``.

    Args:
        url: the server and the index's name (the last path segment).
        timeout: seconds a call may take in all, retries included; past it InfiniGramError.
        retries: further attempts after a refused connection, a dropped connection or a 503.
        api_key: sent as ``Authorization: Bearer KEY`` (servers started with --api-key-file).
        max_connections: connections kept alive in the pool (threads share them).
    """

    is_remote = True

    def __init__(self, url: str, *, timeout: float = 30.0, retries: int = 3, api_key: Optional[str] = None,
                 max_connections: int = 16):
        parts = urlsplit(url)
        name = parts.path.rstrip("/").rsplit("/", 1)[-1]
        if parts.scheme not in ("http", "https") or not parts.netloc or not name:
            raise ValueError(f"url must be http(s)://host:port/NAME, got {url!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.url, self.name, self.timeout, self.retries = url, name, float(timeout), int(retries)
        prefix = parts.path.rstrip("/").rsplit("/", 1)[0]
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._prefix = f"{prefix}/v1/{quote(name, safe='')}"
        self._pool = Pool(parts.scheme, parts.netloc, size=max_connections, headers=headers)
        self._closed = False
        try:
            self.info = self._json("GET", "/info")
        except BaseException:
            self._pool.close()
            raise

    # ------------------------------------------------------------ transport

    def _request(self, method: str, path: str, *, content: Optional[bytes] = None,
                 body: Any = None, ctype: str = wire.CONTENT_TYPE) -> Response:
        """One call with retries: the response (2xx), or ValueError (4xx: the server's message)
        or InfiniGramError (unreachable, 5xx, or out of time)."""
        if self._closed:
            raise InfiniGramError(f"{self.url}: the remote index is closed")
        if body is not None:
            content, ctype = json.dumps(body).encode(), "application/json"
        headers = {"Content-Type": ctype} if content is not None else {}
        deadline = time.monotonic() + self.timeout
        last = ""
        for attempt in range(self.retries + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                r = self._pool.request(method, self._prefix + path, content, headers, left)
            except (TimeoutError, socket.timeout):
                last = f"no answer within {self.timeout:g} s"
                break  # the time is spent: a retry could not finish either
            except (OSError, http.client.HTTPException) as exc:  # refused, reset, dropped mid-answer
                last = f"{type(exc).__name__}: {exc}"
                wait = 0.05 * 2 ** attempt
            else:
                if r.status_code < 400:
                    return r
                msg = _message(r)
                if r.status_code == 503:
                    last = f"503 {msg}"
                    try:
                        wait = min(float(r.headers.get("retry-after", "0.1")), 1.0)
                    except ValueError:
                        wait = 0.1
                elif r.status_code < 500:
                    raise ValueError(f"{self.url}: {msg}") if r.status_code in (400, 404, 413, 422) \
                        else InfiniGramError(f"{self.url}: HTTP {r.status_code}: {msg}")
                else:
                    raise InfiniGramError(f"{self.url}: HTTP {r.status_code}: {msg}")
            time.sleep(min(wait * random.uniform(0.5, 1.0), max(0.0, deadline - time.monotonic())))
        raise InfiniGramError(f"{self.url}: the server did not answer ({last})")

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        r = self._request(method, path, body=body)
        try:
            return r.json()
        except ValueError:
            raise InfiniGramError(f"{self.url}{path}: the answer is not JSON") from None

    def call(self, op: str, params: dict, arrays: dict) -> tuple[dict, dict]:
        """One batched op on the server (see infinigram_hf.serve.ops): (params, arrays) back."""
        identity = self.info.get("identity")
        if identity is not None:  # the server refuses it (409) if its index is no longer this one
            params = {**params, "identity": identity}
        r = self._request("POST", f"/op/{op}", content=wire.encode(params, arrays))
        try:
            return wire.decode(r.content)
        except wire.WireError as exc:
            raise InfiniGramError(f"{self.url}: a malformed answer to {op}: {exc}") from None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "RemoteIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteIndex({self.url}: {self.num_tokens} tokens, {self.num_docs} docs, vocab {self.vocab_size})"

    def native_handle(self) -> Any:
        raise InfiniGramError(f"{self.url} is a remote index: it has no native handle in this process")

    # ------------------------------------------------------------ metadata

    def _facts(self) -> dict:
        return self.info

    num_shards = property(lambda self: int(self.info["num_shards"]))
    state_size = property(lambda self: int(self.info["state_size"]))
    metas = property(lambda self: list(self.info.get("metas", [])))
    tokenizer = None  # text is tokenized by the caller (pass tokenizer= where text is accepted)

    @property
    def meta(self) -> dict:
        return self.metas[0] if self.metas else {}

    @property
    def paths(self) -> list:
        return [self.url]

    # ------------------------------------------------------------ queries

    def _batch(self, queries: Any, kw: dict, name: str) -> dict:
        values, offs = as_batch(queries, **{k: kw[k] for k in _BATCH_KW if k in kw}, name=name)
        return {"values": values, "offsets": offs}

    def count(self, ids: Any) -> int:
        """Occurrences of the n-gram `ids`."""
        return int(self.count_batch([as_ids(ids)])[0])

    def count_batch(self, queries: Any, **kw: Any) -> np.ndarray:
        return self.call("count", {}, self._batch(queries, kw, "queries"))[1]["counts"].astype(np.int64)

    def infgram_prob_batch(self, prompts: Any, tokens: Any, *, infinite: bool = True, **kw: Any) -> BatchProbResult:
        arrays = self._batch(prompts, kw, "prompts")
        arrays["tokens"] = one_per_row(tokens, len(arrays["offsets"]) - 1)
        a = self.call("prob", {"infinite": bool(infinite)}, arrays)[1]
        return BatchProbResult.from_counts(a["counts"], a["prompt_counts"], a["suffix_len"], a["sparse"])

    def infgram_prob(self, prompt: Any, token: int) -> ProbResult:
        return self.infgram_prob_batch([as_ids(prompt, "prompt")], [token])[0]

    def ngram_prob(self, prompt: Any, token: int) -> ProbResult:
        return self.infgram_prob_batch([as_ids(prompt, "prompt")], [token], infinite=False)[0]

    def infgram_ntd_batch(self, prompts: Any, *, infinite: bool = True, max_support: Optional[int] = None,
                          **kw: Any) -> BatchNextTokenDistributions:
        a = self.call("ntd", {"infinite": bool(infinite), "max_support": max_support},
                      self._batch(prompts, kw, "prompts"))[1]
        return ntd_result(a)

    def infgram_ntd(self, prompt: Any, *, max_support: Optional[int] = None) -> NextTokenDistribution:
        return self.infgram_ntd_batch([as_ids(prompt, "prompt")], max_support=max_support)[0]

    def ngram_ntd(self, prompt: Any) -> NextTokenDistribution:
        return self.infgram_ntd_batch([as_ids(prompt, "prompt")], infinite=False)[0]

    def infgram_suffix_len(self, prompt: Any) -> int:
        arrays = self._batch([as_ids(prompt, "prompt")], {}, "prompts")
        return int(self.call("suffix_len", {}, arrays)[1]["suffix_len"][0])

    def score_batch(self, sequences: Any, **kw: Any) -> BatchScoreResult:
        a = self.call("score", {}, self._batch(sequences, kw, "sequences"))[1]
        return BatchScoreResult.from_counts(a["counts"], a["prompt_counts"], a["suffix_len"], a["sparse"],
                                            offsets=a["offsets"].astype(np.int64))

    def score(self, ids: Any) -> ScoreResult:
        q = as_ids(ids)
        bad = np.flatnonzero(q >= self.vocab_size)
        if len(bad):
            t, i = int(q[bad[0]]), int(bad[0])
            what = "the document separator, not a token" if t == self.separator_id else \
                f"outside the vocabulary (size {self.vocab_size})"
            raise ValueError(f"ids: id {t} at position {i} is {what}")
        return self.score_batch([q])[0]

    def suffix_cache(self, **kw: Any) -> "RemoteSuffixCache":
        """Decoding-loop queries answered through the server's own SuffixCache (arguments are
        accepted for compatibility; the server sizes its cache)."""
        return RemoteSuffixCache(self)

    # ------------------------------------------------------------ documents

    def get_doc(self, doc_id: int) -> Document:
        """A document's token ids and metadata by its global id."""
        if isinstance(doc_id, bool) or not isinstance(doc_id, (int, np.integer)):
            raise ValueError(f"doc_id must be an int, got {doc_id!r}")
        d = self._json("GET", f"/doc/{int(doc_id)}")
        return Document(doc_id=int(d["doc_id"]), token_ids=np.asarray(d["token_ids"], dtype=np.uint32),
                        metadata=d.get("metadata") or {}, shard=int(d.get("shard", 0)))

    def search_docs(self, query: Any, maxnum: int = 10, *, max_clause_freq: int = 50_000,
                    max_diff_tokens: Optional[int] = None, seed: int = 0, max_spans: int = 1_000_000,
                    **_: Any) -> SearchResult:
        """Documents matching an n-gram or a CNF of n-grams, as `InfiniGramIndex.search_docs`
        (queries as token ids; text is tokenized by the server when it has the tokenizer)."""
        d = self._json("POST", "/search", _jsonable({"query": query, "maxnum": maxnum, "max_clause_freq": max_clause_freq,
                                                     "max_diff_tokens": max_diff_tokens, "seed": seed,
                                                     "max_spans": max_spans}))
        docs = tuple(DocumentMatch(doc_id=int(x["doc_id"]), token_ids=np.asarray(x["token_ids"], dtype=np.uint32),
                                   metadata=x.get("metadata") or {}, shard=int(x.get("shard", 0)),
                                   spans=np.asarray(x["spans"], dtype=np.int64).reshape(-1, 4),
                                   spans_capped=bool(x.get("spans_capped", False))) for x in d["documents"])
        cnf = tuple(tuple(tuple(g) for g in clause) for clause in d["cnf"])
        return SearchResult(count=int(d["count"]), approximate=bool(d["approximate"]),
                            doc_ids=np.asarray(d["doc_ids"], dtype=np.int64), documents=docs, cnf=cnf,
                            estimate=float(d["estimate"]), anchor_clause=int(d["anchor_clause"]),
                            anchor_count=int(d["anchor_count"]), anchor_used=int(d["anchor_used"]),
                            spans_capped=bool(d.get("spans_capped", False)))


class RemoteSuffixCache:
    """`SuffixCache`'s decoding-loop queries, answered by the server's cache (one request per call,
    whatever the batch size)."""

    def __init__(self, index: RemoteIndex):
        self.index = index
        self.stats = {"requests": 0}

    def __len__(self) -> int:
        return 0

    def clear(self) -> None:
        """Nothing is kept on this side."""

    def row_states(self) -> Optional[RemoteRowStates]:
        """The rows' states of a decoding batch kept on this side (`RemoteRowStates`: a step
        sends states and tails, not whole contexts), or None when the server cannot take them
        (an index without a native handle, or a server without the op)."""
        info = self.index.info
        if not info.get("native") or "rows_ntd" not in info.get("ops", ()):
            return None
        return RemoteRowStates(self.index)

    def _call(self, op: str, contexts: Any, kw: dict, extra: Optional[dict] = None) -> dict:
        arrays = self.index._batch(contexts, kw, "contexts")
        arrays.update(extra or {})
        self.stats["requests"] += 1
        return self.index.call(op, {}, arrays)[1]

    def ntd_batch(self, contexts: Any, **batch_kw: Any) -> BatchNextTokenDistributions:
        return ntd_result(self._call("cache_ntd", contexts, batch_kw))

    def ntd(self, context: Any) -> NextTokenDistribution:
        return self.ntd_batch([as_ids(context, "context")])[0]

    def prob_batch(self, contexts: Any, tokens: Any, **batch_kw: Any) -> BatchProbResult:
        arrays = self.index._batch(contexts, batch_kw, "contexts")
        arrays["tokens"] = one_per_row(tokens, len(arrays["offsets"]) - 1)
        self.stats["requests"] += 1
        a = self.index.call("cache_prob", {}, arrays)[1]
        return BatchProbResult.from_counts(a["counts"], a["prompt_counts"], a["suffix_len"], a["sparse"])

    def prob(self, context: Any, token: int) -> ProbResult:
        return self.prob_batch([as_ids(context, "context")], [token])[0]

    def states(self, contexts: Any, **batch_kw: Any) -> np.ndarray:
        """States (the server's suffix-array ranges) of a batch of contexts."""
        return np.array(self._call("states", contexts, batch_kw)["states"], dtype=np.int64)

    def state(self, context: Any) -> DecodingState:
        return DecodingState(self.states([as_ids(context, "context")])[0])


def _jsonable(x: Any) -> Any:
    """Query structures (numpy arrays, tuples, numpy ints) as JSON values."""
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.integer):
        return int(x)
    return x


def _message(r: Any) -> str:
    try:
        d = r.json()
        return str(d.get("error", d)) if isinstance(d, dict) else str(d)
    except (ValueError, json.JSONDecodeError):
        return r.text[:500]
