"""The processor's mixture on the scores' device: log((1-λ)·p_nn + λ·P_∞) for sparse P_∞ entries.

Everything the host computed (the entries' rows, tokens and log(λ·P_∞), and log(1-λ) per row)
travels in one int64 buffer: one host-to-device copy per step, whatever the batch size; the
rest runs where the scores are.
"""
from __future__ import annotations

import numpy as np
import torch


def mix_sparse(logp: torch.Tensor, row_of: np.ndarray, tok: np.ndarray, logv: np.ndarray,
               lam: np.ndarray) -> torch.Tensor:
    """Mix in place into logp (batch, vocab) log-probabilities, float: every row shifted by
    log(1-λ_row) (λ = 0: unchanged), then logaddexp with log(λ·P_∞) at the entries
    (row_of[k], tok[k]); tokens already at -inf (forbidden by an earlier processor) stay so."""
    n, m = logp.shape[0], len(row_of)
    with np.errstate(divide="ignore"):  # λ = 1: the neural part vanishes
        shift = np.log1p(-np.asarray(lam, dtype=np.float64))
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
