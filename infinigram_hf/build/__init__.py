"""Building an index: sources (datasets, files, strings, token arrays), tokenization in
batches and processes, the shard writer (the C suffix-array build), atomic publishing.

Example:
    >>> from infinigram_hf.build import build_index                     # doctest: +SKIP
    >>> index = build_index(["hello world"], "my_index")                # doctest: +SKIP
"""
from .pipeline import build_index

__all__ = ["build_index"]
