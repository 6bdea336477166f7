"""KV-cache surgery for the speculative decoding loop (transformers' DynamicCache).

The loop keeps one cache column per token fed to the model, plus a boolean mask of which
columns a row may attend to. After verification, rejected drafts are dropped: columns past the
longest accepted run are cropped (`DynamicCache.crop`); a row that accepted less than the others
keeps masked-out "holes" there, which `compact` squeezes out once they waste enough room.
Tree drafts verify nodes in tree order, so the accepted path is first moved to the front of the
step's columns (`keep_paths`).

Example:
    >>> mask = torch.tensor([[False, True, True], [False, False, True]])      # doctest: +SKIP
    >>> mask = drop_leading(cache, mask)   # the first column is padding in every row: gone
"""
from __future__ import annotations

from typing import Any

import torch


def _layers(cache: Any) -> list:
    layers = getattr(cache, "layers", None)
    if layers is None or not all(hasattr(lay, "keys") and hasattr(lay, "values") for lay in layers):
        raise TypeError(f"speculative decoding needs a DynamicCache with per-layer keys/values, got {type(cache).__name__}")
    return [lay for lay in layers if getattr(lay, "is_initialized", True) and lay.keys is not None and lay.keys.numel()]


def cache_len(cache: Any) -> int:
    return int(cache.get_seq_length())


def crop(cache: Any, n_remove: int) -> None:
    """Drop the last n_remove columns."""
    if n_remove > 0:
        cache.crop(-n_remove)


def keep_paths(cache: Any, start: int, index: torch.Tensor) -> None:
    """Columns start + index[b, j] move to start + j for every row b (index: (batch, k) int64,
    within the columns after start); columns after start + k are dropped."""
    k = index.shape[1]
    for lay in _layers(cache):
        for name in ("keys", "values"):
            t = getattr(lay, name)
            tail = t[:, :, start:, :]
            idx = index.to(t.device)[:, None, :, None].expand(t.shape[0], t.shape[1], k, t.shape[3])
            setattr(lay, name, torch.cat([t[:, :, :start, :], tail.gather(2, idx)], dim=2))


def drop_leading(cache: Any, mask: torch.Tensor) -> torch.Tensor:
    """Remove leading columns that no row attends to (views, no copy); returns the new mask."""
    if mask.shape[1] == 0:
        return mask
    used = mask.any(dim=0)
    first = int(used.to(torch.int8).argmax()) if bool(used.any()) else mask.shape[1]
    if first == 0:
        return mask
    for lay in _layers(cache):
        lay.keys = lay.keys[:, :, first:, :]
        lay.values = lay.values[:, :, first:, :]
    return mask[:, first:]


def compact(cache: Any, mask: torch.Tensor, min_waste: float = 0.25, min_cols: int = 32) -> torch.Tensor:
    """Squeeze out masked columns (each row's attended columns, right-aligned) once more than
    min_waste of the cache is masked; returns the new mask (unchanged when not worth it)."""
    rows, width = mask.shape
    if width < min_cols:
        return mask
    counts = mask.sum(dim=1)
    new_width = int(counts.max())
    if rows * width - int(counts.sum()) <= min_waste * rows * width:
        return mask
    # Row b's attended columns, in order, land in the last counts[b] columns of new_width.
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :new_width]  # attended first
    shift = new_width - counts  # left padding per row
    j = torch.arange(new_width, device=mask.device)[None, :]
    src_pos = (j - shift[:, None]).clamp(min=0)
    index = order.gather(1, src_pos)
    new_mask = j >= shift[:, None]
    for lay in _layers(cache):
        for name in ("keys", "values"):
            t = getattr(lay, name)
            idx = index.to(t.device)[:, None, :, None].expand(t.shape[0], t.shape[1], new_width, t.shape[3])
            setattr(lay, name, t.gather(2, idx))
    return new_mask
