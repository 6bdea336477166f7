"""Brute-force references for attribution and creativity (the rules of
native/include/infinigram_trace.h, searched from scratch over a conftest.Reference)."""
from __future__ import annotations

from typing import Optional

from conftest import Reference


def ref_match_len(ref: Reference, x: list) -> list:
    out = []
    for l in range(len(x)):
        k = 0
        while l + k < len(x) and ref.count(x[l:l + k + 1]):
            k += 1
        out.append(k)
    return out


def ref_attribute(ref: Reference, x: list, min_len: int, max_count: Optional[int], delims: set,
                  ws: Optional[set]) -> list:
    """(l, r, count) of every span, by the rules of infinigram_trace.h, searched from scratch."""
    n, last_r, out = len(x), 0, []
    match = ref_match_len(ref, x)
    for l in range(n):
        if ws is not None and x[l] not in ws:
            continue
        L = match[l]
        for pos in range(L - 1):
            if x[l + pos] in delims:
                L = pos + 1
                break
        if ws is not None:
            while L > 0 and not (l + L == n or x[l + L] in ws):
                L -= 1
        if L < min_len:
            continue
        c = ref.count(x[l:l + L])
        if max_count is not None and c > max_count:
            continue
        if l + L > last_r:
            out.append((l, l + L, c))
            last_r = l + L
    return out


def ref_maximal(ref: Reference, x: list) -> list:
    """Every span of x that occurs and stops occurring when grown by one token either way."""
    n = len(x)
    return [(l, r, ref.count(x[l:r])) for l in range(n) for r in range(l + 1, n + 1)
            if ref.count(x[l:r]) and (l == 0 or not ref.count(x[l - 1:r])) and (r == n or not ref.count(x[l:r + 1]))]
