"""Interpolated perplexity of a causal LM on a dataset, with the ∞-gram (paper §5).

The model side is the usual sliding window (window 1024, stride 512: every window after the first
scores only its last `stride` tokens, the rest is context), batched over windows of all documents.
The ∞-gram side scores each document once, densely, with the full document prefix as context.

First tokens: with `add_bos=True` (the default) every document is preceded by the tokenizer's BOS
token (GPT-2 style tokenizers have none, their EOS = document separator is used instead) so that
the model can score the document's first token too; the ∞-gram scores it with an empty context
(the unigram, effective n = 1). Without a BOS/EOS id, or with `add_bos=False`, the first token of
each document has no context and is not scored.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, List, Optional

import numpy as np

from ..index import InfiniGramIndex
from ..index.infinigram_index import as_index
from .._core.progress import progress_bar
from ..lm.context import segments
from ..lm.learned_mixing import AGREEMENT_FLOOR, first_max_per_row, uses_agreement
from ..lm.mixture import PerplexityResult, TokenScores, interpolate
from ..lm.orders import check_levels, gather_suffixes, level_scores
from .._core.tokenization import check_tokenizer
from ..lm.mixture import DEFAULT_LAMBDA_DENSE, DEFAULT_LAMBDA_SPARSE, check_lambda, check_model_vocab
from .._core.tokenization import encode_texts


DEFAULT_WINDOW = 1024


@dataclass(frozen=True)
class _Window:
    doc: int      # document index
    begin: int    # window = seq[begin:end] (seq = [BOS] + doc tokens, or the doc tokens)
    end: int
    first: int    # targets are seq[first:end], predicted from the logits before them


def windows(n: int, window: int, stride: int) -> List[tuple[int, int, int]]:
    """(begin, end, first target) of the windows over a sequence of n tokens.

    Every position 1..n-1 is a target exactly once; a window never holds more than `window` tokens,
    and each target after the first window has at least window - stride tokens of context.

    Example:
        >>> windows(10, 4, 2)
        [(0, 4, 1), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    """
    out = []
    end = min(window, n)
    if n >= 2:
        out.append((0, end, 1))
    while end < n:
        new_end = min(end + stride, n)
        out.append((new_end - window if new_end - window > 0 else 0, new_end, end))
        end = new_end
    return out


def _documents(data: Any, tokenizer: Any, text_column: str) -> List[np.ndarray]:
    """Token ids of every document: from a datasets.Dataset, a list of strings, or pre-tokenized ids."""
    if hasattr(data, "column_names") and hasattr(data, "__getitem__"):  # datasets.Dataset
        if text_column not in data.column_names:
            raise ValueError(f"the dataset has no {text_column!r} column (columns: {data.column_names}); "
                             f"pass text_column=")
        data = data[text_column]
    if isinstance(data, str):
        raise ValueError("data must be a list of strings or a datasets.Dataset, not a single string")
    data = list(data)
    if all(isinstance(d, str) for d in data):
        if tokenizer is None:
            raise ValueError("tokenizer is required to score text")
        return [np.asarray(ids, dtype=np.int64) for ids in encode_texts(tokenizer, data)]
    try:
        return [np.asarray(d, dtype=np.int64).reshape(-1) for d in data]
    except (TypeError, ValueError):
        raise ValueError("data must hold strings or sequences of token ids") from None


def _bos_id(tokenizer: Any, model: Any) -> Optional[int]:
    for src in (tokenizer, getattr(model, "config", None)):
        for name in ("bos_token_id", "eos_token_id"):
            v = getattr(src, name, None) if src is not None else None
            if isinstance(v, (list, tuple)):
                v = v[0] if v else None
            if v is not None:
                return int(v)
    return None


def infgram_scores(index: InfiniGramIndex, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P_∞, sparse, effective n) of every token of one document given its full prefix.

    Ids the index cannot hold get P_∞ = 0 and effective n = 0, and restart the context (no
    indexed n-gram spans them)."""
    n = len(ids)
    probs, sparse, eff = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    for a, b in segments(ids, index.vocab_size):
        s = index.score(ids[a:b])
        probs[a:b], sparse[a:b], eff[a:b] = s.probs, s.sparse, s.suffix_len + 1
    return probs, sparse, eff


_INFGRAM_FEATURES = ("context_count", "num_distinct", "top_infgram_prob")
_AGREEMENT_FEATURES = ("neural_infgram_agreement", "neural_logprob_infgram_top")
_NTD_ROWS = 4096  # contexts per distribution batch (bounds the batch's entries)


def infgram_features(index: InfiniGramIndex, ids: np.ndarray, *, distributions: bool = True,
                     entries: bool = False, levels: tuple = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """`infgram_scores` plus the ∞-gram context features of every position: the count of the
    matched suffix, and (distributions=True) the number of distinct continuations and the top
    P_∞ of its next-token distribution -- what the processor sees for the same context.
    entries=True (with distributions) also returns every position's whole distribution as
    feats["entries"] = (offsets, token ids, P_∞), what the features that compare it with the
    model's distribution need (`token_scores`). `levels` (`infinigram_hf.lm.orders`) adds
    feats["level_prob"] and feats["level_count"], (positions, levels) each.

    Ids the index cannot hold restart the context, as in `infgram_scores`; positions holding one
    get count 0, 0 continuations and top P_∞ 0."""
    n = len(ids)
    probs, sparse, eff = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    count = np.zeros(n)
    distinct, top = np.zeros(n), np.zeros(n)
    parts: list = []  # (first position, offsets, tokens, P_∞) per segment
    level_prob, level_count = np.zeros((n, len(levels))), np.zeros((n, len(levels)))
    for a, b in segments(ids, index.vocab_size):
        s = index.score(ids[a:b])
        probs[a:b], sparse[a:b], eff[a:b] = s.probs, s.sparse, s.suffix_len + 1
        count[a:b] = s.prompt_counts
        if levels:
            level_prob[a:b], level_count[a:b] = level_scores(index, ids[a:b], s.suffix_len, levels)
        if distributions:
            distinct[a:b], top[a:b], ent = _suffix_distributions(index, ids[a:b], s.suffix_len, entries)
            if entries:
                parts.append((a,) + ent)
    feats = {"context_count": count}
    if levels:
        feats.update(level_prob=level_prob, level_count=level_count)
    if distributions:
        feats.update(num_distinct=distinct, top_infgram_prob=top)
        if entries:
            feats["entries"] = _stitch_entries(n, parts)
    return probs, sparse, eff, feats


def _stitch_entries(n: int, parts: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One (offsets, tokens, P_∞) over all n positions from per-segment pieces (positions outside
    every segment have no entries)."""
    width = np.zeros(n, np.int64)
    for a, off, _, _ in parts:
        width[a:a + len(off) - 1] = np.diff(off)
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum(width)
    cat = lambda i, dt: np.concatenate([q[i] for q in parts]) if parts else np.zeros(0, dt)  # noqa: E731
    return offsets, cat(2, np.int64), cat(3, np.float64)


def _suffix_distributions(index: InfiniGramIndex, seq: np.ndarray, suffix_len: np.ndarray, entries: bool = False
                          ) -> tuple[np.ndarray, np.ndarray, Optional[tuple]]:
    """(distinct continuations, top P_∞, entries) of the matched suffix before every position of
    seq: the n-gram distribution of exactly that suffix (the one the ∞-gram estimate used);
    entries = (offsets, tokens, P_∞) of those distributions when asked for, else None."""
    n = len(seq)
    distinct, top = np.zeros(n), np.zeros(n)
    offs_all, toks_all, probs_all = [np.zeros(1, np.int64)], [], []
    for lo in range(0, n, _NTD_ROWS):
        hi = min(n, lo + _NTD_ROWS)
        pos = np.arange(lo, hi)
        flat, offs = gather_suffixes(seq, pos, suffix_len[lo:hi])
        d = index.infgram_ntd_batch(flat, offsets=offs, infinite=False)
        width = np.diff(d.offsets)
        distinct[lo:hi] = width
        cnt = d.counts.astype(np.float64)
        has = width > 0
        if has.any():
            mx = np.maximum.reduceat(cnt, d.offsets[:-1][has]) if len(cnt) else np.zeros(0)
            top[lo:hi][has] = mx / np.maximum(d.total[has].astype(np.float64), 1.0)
        if entries:
            offs_all.append(offs_all[-1][-1] + np.asarray(d.offsets[1:], np.int64))
            toks_all.append(np.asarray(d.token_ids, np.int64))
            probs_all.append(cnt / np.repeat(np.maximum(d.total.astype(np.float64), 1.0), width))
    if not entries:
        return distinct, top, None
    cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt)  # noqa: E731
    return distinct, top, (np.concatenate(offs_all), cat(toks_all, np.int64), cat(probs_all, np.float64))


def agreement_features(rows: Any, entries: tuple, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """For positions lo..hi-1 of a document whose model log-probabilities are `rows` (hi - lo,
    vocab; torch) and whose ∞-gram distributions are `entries` (offsets, tokens, P_∞):
    (ln Σ_y P_∞(y)·P_neural(y), ln P_neural(argmax_y P_∞(y))) per position; 0 where P_∞ is empty.
    Both describe the context only (learned_mixing.AGREEMENT_FEATURES)."""
    import torch
    offsets, toks, probs = entries
    off = offsets[lo:hi + 1]
    width = off[1:] - off[:-1]
    k = len(width)
    agree, top = np.zeros(k), np.zeros(k)
    if off[-1] == off[0]:
        return agree, top
    sl = slice(int(off[0]), int(off[-1]))
    tk = toks[sl]
    row = torch.from_numpy(np.repeat(np.arange(k), width)).to(rows.device)
    lp = rows[row, torch.from_numpy(np.maximum(tk, 0)).to(rows.device)].double().cpu().numpy()  # ln P_neural there
    lp[tk < 0] = -np.inf  # end-of-document without a BOS/EOS id: no model probability
    has = width > 0
    agree[has] = np.log(np.maximum(np.add.reduceat(probs[sl] * np.exp(lp), (off[:-1] - off[0])[has]), AGREEMENT_FLOOR))
    best = first_max_per_row(probs, off)  # (the first of equals, in the index's token order)
    top[has] = np.where(tk[best[has] - off[0]] < 0, 0.0, np.maximum(lp[best[has] - off[0]], math.log(AGREEMENT_FLOOR)))
    return agree, top


def _forward_kwargs(model: Any) -> set:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover
        return set()


def model_context(model: Any) -> Optional[int]:
    """Positions the model can attend to (n_positions / max_position_embeddings), if it says."""
    cfg = getattr(model, "config", None)
    context = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None)
    return int(context) if isinstance(context, int) and not isinstance(context, bool) and context > 0 else None


def default_window(model: Any, window: Optional[int], stride: Optional[int]) -> tuple[Any, Any]:
    """window None -> min(1024, the model's context); stride None -> window // 2."""
    if window is None:
        context = model_context(model)
        window = min(DEFAULT_WINDOW, context) if context is not None else DEFAULT_WINDOW
    if stride is None and isinstance(window, int) and not isinstance(window, bool):
        stride = max(1, window // 2)
    return window, stride


def token_scores(model: Any, tokenizer: Any, data: Any, index: Any, *, window: Optional[int] = None,
                 stride: Optional[int] = None, batch_size: int = 8, text_column: str = "text", add_bos: bool = True,
                 progress: bool = True, infgram_distributions: bool = True, agreement: bool = False,
                 levels: Any = None) -> TokenScores:
    """Neural log-probability and ∞-gram estimate of every scored token, with the context
    features of learned mixing (the cache behind `perplexity`, `interpolate`, `tune_lambdas` and
    `fit_mixing`). Arguments as for `perplexity`; `infgram_distributions=False` skips the features
    that need each context's next-token distribution (num_distinct, top_infgram_prob);
    `agreement=True` adds the ones that compare it with the model's (neural_infgram_agreement,
    neural_logprob_infgram_top): they keep every document's ∞-gram distributions until its
    windows are scored, so they are computed only when asked for. `levels` (e.g.
    `infinigram_hf.lm.orders.DEFAULT_LEVELS`) adds the estimates of shorter suffixes that a model
    mixing several orders needs (level_prob, level_count)."""
    import torch  # only here: importing infinigram_hf stays torch-free
    from .mixing import neural_entropy, neural_top_logprob
    levels = check_levels(levels) if levels else ()
    window, stride = default_window(model, window, stride)
    for name, v in (("window", window), ("stride", stride), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if window < 2 or stride >= window:
        raise ValueError(f"need 1 <= stride < window so that every scored token has context in its window "
                         f"(got window={window}, stride={stride})")
    index = as_index(index)
    if tokenizer is not None:
        check_tokenizer(index, tokenizer)
    cfg = getattr(model, "config", None)
    vocab = getattr(cfg, "vocab_size", None)
    if vocab is not None:
        check_model_vocab(index, int(vocab))
    context = model_context(model)
    if context is not None and window > context:
        raise ValueError(f"window={window} is longer than the model's context of {context} positions")
    docs = _documents(data, tokenizer, text_column)
    bos = _bos_id(tokenizer, model) if add_bos else None
    off = 1 if bos is not None else 0
    seqs = [np.concatenate([[bos], d]) if off else d for d in docs]

    # ∞-gram: one dense pass per document; keep the scored positions only.
    wins: List[_Window] = []
    inf_p, inf_s, inf_n, inf_f, doc_of, slots, entries = [], [], [], [], [], [], []
    total = 0
    for i, (d, s) in enumerate(zip(docs, seqs)):
        p, sp, en, feats = infgram_features(index, d, distributions=infgram_distributions or agreement,
                                            entries=agreement, levels=levels)
        keep = slice(1 - off, None)  # doc positions scored: all with BOS, from 1 without
        inf_p.append(p[keep]); inf_s.append(sp[keep]); inf_n.append(en[keep])
        if "entries" in feats:  # (kept per document until its windows are scored)
            e_off, e_tok, e_p = feats.pop("entries")
            # end-of-document is the separator id in the index, BOS/EOS for the model (as in the
            # processor); with neither, -1: no model probability
            e_tok[e_tok == index.separator_id] = bos if bos is not None else -1
            entries.append((e_off[1 - off:], e_tok, e_p))
        inf_f.append({k: v[keep] for k, v in feats.items()})
        doc_of.append(np.full(len(p[keep]), i, dtype=np.int64))
        slots.append(total)
        total += len(p[keep])
        wins.extend(_Window(i, b, e, f) for b, e, f in windows(len(s), window, stride))
    neural = np.full(total, np.nan)
    entropy, top = np.full(total, np.nan), np.full(total, np.nan)
    agree = {k: np.zeros(total) for k in _AGREEMENT_FEATURES} if entries else {}

    device = next(model.parameters()).device
    kw = _forward_kwargs(model)
    keep_arg = "logits_to_keep" if "logits_to_keep" in kw else ("num_logits_to_keep" if "num_logits_to_keep" in kw else None)
    wins.sort(key=lambda w: w.end - w.begin, reverse=True)  # similar lengths batch with little padding
    was_training = model.training
    model.eval()
    bar = progress_bar(total=total, unit="tok", desc="perplexity", disable=not progress, dynamic_ncols=True)
    try:
        with torch.inference_mode():
            for k in range(0, len(wins), batch_size):
                batch = wins[k:k + batch_size]
                longest = max(w.end - w.begin for w in batch)
                ids = torch.zeros(len(batch), longest, dtype=torch.long)
                mask = torch.zeros(len(batch), longest, dtype=torch.long)
                for r, w in enumerate(batch):
                    ids[r, : w.end - w.begin] = torch.from_numpy(seqs[w.doc][w.begin:w.end])
                    mask[r, : w.end - w.begin] = 1
                # Only positions that predict a target need logits: the last `keep` of the window.
                first_needed = min(w.first - 1 - w.begin for w in batch)
                extra = {keep_arg: longest - first_needed} if keep_arg else {}
                logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), **extra).logits
                shift = longest - logits.shape[1]  # logits[:, j] predicts window position shift + j + 1
                logp = torch.log_softmax(logits.float(), dim=-1)
                for r, w in enumerate(batch):
                    tgt = torch.from_numpy(seqs[w.doc][w.first:w.end]).to(device)
                    pos = torch.arange(w.first - 1 - w.begin, w.end - 1 - w.begin, device=device) - shift
                    rows = logp[r, pos]
                    lp = rows[torch.arange(len(pos), device=device), tgt].double().cpu().numpy()
                    start = slots[w.doc] + w.first - 1  # seq position t is slot t - 1 either way
                    neural[start:start + len(lp)] = lp
                    # context features of learned mixing (free: the rows are at hand)
                    entropy[start:start + len(lp)] = neural_entropy(rows).double().cpu().numpy()
                    top[start:start + len(lp)] = neural_top_logprob(rows).double().cpu().numpy()
                    if entries:
                        lo = start - slots[w.doc]
                        a_, t_ = agreement_features(rows, entries[w.doc], lo, lo + len(lp))
                        agree["neural_infgram_agreement"][start:start + len(lp)] = a_
                        agree["neural_logprob_infgram_top"][start:start + len(lp)] = t_
                bar.update(sum(w.end - w.first for w in batch))
    finally:
        bar.close()
        model.train(was_training)
    feats = {k: np.concatenate([f[k] for f in inf_f]) if inf_f else np.zeros(0) for k in _INFGRAM_FEATURES
             if not inf_f or k in inf_f[0]}
    return TokenScores.from_arrays(neural, np.concatenate(inf_p) if inf_p else [],
                                   np.concatenate(inf_s) if inf_s else [], np.concatenate(inf_n) if inf_n else [],
                                   np.concatenate(doc_of) if doc_of else [], neural_entropy=entropy,
                                   neural_top_logprob=top, **feats, **agree, **_level_arrays(inf_f, levels))


def _level_arrays(per_doc: list, levels: tuple) -> dict:
    """The TokenScores level fields from per-document feature dicts (none without levels)."""
    if not levels:
        return {}
    cat = lambda k: np.concatenate([f[k] for f in per_doc]) if per_doc else np.zeros((0, len(levels)))  # noqa: E731
    return dict(level_names=levels, level_prob=cat("level_prob"), level_count=cat("level_count"))


def with_index(scores: TokenScores, tokenizer: Any, data: Any, index: InfiniGramIndex, *,
               text_column: str = "text", infgram_distributions: Optional[bool] = None,
               levels: Any = None) -> TokenScores:
    """The same tokens with P_∞ (and the ∞-gram context features) from another index; the neural
    side is reused, not recomputed. The features that compare the model's distribution with the
    ∞-gram's (neural_infgram_agreement, neural_logprob_infgram_top) are dropped: they need the
    model pass, so a mixing model that uses them needs `token_scores` with the new index.

    `data` must be what `scores` were computed on. Useful for datastore ablations.
    `infgram_distributions`: compute num_distinct / top_infgram_prob (default: when `scores`
    have them). `levels`: the shorter suffixes' estimates to compute (default: the levels `scores`
    have; see `token_scores`).

    Example:
        >>> small = with_index(res.scores, tok, texts, InfiniGramIndex.open("quarter"))  # doctest: +SKIP
        >>> interpolate(small, 0.5, 0.2).perplexity                                    # doctest: +SKIP
    """
    if tokenizer is not None:
        check_tokenizer(index, tokenizer)
    if infgram_distributions is None:
        infgram_distributions = scores.num_distinct is not None
    levels = check_levels(levels) if levels else scores.level_names
    docs = _documents(data, tokenizer, text_column)
    per_doc = np.bincount(scores.doc_index, minlength=len(docs))
    if len(per_doc) != len(docs):
        raise ValueError(f"scores cover {len(per_doc)} documents but data has {len(docs)}")
    p, sp, en, fs = [], [], [], []
    for d, k in zip(docs, per_doc.tolist()):
        if k > len(d):
            raise ValueError("scores do not match data: a document has more scored tokens than tokens")
        if k:
            a, b, c, f = infgram_features(index, d, distributions=infgram_distributions,
                                          levels=levels)  # full prefix = context
            p.append(a[len(d) - k:]); sp.append(b[len(d) - k:]); en.append(c[len(d) - k:])
            fs.append({name: v[len(d) - k:] for name, v in f.items()})
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dtype=dt))
    feats = {name: cat([f[name] for f in fs], np.float64) for name in (fs[0] if fs else ()) if name in _INFGRAM_FEATURES}
    # the model's own features carry over; the agreement ones compare its distribution with the
    # old index's and would be stale (recomputing them needs the model pass: token_scores)
    neural = {name: v for name, v in scores.features().items()
              if name.startswith("neural_") and name not in _AGREEMENT_FEATURES}
    return TokenScores.from_arrays(scores.neural_logprob, cat(p, np.float64), cat(sp, bool), cat(en, np.int64),
                                   scores.doc_index, **neural, **feats, **_level_arrays(fs, levels))


def perplexity(model: Any, tokenizer: Any, data: Any, index: Any, *, window: Optional[int] = None,
               stride: Optional[int] = None, lambda_sparse: float = DEFAULT_LAMBDA_SPARSE,
               lambda_dense: float = DEFAULT_LAMBDA_DENSE, batch_size: int = 8, text_column: str = "text",
               add_bos: bool = True, progress: bool = True, mixing: Any = None) -> PerplexityResult:
    """Perplexity of `model` alone and interpolated with the ∞-gram of `index` on `data`.

    Args:
        model: a causal LM (`transformers` model returning `.logits`), on any device.
        tokenizer: its tokenizer (checked against the index's vocabulary fingerprint); may be None
            when `data` is pre-tokenized.
        data: a `datasets.Dataset` with a text column, a list of strings, or a list of token-id
            sequences; one document each.
        index: the ∞-gram index (built with the same tokenizer), or its directory.
        window, stride: the sliding window (tokens) and how far it moves; overlap is context only.
            Defaults: min(1024, the model's context) and half the window.
        lambda_sparse, lambda_dense: mixture weights for sparse / other ∞-gram estimates
            (tune them on validation data with `tune_lambdas(result)`).
        batch_size: windows per forward pass.
        add_bos: condition each document's first token on BOS (or EOS); see the module docstring.
        progress: show a tqdm bar (tokens).
        mixing: a learned mixing model (`MixingModel`, its file or dict, from `fit_mixing`) that
            chooses λ per token from the context's features; the two λs are then unused.

    Returns a `PerplexityResult`; its `.scores` cache every token's probabilities, so
    `interpolate(result.scores, ...)` and `tune_lambdas(result)` never rerun the model.

    Example:
        >>> res = perplexity(model, tok, ["def f(x):\\n    return x\\n"], index)   # doctest: +SKIP
        >>> print(res.summary())                                                 # doctest: +SKIP
    """
    check_lambda(lambda_sparse, "lambda_sparse")  # fail before the model runs, not after
    check_lambda(lambda_dense, "lambda_dense")
    if mixing is not None:
        from ..lm.learned_mixing import as_mixing
        mixing = as_mixing(mixing)
    scores = token_scores(model, tokenizer, data, index, window=window, stride=stride, batch_size=batch_size,
                          text_column=text_column, add_bos=add_bos, progress=progress,
                          agreement=mixing is not None and uses_agreement(mixing.features),
                          levels=mixing.levels if mixing is not None else None)
    return interpolate(scores, lambda_sparse, lambda_dense, mixing=mixing)
