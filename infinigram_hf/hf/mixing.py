"""The processor's mixture on the scores' device: log((1-λ)·p_nn + λ·P_∞) for sparse P_∞ entries.

Everything the host computed (the entries' rows, tokens and log(λ·P_∞), and log(1-λ) per row)
travels in one int64 buffer: one host-to-device copy per step, whatever the batch size; the
rest runs where the scores are.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from .._core.native import check, err_buffer, ffi, lib, ptr
from ..lm.learned_mixing import AGREEMENT_FLOOR


def mix_sparse(logp: torch.Tensor, row_of: np.ndarray, tok: np.ndarray, logv: np.ndarray,
               lam: np.ndarray) -> torch.Tensor:
    """Mix in place into logp (batch, vocab) log-probabilities, float: every row shifted by
    log(1-λ_row) (λ = 0: unchanged), then logaddexp with log(λ·P_∞) at the entries
    (row_of[k], tok[k]); tokens already at -inf (forbidden by an earlier processor) stay so.
    On the CPU (float32, contiguous: what the processor makes) one C call does it
    (ig_mix_sparse_f32: torch's gather and scatter of the entries cost more than the
    arithmetic); elsewhere torch ops on the scores' device (`_mix_sparse_torch`)."""
    with np.errstate(divide="ignore"):  # λ = 1: the neural part vanishes
        shift = np.log1p(-np.asarray(lam, dtype=np.float64))
    rows = _c_rows(logp)
    if rows is None:
        return _mix_sparse_torch(logp, row_of, tok, logv, shift)
    row_of, tok, logv = _c_entries("mix_sparse", logp, row_of, tok, logv, shift)
    err = err_buffer()
    check(lib.ig_mix_sparse_f32(rows, logp.shape[0], logp.shape[1], len(row_of), ptr(row_of, "int64_t"),
                                ptr(tok, "int64_t"), ptr(logv, "double"), ptr(shift, "double"), err, len(err)), err)
    return logp


def mix_sum(logp: torch.Tensor, row_of: np.ndarray, tok: np.ndarray, val: np.ndarray,
            w_model: np.ndarray) -> torch.Tensor:
    """Mix several components in place into logp (batch, vocab) log-probabilities, float: cell
    (r, t) becomes log(w_model[r]·p_nn + Σ val over the entries at (r, t)) -- entries may repeat a
    cell, one per component, and their masses add up; -inf stays -inf. val: the components'
    weighted probabilities. One C call on the CPU (ig_mix_sum_f32); elsewhere the masses are summed
    per cell (bincount) and mixed in with `mix_sparse`, λ = 1 − w_model."""
    n, width = logp.shape
    w_model = np.ascontiguousarray(w_model, dtype=np.float64)  # (a column of the weights: C reads it flat)
    rows = _c_rows(logp)
    if rows is None:
        mass = np.bincount(np.asarray(row_of) * width + np.asarray(tok), weights=val, minlength=n * width)
        at = np.flatnonzero(mass)
        return mix_sparse(logp, at // width, at % width, np.log(mass[at]), 1.0 - w_model)
    row_of, tok, val = _c_entries("mix_sum", logp, row_of, tok, val, w_model)
    err = err_buffer()
    check(lib.ig_mix_sum_f32(rows, n, width, len(row_of), ptr(row_of, "int64_t"), ptr(tok, "int64_t"),
                             ptr(val, "double"), ptr(w_model, "double"), err, len(err)), err)
    return logp


def _c_rows(logp: torch.Tensor):
    """A float pointer to logp's rows when the C mixing calls can write them in place (float32,
    contiguous, 2-D, on the CPU: what the processor makes); None otherwise (torch ops then)."""
    if logp.device.type == "cpu" and logp.dtype == torch.float32 and logp.is_contiguous() and logp.ndim == 2:
        return ffi.cast("float *", logp.data_ptr())
    return None


def _c_entries(name: str, logp: torch.Tensor, row_of, tok, values, per_row: np.ndarray) -> tuple:
    """The entries as the arrays the C calls read (int64 rows and tokens, float64 values; no copy
    when they already are); ValueError when the lengths do not match (C reads what it is told)."""
    row_of, tok = np.ascontiguousarray(row_of, dtype=np.int64), np.ascontiguousarray(tok, dtype=np.int64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    if not len(row_of) == len(tok) == len(values) or per_row.shape != (logp.shape[0],):
        raise ValueError(f"{name}: entries and rows of different lengths")
    return row_of, tok, values


def _mix_sparse_torch(logp: torch.Tensor, row_of: np.ndarray, tok: np.ndarray, logv: np.ndarray,
                      shift: np.ndarray) -> torch.Tensor:
    """`mix_sparse` in torch ops, shift = log(1-λ) per row."""
    n, m = logp.shape[0], len(row_of)
    packed = np.empty(3 * m + n, dtype=np.int64)
    packed[:m] = row_of
    packed[m:2 * m] = tok
    packed[2 * m:3 * m] = np.asarray(logv, dtype=np.float64).view(np.int64)
    packed[3 * m:] = shift.view(np.int64)
    dev = logp.device
    buf = torch.from_numpy(packed).to(dev, non_blocking=dev.type != "cpu")  # the one copy
    r_idx, c_idx = buf[:m], buf[m:2 * m]
    logv_t = buf[2 * m:3 * m].view(torch.float64).to(logp.dtype)
    shift_t = buf[3 * m:].view(torch.float64).to(logp.dtype)
    neural = logp[r_idx, c_idx]
    logp += shift_t[:, None]  # (rows with λ = 0 add 0: unchanged, and no index to copy over)
    mixed = torch.logaddexp(neural + shift_t[r_idx], logv_t)
    logp[r_idx, c_idx] = torch.where(torch.isneginf(neural), neural, mixed)
    return logp


# ------------------------------------------------------------------ learned mixing (issue 20)

# Host-side ∞-gram features of each row, in this column order (see learned_mixing.FEATURES);
# top_token: the model's id of the ∞-gram's most likely continuation (-1: none).
HOST_COLUMNS = ("effective_n", "sparse", "context_count", "num_distinct", "top_infgram_prob", "top_token")
LOG_FLOOR = math.log(AGREEMENT_FLOOR)


def neural_entropy(logp: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each row of log-probabilities (-inf entries contribute 0): -Σ p·ln p with
    ln p clamped to the dtype's lowest finite value, so p = 0 gives 0 (torch.special.entr does the
    same in one op but took 2.8x as long on a 32k-token row on this CPU)."""
    return -(logp.exp() * logp.clamp_min(torch.finfo(logp.dtype).min)).sum(dim=-1)


def neural_top_logprob(logp: torch.Tensor) -> torch.Tensor:
    """ln max_y P_neural(y) of each row (amax: max(dim=) also finds the argmax, 10x the time)."""
    return logp.amax(dim=-1)


def _agreement(logp: torch.Tensor, entries, dtype) -> torch.Tensor:
    """ln Σ_y P_∞(y)·P_neural(y) per row from the (row, token, ln P_∞) entries (0: no entries)."""
    r_idx, c_idx, lpi = entries
    n = logp.shape[0]
    mass = torch.zeros(n, dtype=dtype, device=logp.device).index_add_(
        0, r_idx, torch.exp(logp[r_idx, c_idx].to(dtype) + lpi.to(dtype)))
    has = torch.zeros(n, dtype=torch.bool, device=logp.device)
    has[r_idx] = True
    return torch.where(has, torch.log(mass.clamp_min(AGREEMENT_FLOOR)), torch.zeros((), dtype=dtype, device=logp.device))


def _neural_at_top(logp: torch.Tensor, top_token: torch.Tensor, dtype) -> torch.Tensor:
    """ln P_neural of each row's top ∞-gram continuation (0 where it has none)."""
    ok = top_token >= 0
    rows = torch.arange(logp.shape[0], device=logp.device)
    lp = logp[rows, top_token.clamp_min(0).long()].to(dtype).clamp_min(LOG_FLOOR)
    return torch.where(ok, lp, torch.zeros((), dtype=dtype, device=logp.device))


def feature_columns(names, host: torch.Tensor, logp: torch.Tensor, entries=None) -> torch.Tensor:
    """(rows, len(names)) raw features, the torch twin of learned_mixing.raw_to_feature: host =
    the HOST_COLUMNS of every row, logp = the model's log-probabilities (rows, vocab), entries =
    the rows' P_∞ as (row, token, ln P_∞) tensors (for log_agreement)."""
    col = {c: host[:, i] for i, c in enumerate(HOST_COLUMNS)}
    out = []
    for name in names:
        if name == "sparse":
            out.append(col["sparse"])
        elif name == "log_effective_n":
            out.append(torch.log(col["effective_n"].clamp_min(1.0)))
        elif name == "log_context_count":
            out.append(torch.log1p(col["context_count"].clamp_min(0.0)))
        elif name == "log_num_distinct":
            out.append(torch.log1p(col["num_distinct"].clamp_min(0.0)))
        elif name == "top_infgram_prob":
            out.append(col["top_infgram_prob"])
        elif name == "neural_entropy":
            out.append(neural_entropy(logp).to(host.dtype))
        elif name == "neural_top_prob":
            out.append(neural_top_logprob(logp).to(host.dtype).exp())
        elif name == "log_agreement":
            out.append(_agreement(logp, entries, host.dtype))
        elif name == "neural_logprob_infgram_top":
            out.append(_neural_at_top(logp, col["top_token"], host.dtype))
        else:  # pragma: no cover (names are checked when the model is made)
            raise ValueError(f"unknown mixing feature {name!r}")
    return torch.stack(out, dim=1)


class DeviceMixing:
    """A MixingModel's weights as tensors, kept per (device, dtype): λ of a batch of rows with no
    host round trip."""

    def __init__(self, model) -> None:
        self.model = model
        self._cache: dict = {}

    def _weights(self, device: torch.device, dtype: torch.dtype):
        key = (str(device), dtype)
        if key not in self._cache:
            m = self.model
            t = lambda a: torch.as_tensor(a, dtype=dtype).to(device)  # noqa: E731
            self._cache[key] = (t(m.mean), t(m.std), [(t(w), t(b)) for w, b in m.layers])
        return self._cache[key]

    def lambdas(self, x: torch.Tensor) -> torch.Tensor:
        mean, std, layers = self._weights(x.device, x.dtype)
        h = (x - mean) / std
        for i, (w, b) in enumerate(layers):
            h = h @ w.T + b
            if i < len(layers) - 1:
                h = torch.tanh(h)
        return torch.sigmoid(h[:, 0])


def mix_sparse_learned(logp: torch.Tensor, row_of: np.ndarray, tok: np.ndarray, log_p_inf: np.ndarray,
                       host: np.ndarray, active: np.ndarray, mixing: DeviceMixing) -> torch.Tensor:
    """`mix_sparse` with λ per row from a learned mixing model, computed where logp is: host =
    (rows, len(HOST_COLUMNS)) float64 ∞-gram features, active = rows that mix at all (λ = 0
    elsewhere), log_p_inf = ln P_∞ at the entries (row_of[k], tok[k]). Returns logp, mixed in place."""
    n, m = logp.shape[0], len(row_of)
    k = host.shape[1]
    packed = np.empty(3 * m + n * k + n, dtype=np.int64)
    packed[:m] = row_of
    packed[m:2 * m] = tok
    packed[2 * m:3 * m] = np.asarray(log_p_inf, dtype=np.float64).view(np.int64)
    packed[3 * m:3 * m + n * k] = np.ascontiguousarray(host, dtype=np.float64).reshape(-1).view(np.int64)
    packed[3 * m + n * k:] = active
    dev = logp.device
    buf = torch.from_numpy(packed).to(dev, non_blocking=dev.type != "cpu")  # the one copy
    # float64 where the device has it (λ then equals the numpy reference to rounding)
    fdt = torch.float32 if dev.type == "mps" else torch.float64
    r_idx, c_idx = buf[:m], buf[m:2 * m]
    lpi = buf[2 * m:3 * m].view(torch.float64).to(fdt)
    host_t = buf[3 * m:3 * m + n * k].view(torch.float64).to(fdt).reshape(n, k)
    act = buf[3 * m + n * k:].bool()
    x = feature_columns(mixing.model.features, host_t, logp, (r_idx, c_idx, lpi))
    lam = torch.where(act, mixing.lambdas(x), torch.zeros((), dtype=fdt, device=dev))
    shift = torch.log1p(-lam)
    with torch.no_grad():
        loglam = torch.log(lam)
    neural = logp[r_idx, c_idx]
    logp += shift.to(logp.dtype)[:, None]
    mixed = torch.logaddexp(neural.to(fdt) + shift[r_idx], loglam[r_idx] + lpi).to(logp.dtype)
    logp[r_idx, c_idx] = torch.where(torch.isneginf(neural), neural, mixed)
    return logp


# Features that are plain transforms of one host column: name -> (column, transform, its code in
# the C core's ig_mixing_lambdas, native/include/infinigram_mixing.h). The one table both host
# paths read (host_features in numpy, HostMixing's C call).
_HOST_ONLY = {"sparse": (1, None, lib.IG_MIX_SPARSE), "log_effective_n": (0, "log1", lib.IG_MIX_LOG_EFFECTIVE_N),
              "log_context_count": (2, "log1p", lib.IG_MIX_LOG_CONTEXT_COUNT),
              "log_num_distinct": (3, "log1p", lib.IG_MIX_LOG_NUM_DISTINCT),
              "top_infgram_prob": (4, None, lib.IG_MIX_TOP_PROB)}


def _host_transform(x: np.ndarray, kind) -> np.ndarray:
    if kind == "log1":
        return np.log(np.maximum(x, 1.0))
    if kind == "log1p":
        return np.log1p(np.maximum(x, 0.0))
    return x


def host_features(names, host: np.ndarray, logp: torch.Tensor, entries=None) -> np.ndarray:
    """(rows, len(names)) raw features in numpy, the host twin of `feature_columns`: the neural
    features are read off logp with one torch reduction each (a copy to the host when logp is on
    a device); entries = the rows' P_∞ as (row, token, ln P_∞) numpy arrays (for log_agreement)."""
    x = np.empty((len(host), len(names)))
    for j, name in enumerate(names):
        if name in _HOST_ONLY:
            col, kind, _ = _HOST_ONLY[name]
            x[:, j] = _host_transform(host[:, col], kind)
        elif name == "neural_entropy":
            x[:, j] = neural_entropy(logp).double().cpu().numpy()
        elif name == "neural_top_prob":
            x[:, j] = np.exp(neural_top_logprob(logp).double().cpu().numpy())
        elif name == "log_agreement":
            row_of, tok, lpi = entries
            at = logp[torch.from_numpy(row_of).to(logp.device), torch.from_numpy(tok).to(logp.device)]
            at = at.double().cpu().numpy()
            mass = np.bincount(row_of, weights=np.exp(at + lpi), minlength=len(host))
            has = np.bincount(row_of, minlength=len(host)) > 0
            x[:, j] = np.where(has, np.log(np.maximum(mass, AGREEMENT_FLOOR)), 0.0)
        elif name == "neural_logprob_infgram_top":
            tt = host[:, HOST_COLUMNS.index("top_token")].astype(np.int64)
            at = logp[torch.arange(len(host), device=logp.device),
                      torch.from_numpy(np.maximum(tt, 0)).to(logp.device)].double().cpu().numpy()
            x[:, j] = np.where(tt >= 0, np.maximum(at, LOG_FLOOR), 0.0)
    return x


def learned_lambdas_host(model, host: np.ndarray, active: np.ndarray, logp: torch.Tensor, entries=None) -> np.ndarray:
    """λ per row in numpy, for scores on the CPU (there the host is the scores' device, and numpy
    on a (rows, features) array costs microseconds where a chain of small torch ops costs a
    millisecond); arguments as for `host_features`."""
    z = model.logits(host_features(model.features, host, logp, entries))
    lam = 0.5 * (1.0 + np.tanh(0.5 * z))  # σ(z) without overflow
    return np.where(active, lam, 0.0)


class HostMixing:
    """λ of a batch of rows on the host for one model, prepared once. A model over host-column
    features only (the default ones) gets one C call that reads the rows' distributions
    (`native_lambdas`, its standardisation folded into the first layer: at batch 1 the numpy
    dispatch of the features and layers was most of the learned processor's cost over the two
    λs); the others go through `learned_lambdas_host` (`lambdas`)."""

    def __init__(self, model) -> None:
        self.model = model
        self.plan = None  # the layers with the standardisation folded in, for the C call
        if all(f in _HOST_ONLY for f in model.features):
            (w, b), rest = model.layers[0], model.layers[1:]
            w = w / model.std  # standardisation folded in: w·((x − mean)/std) + b = (w/std)·x + b − (w/std)·mean
            self.plan = [(w, b - w @ model.mean)] + rest
        self._net = self._native_net() if self.plan is not None else None
        # the levels as ig_mix_step_f32 reads them: -1 = "L-1", -2 = "L/2", k = "k"
        self._level_rules = np.array([{"L-1": -1, "L/2": -2}.get(name) or int(name) for name in model.levels],
                                     dtype=np.int64)

    def _native_net(self):
        """The prepared plan as the C core's ig_mixing_net (its arrays kept alive with it)."""
        layers = self.plan
        codes = np.array([_HOST_ONLY[f][2] for f in self.model.features], dtype=np.int32)
        widths = np.array([len(codes) + len(self.model.levels)] + [w.shape[0] for w, _ in layers], dtype=np.int64)
        params = np.concatenate([np.concatenate([w.reshape(-1), b]) for w, b in layers]).astype(np.float64)
        net = ffi.new("ig_mixing_net *")
        net.n_inputs, net.n_layers = len(codes), len(layers)
        net.codes, net.widths, net.params = ptr(codes, "int32_t"), ptr(widths, "int64_t"), ptr(params, "double")
        return net, (codes, widths, params)

    def native_lambdas(self, d, active: np.ndarray):
        """λ of the rows of next-token distributions `d` (BatchNextTokenDistributions; 0 where
        not `active`) in one C call, equal to `lambdas` of their HOST_COLUMNS to rounding; None
        when the model needs what the call does not compute (the model's distribution, levels)."""
        if self._net is None or self.model.levels:
            return None
        n = len(active)
        out = np.empty(n)
        rows = _c_distributions(d, n)
        active = np.ascontiguousarray(active, dtype=bool)
        err = err_buffer()
        check(lib.ig_mixing_lambdas(self._net[0], n, *rows, ptr(active, "uint8_t"), ptr(out, "double"), err,
                                    len(err)), err)
        return out

    def native_weights(self, d, level_count: np.ndarray, active: np.ndarray):
        """A model mixing several orders: (rows, 2 + levels) weights of the rows of next-token
        distributions `d`, whose levels' suffixes occur `level_count` (rows, levels) times (0: the
        level does not exist), in one C call (ig_mixing_weights), equal to `weights_from_inputs`
        to rounding; rows not `active` get the model alone. None when the model's features are
        not all computed by the call (or it has no levels)."""
        if self._net is None or not self.model.levels:
            return None
        n, levels = len(active), len(self.model.levels)
        level_count = np.ascontiguousarray(level_count, dtype=np.float64)
        if level_count.shape != (n, levels):
            raise ValueError(f"level counts of shape {level_count.shape} for {n} rows and {levels} levels")
        active = np.ascontiguousarray(active, dtype=bool)
        out = np.empty((n, 2 + levels))
        rows = _c_distributions(d, n)
        err = err_buffer()
        # (the levels' inputs ln(1 + count) and which components a row has: computed in C, as
        # level_inputs and available_components write them)
        check(lib.ig_mixing_weights(self._net[0], n, *rows, ptr(active, "uint8_t"), levels,
                                    ptr(level_count, "double"), ptr(out, "double"), err, len(err)), err)
        return out

    def lambdas(self, host: np.ndarray, active: np.ndarray, logp: torch.Tensor, entries=None) -> np.ndarray:
        """λ from the rows' HOST_COLUMNS and the model's log-probabilities (`learned_lambdas_host`)."""
        return learned_lambdas_host(self.model, host, active, logp, entries)


def mix_step_covers(host: Optional[HostMixing], local_index: bool) -> bool:
    """Whether `mix_step` computes a processor's mixture: the two λs (no `host`), or a learned
    model over the features the C call computes whose levels, if any, come from a local index."""
    return host is None or (host._net is not None and (not host.model.levels or local_index))


def mix_step(logp: torch.Tensor, d, *, separator: int, eos_token_id: Optional[int], min_effective_n: int,
             lambdas: tuple = (0.0, 0.0), host: Optional[HostMixing] = None, index=None,
             rows: Optional[np.ndarray] = None) -> torch.Tensor:
    """A decoding step's whole mixture in one C call (ig_mix_step_f32), into logp in place: the
    two λs (`lambdas`, no `host`), or a learned model's (`host`: its net; a model mixing several
    orders also reads its levels from the local `index` and the step's ids `rows`). d: the rows'
    ∞-gram distributions as the index gives them (end-of-document under `separator`). The same
    arithmetic as the processor's numpy path, without its dozens of small numpy and cffi calls.
    For float32 rows on the CPU and what `mix_step_covers` (ValueError otherwise)."""
    out = _c_rows(logp)
    if out is None or not mix_step_covers(host, index is not None):
        raise ValueError("mix_step: needs float32 rows on the CPU, and a model whose features the C call computes "
                         "(levels: a local index)")
    net, rules = (ffi.NULL, _NO_LEVELS) if host is None else (host._net[0], host._level_rules)
    n = logp.shape[0]
    offsets, counts, n_counts, total, suffix_len, sparse = _c_distributions(d, n)
    tokens = np.ascontiguousarray(d.token_ids, dtype=np.uint32)
    if len(tokens) != n_counts:
        raise ValueError(f"distributions with {len(tokens)} tokens and {n_counts} counts")
    eos = -1 if eos_token_id is None else int(eos_token_id)
    err = err_buffer()
    tail = (offsets, ptr(tokens, "uint32_t"), counts, n_counts, total, suffix_len, sparse, int(min_effective_n),
            len(rules), ptr(rules, "int64_t"), int(separator), eos, out, logp.shape[1], err, len(err))
    if len(rules):
        rows = np.ascontiguousarray(rows, dtype=np.int64).reshape(n, -1)
        with index.native_handle() as ix:
            rc = lib.ig_mix_step_f32(ix, net, 0.0, 0.0, ptr(rows, "int64_t"), n, rows.shape[1], *tail)
    else:
        rc = lib.ig_mix_step_f32(ffi.NULL, net, float(lambdas[0]), float(lambdas[1]), ffi.NULL, n, 0, *tail)
    check(rc, err)
    return logp


_NO_LEVELS = np.zeros(0, dtype=np.int64)


def _c_distributions(d, n: int) -> list:
    """The C mixing calls' view of n rows of next-token distributions `d`: offsets, counts, the
    number of entries, totals, suffix lengths and sparsity, as pointers (each keeps its array
    alive; no copy when the dtypes already are, as a local index's results)."""
    arrays = [np.ascontiguousarray(a, dtype=t) for a, t in ((d.offsets, np.int64), (d.counts, np.uint64),
              (d.total, np.uint64), (d.suffix_len, np.int64), (d.sparse, bool))]
    offsets, counts, total, suffix_len, sparse = arrays
    if len(offsets) != n + 1 or len(total) != n or len(suffix_len) != n or len(sparse) != n:
        raise ValueError(f"distributions of {len(total)} rows for {n} rows")
    return [ptr(offsets, "int64_t"), ptr(counts, "uint64_t"), len(counts), ptr(total, "uint64_t"),
            ptr(suffix_len, "int64_t"), ptr(sparse, "uint8_t")]
