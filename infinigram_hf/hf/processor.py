"""InfiniGramLogitsProcessor: mix the ∞-gram into generate() (paper §2 "Interpolating with neural LMs").

For every row of the batch the processor returns

    log(λ · P_∞(· | context) + (1 − λ) · softmax(scores))

with λ = lambda_sparse when the ∞-gram estimate is sparse (one possible next token) and
lambda_dense otherwise (paper §5). The output is a row of log-probabilities, so it works whatever
`scores` are (raw logits under greedy/sampling, log-softmaxed under beam search), and the warpers
that run after user processors (temperature, top-k, top-p) act on the mixture.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from .._core.args import INT32_MAX, int_arg, opt_int_arg
from .._core.ids import to_numpy
from ..index import InfiniGramIndex
from ..index.batch import suffix_probs_batch
from ..index.infinigram_index import as_index
from ..index.row_states import RowStates
from .._core.tokenization import check_tokenizer
from ..lm.context import context_start, context_starts
from ..lm.copy_guard import CopyStep, forbidden_next
from ..lm.learned_mixing import first_max_per_row, level_inputs, uses_agreement
from .level_cache import LevelDistributions
from .mixing import (HOST_COLUMNS, DeviceMixing, HostMixing, host_features, mix_sparse, mix_sparse_learned, mix_step,
                     mix_step_covers, mix_sum)
from ..lm.orders import gather_suffixes, level_lengths
from ..lm.mixture import DEFAULT_LAMBDA_DENSE, DEFAULT_LAMBDA_SPARSE, check_lambda, check_model_vocab

try:  # subclass transformers' base class when available (it only documents the call signature)
    from transformers import LogitsProcessor as _Base
except ImportError:  # pragma: no cover
    _Base = object


class InfiniGramLogitsProcessor(_Base):
    """A `transformers.LogitsProcessor` that interpolates the model with an ∞-gram index.

    Args:
        index: an `InfiniGramIndex` (or its directory) built with the model's tokenizer.
        lambda_sparse: weight of P_∞ when its estimate is sparse (a single possible next token).
        lambda_dense: weight of P_∞ otherwise.
        min_effective_n: leave the neural distribution untouched (only log-softmaxed) when the
            matched context is shorter than `min_effective_n - 1` tokens. The paper warns that a
            short-context ∞-gram can derail open-ended generation; e.g. 8 mixes only long matches.
        tokenizer: the model's tokenizer; checked against the index's fingerprint
            (TokenizerMismatchError) and the source of the pad and EOS ids when not given.
        pad_token_id: left-padding id stripped from the start of each row before querying.
        eos_token_id: the id that end-of-document maps to (the index reports it under its
            separator id); it also acts as a document boundary inside a context. Defaults to the
            tokenizer's, then to the one recorded in the index. Without one, the end-of-document
            mass is dropped and P_∞ renormalized over real tokens.
        model_vocab_size: the model's output size, to check it early (it is checked on the first
            call anyway). Rows of a larger model vocabulary get no ∞-gram mass.
        cache_size: next-token distributions kept per matched suffix (LRU). Contexts are cached
            by their token ids (`SuffixCache`): each generated token costs about one binary search,
            and draft prefixes that assisted decoding later rejects cannot corrupt anything.
        max_copy_len: the memorisation guard (None = off): a next token that would make the end
            of the context a verbatim corpus copy longer than this many tokens is masked to -inf
            (`infinigram_hf.lm.copy_guard`). Works with any λ (λ = 0: the guard alone). When every
            token of a row would be masked, the row falls back to the model's own distribution
            under the mask; if the model too has nothing left, the row is left unguarded.
        copy_report: record a `CopyStep` per call in `self.copy_steps` (per row: the longest
            verbatim copy ending at the last token, and the number of tokens masked).
        mixing: a learned mixing model (`MixingModel`, its JSON file or dict; see `fit_mixing`)
            choosing λ per row from the context's features, instead of lambda_sparse/lambda_dense.
            λ is computed on the scores' device; rows below min_effective_n still get λ = 0.
            A model mixing several orders (fit with `levels`) also queries each row's shorter
            suffixes and mixes every component at once on the host: for a local index, the
            default features and CPU scores, one C call per step (`mix_step`);
            otherwise one batched query per step (another index's answers kept by suffix, up to
            cache_size of them: `LevelDistributions`).

    Ids in a context that the index cannot hold (≥ its vocab size) are document boundaries too:
    no indexed n-gram spans them. Tokens masked to -inf by earlier processors stay masked.

    Example:
        >>> proc = InfiniGramLogitsProcessor(index, lambda_sparse=0.5, lambda_dense=0.2,
        ...                                  tokenizer=tok)                       # doctest: +SKIP
        >>> model.generate(**tok("def main(", return_tensors="pt"),
        ...                logits_processor=LogitsProcessorList([proc]))          # doctest: +SKIP
    """

    def __init__(self, index: InfiniGramIndex, lambda_sparse: float = DEFAULT_LAMBDA_SPARSE,
                 lambda_dense: float = DEFAULT_LAMBDA_DENSE, *, min_effective_n: int = 1,
                 tokenizer: Any = None, pad_token_id: Optional[int] = None,
                 eos_token_id: Optional[int] = None, model_vocab_size: Optional[int] = None,
                 cache_size: int = 4096, max_copy_len: Optional[int] = None, copy_report: bool = False,
                 mixing: Any = None):
        index = as_index(index)
        if (max_copy_len is not None or copy_report) and not isinstance(index, InfiniGramIndex):
            raise ValueError("max_copy_len and copy_report need a local InfiniGramIndex (not a RemoteIndex)")
        self.index = index
        self.lambda_sparse = check_lambda(lambda_sparse, "lambda_sparse")
        self.lambda_dense = check_lambda(lambda_dense, "lambda_dense")
        if mixing is not None:
            from ..lm.learned_mixing import as_mixing
            mixing = as_mixing(mixing)
        self.mixing = mixing
        self._device_mixing = DeviceMixing(mixing) if mixing is not None else None
        self._host_mixing = HostMixing(mixing) if mixing is not None else None
        self.min_effective_n = int_arg("min_effective_n", min_effective_n, 1)
        if tokenizer is not None:
            check_tokenizer(index, tokenizer)
        if pad_token_id is None and tokenizer is not None:
            pad_token_id = getattr(tokenizer, "pad_token_id", None)
        if eos_token_id is None and tokenizer is not None:
            eos_token_id = getattr(tokenizer, "eos_token_id", None)
        if eos_token_id is None:
            eos_token_id = index.eos_token_id
        self.pad_token_id = _opt_id(pad_token_id, "pad_token_id")
        self.eos_token_id = _opt_id(eos_token_id, "eos_token_id")
        if model_vocab_size is not None:
            check_model_vocab(index, int_arg("model_vocab_size", model_vocab_size, 1))
        self._checked_width = -1
        self.max_copy_len = opt_int_arg("max_copy_len", max_copy_len, 1, INT32_MAX, "no guard")
        self.copy_report = bool(copy_report)
        self.copy_steps: list = []
        self._last_rows: Optional[np.ndarray] = None  # only for the right-padding check (see _check_not_right_padded)
        # Keyed by context (never by call order): rejected drafts and reordered beams stay correct.
        self._cache = index.suffix_cache(max_distributions=int_arg("cache_size", cache_size, 0))
        # the rows that grew by one token: one C call per step (a local index's decoding states),
        # or one request sending states and tails (a RemoteIndex: RemoteRowStates); a
        # DifferenceIndex answers through its cache
        self._rows = RowStates(self._cache) if isinstance(index, InfiniGramIndex) else \
            getattr(self._cache, "row_states", lambda: None)()
        # On the CPU the whole step after the ∞-gram query is one C call (mix_step): the two λs, and
        # a learned model over the features it computes (its levels read from a local index).
        self._local = isinstance(index, InfiniGramIndex)
        self._fused = mix_step_covers(self._host_mixing, self._local)
        # a model mixing several orders: its levels' distributions, ready to mix (a level's
        # suffix always occurs: its fixed-n distribution); a local index answers a step's levels
        # in one C run, others by batched query, their answers kept by suffix
        if isinstance(index, InfiniGramIndex):
            self._levels = LevelDistributions(
                lambda rows, which, lengths: suffix_probs_batch(index, rows, which, lengths,
                                                                eos_token_id=self.eos_token_id),
                max_items=0)
        else:
            self._levels = LevelDistributions(self._level_probs, max_items=cache_size)

    # ------------------------------------------------------------ contexts

    def context_starts(self, rows: np.ndarray) -> np.ndarray:
        """Where each row's ∞-gram context starts: after the leading padding, and after the last
        document boundary (EOS, or an id the index cannot hold). rows: (batch, length) ids."""
        return context_starts(rows, self.index.vocab_size, eos_token_id=self.eos_token_id,
                              pad_token_id=self.pad_token_id)

    def context(self, ids: Any) -> np.ndarray:
        """The part of one row of ids that the ∞-gram conditions on (see `context_starts`)."""
        row = np.asarray(to_numpy(ids), dtype=np.int64)
        return row[context_start(row, self.index.vocab_size, eos_token_id=self.eos_token_id,
                                 pad_token_id=self.pad_token_id):]

    def _distributions(self, rows_np: np.ndarray):
        """Every row's ∞-gram distribution, one batched, cached query."""
        starts = self.context_starts(rows_np)
        if self._rows is not None:
            d = self._rows.ntd(rows_np, starts)
        else:
            d = self._cache.ntd_batch(rows_np, lengths=rows_np.shape[1] - starts, padding_side="left")
        self._copy_len = d.suffix_len  # the longest verbatim copy ending each row (for the report)
        return d

    def _query(self, rows_np: np.ndarray, width: int):
        """`_distributions` and their (row, token, count) entries and total per row (`_entries`)."""
        d = self._distributions(rows_np)
        return (d,) + self._entries(d, len(rows_np), width)

    def _p_inf(self, rows_np: np.ndarray, width: int, logp: torch.Tensor):
        """Sparse P_∞ of every row as (row, token, log(λ·P_∞)) entries plus λ per row (0 = the row
        stays neural): λ from the two weights, or from the learned mixing model on the host (one
        C call for the ∞-gram features, `HostMixing.native_lambdas`; numpy for the others)."""
        d, row_of, tok, cnt, total = self._query(rows_np, width)
        active = self._active(d, total)
        if self.mixing is None:
            lam = np.where(active, np.where(d.sparse, self.lambda_sparse, self.lambda_dense), 0.0)
        else:
            lam = self._host_mixing.native_lambdas(d, active)
            if lam is None:
                entries = None
                if uses_agreement(self.mixing.features):
                    entries = (row_of, tok, np.log(cnt / np.maximum(total[row_of], 1.0)))
                lam = self._host_mixing.lambdas(self._host_columns(d, len(rows_np)), active, logp, entries)
        sel = (lam > 0)[row_of]
        row_of, tok, cnt = row_of[sel], tok[sel], cnt[sel]
        with np.errstate(divide="ignore"):
            logv = np.log(lam[row_of]) + np.log(cnt / total[row_of])
        return row_of, tok, logv, lam

    def _active(self, d: Any, total: np.ndarray) -> np.ndarray:
        """The rows that mix at all: an estimate (total after end-of-document handling), from a
        context long enough for min_effective_n."""
        return (d.suffix_len + 1 >= self.min_effective_n) & (total > 0)

    def _entries(self, d: Any, n: int, width: int):
        """(row, token, count) entries and the total per row of n rows' distributions `d`, with
        end-of-document moved to the EOS id (merged where EOS is also a real token), or dropped
        and the rows renormalized when there is no EOS id."""
        row_of = d.rows
        tok = d.token_ids.astype(np.int64)
        cnt = d.counts.astype(np.float64)
        total = d.total.astype(np.float64)
        is_sep = tok == self.index.separator_id
        if self.eos_token_id is None:  # nowhere to put end-of-document: drop it, renormalize
            if is_sep.any():
                total = total - np.bincount(row_of[is_sep], weights=cnt[is_sep], minlength=n)
                keep = ~is_sep
                tok, cnt, row_of = tok[keep], cnt[keep], row_of[keep]
        elif is_sep.any():
            tok[is_sep] = self.eos_token_id
            if (d.token_ids == self.eos_token_id).any():  # EOS also a real token somewhere: merge
                key, inv = np.unique(row_of * width + tok, return_inverse=True)
                cnt = np.bincount(inv.reshape(-1), weights=cnt)
                row_of, tok = key // width, key % width
        return row_of, tok, cnt, total

    def _level_probs(self, rows: np.ndarray, which: np.ndarray, lengths: np.ndarray) -> tuple:
        """`suffix_probs_batch` for any index: the suffixes gathered, its batched fixed-n query,
        then `_entries`."""
        # each suffix ends where its row does in the flattened batch
        values, offsets = gather_suffixes(rows.reshape(-1), (which + 1) * rows.shape[1], lengths)
        d = self.index.infgram_ntd_batch(values, offsets=offsets, infinite=False)
        item, tok, cnt, total = self._entries(d, len(which), self._checked_width)
        return item, tok, cnt / np.maximum(total, 1.0)[item], total

    def _mix_orders(self, rows_np: np.ndarray, logp: torch.Tensor, width: int) -> torch.Tensor:
        """Mix a model over several orders into logp: the longest match's distribution and each
        level's (the same rows' shorter suffixes, `LevelDistributions`), weights from the mixing
        model on the host (one C call for the default features, `HostMixing.native_weights`).
        Every component's weighted entries go to `mix_sum`, which adds them up per (row, token)
        and mixes them with the model's share (one C call on the CPU). (On the CPU with a local
        index and the default features, `mix_step` does all of it in one C call instead.)"""
        n = len(rows_np)
        d, row_of, tok, cnt, total = self._query(rows_np, width)
        active = self._active(d, total)
        p_inf = cnt / np.maximum(total[row_of], 1.0)
        lengths = level_lengths(self.mixing.levels, d.suffix_len)
        level_count = np.zeros(lengths.shape)
        pair_row, pair_level = np.nonzero(active[:, None] & (lengths >= 0))  # every (row, level) that exists
        if len(pair_row):  # all of them in one query
            pair, tok_m, p_m, level_count[pair_row, pair_level] = self._levels.gather(
                rows_np, pair_row, lengths[pair_row, pair_level])
        w = self._host_mixing.native_weights(d, level_count, active)
        if w is None:  # features the C call does not compute: numpy
            entries = (row_of, tok, np.log(np.maximum(p_inf, 1e-300))) if uses_agreement(self.mixing.features) else None
            x = host_features(self.mixing.features, self._host_columns(d, n), logp, entries)
            w = self.mixing.weights_from_inputs(np.concatenate([x, level_inputs(level_count)], axis=1), active,
                                                level_count > 0)
        if not len(pair_row):  # no level anywhere
            return mix_sum(logp, row_of, tok, w[row_of, 1] * p_inf, w[:, 0])
        r_m = pair_row[pair]
        rows = np.concatenate([row_of, r_m])
        toks = np.concatenate([tok, tok_m])
        vals = np.concatenate([w[row_of, 1] * p_inf, w[r_m, 2 + pair_level[pair]] * p_m])
        return mix_sum(logp, rows, toks, vals, w[:, 0])

    def _host_columns(self, d: Any, n: int) -> np.ndarray:
        """The rows' HOST_COLUMNS features.
        Written for few rows (a decoding step at batch 1): plain slicing and column writes, not
        np.diff / np.stack, whose wrappers cost more than the arithmetic here."""
        offsets = d.offsets
        width = offsets[1:] - offsets[:-1]
        host = np.empty((n, len(HOST_COLUMNS)))
        host[:, 0] = d.suffix_len
        host[:, 0] += 1.0
        host[:, 1] = d.sparse
        host[:, 2] = d.total
        host[:, 3] = width
        host[:, 4] = 0.0
        host[:, 5] = -1.0  # top_token: none
        has = width > 0
        every = bool(width.min() > 0) if n else True
        if len(d.counts):  # the largest count of each non-empty row, over the distribution as the index gives it
            top = np.maximum.reduceat(d.counts, offsets[:-1] if every else offsets[:-1][has])
            if every:
                np.divide(top, np.maximum(host[:, 2], 1.0), out=host[:, 4])
            else:
                host[has, 4] = top / np.maximum(host[has, 2], 1.0)
            if "neural_logprob_infgram_top" in self.mixing.features:  # (only when used: it costs)
                # its token (the first of equal counts, in the index's token-id order), as the model's id
                ids = d.token_ids[first_max_per_row(d.counts, offsets)[has]].astype(np.int64)
                ids[ids == self.index.separator_id] = -1 if self.eos_token_id is None else self.eos_token_id
                host[has, 5] = ids
        return host

    def _learned_entries(self, rows_np: np.ndarray, width: int):
        """For learned mixing: (row, token, ln P_∞) entries, the rows' HOST_COLUMNS features and
        which rows mix (λ itself is computed on the scores' device)."""
        d, row_of, tok, cnt, total = self._query(rows_np, width)
        host, active = self._host_columns(d, len(rows_np)), self._active(d, total)
        sel = active[row_of]
        row_of, tok, cnt = row_of[sel], tok[sel], cnt[sel]
        return row_of, tok, np.log(cnt / total[row_of]), host, active

    def _check_not_right_padded(self, rows: np.ndarray) -> None:
        """Refuse a right-padded prompt (its rows would be scored after their padding: identical,
        wrong rows). Checked when a generation starts -- the first call, or ids no longer than at
        the previous call that do not continue its rows (a rejected draft keeps their prefix):
        some rows then end with pad_token_id while others do not -- transformers' own test for
        right padding, which it only warns about. Later in a generation, finished rows
        legitimately end with padding, so later calls are not checked."""
        width = rows.shape[1]
        last = self._last_rows
        starting = last is None or (width <= last.shape[1] and (
            last.shape[0] != rows.shape[0] or not np.array_equal(rows[:, :width - 1], last[:, :width - 1])))
        self._last_rows = rows.copy()
        if not starting or self.pad_token_id is None or rows.shape[0] < 2 or width < 2:
            return
        ends_pad = rows[:, -1] == self.pad_token_id
        has_content = (rows != self.pad_token_id).any(axis=1)
        if (ends_pad & has_content).any() and not ends_pad.all():
            raise ValueError(
                "input_ids look right-padded (some rows end with pad_token_id "
                f"{self.pad_token_id}, others do not): decoder-only generation needs left padding, "
                "e.g. tokenizer.padding_side = 'left' before tokenizer(texts, padding=True)")

    # ------------------------------------------------------------ the call

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.ndim != 2 or scores.ndim != 2 or input_ids.shape[0] != scores.shape[0]:
            raise ValueError(f"input_ids must be (batch, length) and scores (batch, vocab) with the same batch, got "
                             f"input_ids {tuple(input_ids.shape)} and scores {tuple(scores.shape)}")
        width = scores.shape[-1]
        if width != self._checked_width:
            check_model_vocab(self.index, width)
            if self.eos_token_id is not None and self.eos_token_id >= width:
                raise ValueError(f"eos_token_id {self.eos_token_id} is outside the model's {width} scores")
            self._checked_width = width
        logp = torch.log_softmax(scores.float(), dim=-1)
        rows_np = input_ids.detach().cpu().numpy()
        self._check_not_right_padded(rows_np)
        if self._fused and logp.device.type == "cpu":  # (logp: float32 rows, as mix_step needs)
            mix_step(logp, self._distributions(rows_np), separator=self.index.separator_id,
                     eos_token_id=self.eos_token_id, min_effective_n=self.min_effective_n,
                     lambdas=(self.lambda_sparse, self.lambda_dense), host=self._host_mixing,
                     index=self.index if self._local else None, rows=rows_np)
            return self._guard(rows_np, scores, logp).to(scores.dtype)
        if self.mixing is not None and self.mixing.levels:
            return self._guard(rows_np, scores, self._mix_orders(rows_np, logp, width)).to(scores.dtype)
        if self.mixing is not None and logp.device.type != "cpu":  # λ where the scores are: no device-to-host copy
            row_of, tok, log_p_inf, host, active = self._learned_entries(rows_np, width)
            if len(row_of):
                mix_sparse_learned(logp, row_of, tok, log_p_inf, host, active, self._device_mixing)
            return self._guard(rows_np, scores, logp).to(scores.dtype)
        row_of, tok, logv, lam = self._p_inf(rows_np, width, logp)
        if not len(row_of):
            return self._guard(rows_np, scores, logp).to(scores.dtype)
        # log((1-λ)·p_nn + λ·p_∞) at P_∞'s support only (a few entries, the full vocabulary only
        # for the unigram), never a dense P_∞ row; on the scores' device, one copy (mixing.py).
        mix_sparse(logp, row_of, tok, logv, lam)
        return self._guard(rows_np, scores, logp).to(scores.dtype)

    def _guard(self, rows_np: np.ndarray, scores: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
        """The memorisation guard and the copy report (see max_copy_len, copy_report)."""
        masked = np.zeros(len(rows_np), dtype=np.int64)
        if self.max_copy_len is not None:
            r, t = forbidden_next(self.index, rows_np, self.context_starts(rows_np), self.max_copy_len)
            if len(r):
                masked = np.bincount(r, minlength=len(rows_np))
                ri, ti = torch.from_numpy(r).to(logp.device), torch.from_numpy(t).to(logp.device)
                before = logp.clone()
                logp[ri, ti] = float("-inf")
                for i in torch.nonzero(torch.isneginf(logp).all(dim=-1)).flatten().tolist():
                    own = torch.log_softmax(scores[i].float(), dim=-1)  # P_∞ had only copies left
                    own[ti[ri == i]] = float("-inf")
                    logp[i] = before[i] if torch.isneginf(own).all() else own
        if self.copy_report:
            self.copy_steps.append(CopyStep(np.asarray(self._copy_len, dtype=np.int64).copy(), masked))
        return logp


def _opt_id(value: Any, name: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):  # generation configs may hold several EOS ids
        if not value:
            return None
        value = value[0]
    if hasattr(value, "item"):
        value = value.item()
    return int_arg(name, value, 0)
