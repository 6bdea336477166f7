"""Opening an index never reads a file outside its directory.

An index may come from someone else (a download, an archive). Its meta.json can only name shard
directories ``shard_NNNNN`` (format.read_meta), and the files opened to read it are opened inside
the index directory without following links at all (``index_files.py``, ``native/src/files.c``).
This module adds a walk that refuses a symbolic link anywhere inside the index that resolves
outside of it (or cannot be resolved) -- e.g. ``tokenizer/vocab.json -> ~/.netrc``, which the CLI
would otherwise load -- with a message that says what to do. The walk alone would not be enough:
a link swapped in after it is checked is caught by the opens, which never follow one. The index
directory itself may be a link (the path the user gave is theirs).

A snapshot folder of huggingface_hub's cache is made of links into the repository's blob store:
there a link of exactly the cache's shape (``../../blobs/<hash>``, index_files.HUB_BLOB_LINK)
that resolves into that repository's blobs/ is accepted too.

Example:
    >>> check_contained(Path("my_index"))   # doctest: +SKIP
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import IndexFormatError
from .index_files import HUB_BLOB_LINK, hub_snapshot


def check_contained(index_dir: Path) -> None:
    """Raise IndexFormatError naming the first link inside index_dir that leads outside it (or
    that cannot be resolved: a loop, or one that vanished while being resolved)."""
    index_dir = Path(index_dir)
    if not index_dir.is_dir():
        return  # read_meta says what is wrong with it
    root = index_dir.resolve()
    repo = hub_snapshot(index_dir)
    blobs = repo / "blobs" if repo is not None else None
    for dirpath, dirnames, filenames in os.walk(index_dir):  # links to directories are not entered
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                continue
            try:
                target = path.resolve(strict=True)
            except (OSError, RuntimeError) as exc:  # (a loop is RuntimeError before Python 3.13)
                raise IndexFormatError(f"{path}: a symbolic link that cannot be resolved ({exc.__class__.__name__}); "
                                       f"an index's files are never opened through links") from None
            if blobs is not None and target.parent == blobs and HUB_BLOB_LINK.fullmatch(os.readlink(path)):
                continue  # the Hub cache's own link into its blob store
            if target != root and root not in target.parents:
                raise IndexFormatError(
                    f"{path}: a symbolic link to {target}, outside the index {index_dir}; refusing to follow it "
                    f"(copy the files into the index, e.g. huggingface_hub.snapshot_download(..., local_dir=...))")
