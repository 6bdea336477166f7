"""The endpoint shaped like the official infini-gram API (``POST /`` with a JSON payload).

A script written for https://api.infini-gram.io/ works by changing the URL: the same request
fields (``index``, ``query_type``, ``query`` or ``query_ids``, ``maxnum``, ``max_support``,
``max_clause_freq``, ``max_diff_tokens``, ``max_disp_len``) and the same answer fields; docs/SERVING.md
lists what matches and what differs. A text ``query`` needs a tokenizer saved with the index.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from ..index.search import parse_query

QUERY_TYPES = ("count", "prob", "ntd", "infgram_prob", "infgram_ntd", "search_docs")


def _is_id_list(x: Any) -> bool:
    return isinstance(x, list) and all(type(t) is int for t in x)


def _tokenize(served: Any, payload: dict) -> tuple[list, Any]:
    """(token ids, tokenizer or None) of the payload's query."""
    from .._core import tokenization as tk
    tok = tk.index_tokenizer(served.index, light=True) if getattr(served.index, "paths", None) else None
    if "query_ids" in payload:
        ids = payload["query_ids"]
        if not _is_id_list(ids):
            raise ValueError("query_ids must be a list of integers")
        return ids, tok
    query = payload.get("query")
    if not isinstance(query, str):
        raise ValueError("query must be a string (or give query_ids, a list of integers)")
    if tok is None:
        raise ValueError(f"index {served.name!r} has no saved tokenizer: send query_ids instead of query")
    return [int(t) for t in tok.encode(query)], tok


def _tokens(tok: Any, ids: list) -> list:
    if tok is None:
        return [str(i) for i in ids]
    conv = getattr(tok, "convert_ids_to_tokens", None)
    if conv is not None:
        return [str(t) for t in conv(ids)]
    raw = getattr(tok, "_tokenizer", None)  # a saved tokenizer.json: the vocabulary's own strings
    if raw is not None and hasattr(raw, "id_to_token"):
        return [str(raw.id_to_token(int(i))) for i in ids]
    return [tok.decode([i]) for i in ids]


def _positive(payload: dict, name: str, default: Any, hi: int) -> Any:
    v = payload.get(name, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= hi:
        raise ValueError(f"{name} must be a positive integer (at most {hi})")
    return v


def _prob(served: Any, ids: list, infinite: bool) -> dict:
    if len(ids) < 1:
        raise ValueError("the query must hold at least one token: the prompt, then the token whose probability is asked")
    prompt, cont = ids[:-1], ids[-1]
    fn = served.index.infgram_prob if infinite else served.index.ngram_prob
    r = fn(prompt, cont)
    out = {"prompt_cnt": r.prompt_count, "cont_cnt": r.count, "prob": r.prob if r.prompt_count else -1.0}
    if infinite:
        out["suffix_len"] = r.suffix_len
    return out


def _ntd(served: Any, ids: list, tok: Any, payload: dict, infinite: bool) -> dict:
    max_support = _positive(payload, "max_support", None, 1 << 40)
    ix = served.index
    d = ix.infgram_ntd(ids, max_support=max_support) if infinite else ix.ngram_ntd(ids) if max_support is None \
        else ix.infgram_ntd_batch([ids], infinite=False, max_support=max_support)[0]
    if len(d.token_ids) > served.limits.max_ntd_entries:
        raise ValueError(f"the distribution has {len(d.token_ids)} entries, more than the server's "
                         f"{served.limits.max_ntd_entries}: pass max_support")
    toks = d.token_ids.tolist()
    names = _tokens(tok, toks)
    out = {"prompt_cnt": d.total, "approx": d.approximate,
           "result_by_token_id": {t: {"token": n, "cont_cnt": int(c), "prob": float(p)}
                                  for t, n, c, p in zip(toks, names, d.counts.tolist(), d.probs.tolist())}}
    if infinite:
        out["suffix_len"] = d.suffix_len
    return out


def _cnf(payload: dict, tok: Any) -> Any:
    """The query as the index's search takes it: ids, a CNF of ids, or text with AND / OR."""
    if "query_ids" in payload:
        q = payload["query_ids"]
        if _is_id_list(q):
            return q
        if isinstance(q, list) and all(isinstance(c, list) and all(_is_id_list(g) for g in c) for c in q):
            return q
        raise ValueError("query_ids must be a list of integers or a CNF: a list of clauses, each a list of id lists")
    query = payload.get("query")
    if not isinstance(query, str):
        raise ValueError("query must be a string (or give query_ids)")
    if tok is None:
        raise ValueError("this index has no saved tokenizer: send query_ids instead of query")
    return [[g.strip() for g in clause.split(" OR ")] for clause in query.split(" AND ")]


def answer(served: Any, payload: dict, lookup: Callable[[str], Any]) -> dict:
    """The official-shaped answer to one payload (ValueError for a bad one: the caller answers
    400 with {"error": message})."""
    t0 = time.perf_counter()
    qtype = payload.get("query_type")
    if qtype not in QUERY_TYPES:
        raise ValueError(f"query_type must be one of {list(QUERY_TYPES)}, got {qtype!r}")
    if qtype == "search_docs":
        from .._core import tokenization as tk
        tok = tk.index_tokenizer(served.index, light=True) if getattr(served.index, "paths", None) else None
        maxnum = _positive(payload, "maxnum", 1, served.limits.max_docs)
        max_disp_len = _positive(payload, "max_disp_len", 1000, 1 << 30)
        clause_freq = _positive(payload, "max_clause_freq", 50_000, served.limits.max_clause_freq)
        diff = _positive(payload, "max_diff_tokens", None, 1 << 30)
        query = _cnf(payload, tok)
        r = served.index.search_docs(query, maxnum, max_clause_freq=clause_freq, max_diff_tokens=diff,
                                     decode=False)  # text: the index's own saved tokenizer
        docs = [{"doc_ix": d.doc_id, "doc_len": len(d.token_ids), "disp_len": min(len(d.token_ids), max_disp_len),
                 "metadata": d.metadata, "token_ids": d.token_ids[:max_disp_len].tolist(),
                 "spans": d.spans.tolist()} for d in r.documents]
        out: dict[str, Any] = {"cnt": r.count, "approx": r.approximate, "idxs": [d.doc_id for d in r.documents],
                               "documents": docs, "token_idsss": [[list(g) for g in c] for c in r.cnf]}
        out["tokensss"] = [[_tokens(tok, list(g)) for g in c] for c in r.cnf]
    else:
        ids, tok = _tokenize(served, payload)
        if qtype == "count":
            out = {"count": served.index.count(ids), "approx": False}
        elif qtype in ("prob", "infgram_prob"):
            out = _prob(served, ids, qtype == "infgram_prob")
        else:
            out = _ntd(served, ids, tok, payload, qtype == "infgram_ntd")
        out["token_ids"] = ids
        out["tokens"] = _tokens(tok, ids)
    out["latency"] = (time.perf_counter() - t0) * 1000.0
    return out


__all__ = ["answer", "QUERY_TYPES", "parse_query"]
