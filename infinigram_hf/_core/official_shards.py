"""Our shard files from the shards of an official infini-gram index, one `ShardWriter` per
official shard: the loop that the sidecar builder (index/official_sidecar.py) and `convert`
(build/convert.py) share. It lives here, in the lowest layer, because the index layer may not
import the build."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, TypeVar

from . import format as fmt
from .official import OfficialLayout
from .progress import progress_bar
from .shard_writer import ShardWriter

# The dtype of an official token file, by its token width (bytes per id).
TOKEN_DTYPES = {1: "<u1", 2: "<u2", 4: "<u4"}

T = TypeVar("T")


def write_shards_from_official(layout: OfficialLayout, official_width: int, tmp: Path,
                               fill: Callable[[ShardWriter, Path, str, Any], None],
                               then: Callable[[list[tuple[Path, dict]]], T], *, token_width: int, vocab_size: int,
                               ntd_cache_min_cost: int, progress: bool, desc: str,
                               drop: tuple[str, ...] = ()) -> T:
    """Write one of our shards per official shard into the build directory `tmp` (made by the
    caller), then complete the build.

    Official shard i (suffix ``layout.suffixes[i]``) becomes ``tmp/shard_0000i``: a ShardWriter
    (token_width, vocab_size, ntd_cache_min_cost) to which ``fill(writer, shard_dir, suffix, bar)``
    hands the shard's documents, advancing the progress bar (official tokens, separators
    included) as it goes; the writer is then finished and the files named in `drop` are deleted
    from the shard at once (what the caller does not keep). Finally ``then(shards)`` completes
    the build (meta, publishing) from the (shard_dir, finish() meta entry) pairs in shard order;
    its result is returned. `tmp` is removed if anything fails, the bar closed either way.
    """
    total = sum(size // official_width for size in layout.tokenized_sizes)
    bar = progress_bar(total=total, unit="tok", unit_scale=True, disable=not progress, desc=desc, dynamic_ncols=True)
    try:
        shards = []
        for i, suffix in enumerate(layout.suffixes):
            shard_dir = tmp / fmt.shard_dir_name(i)
            writer = ShardWriter(shard_dir, token_width, vocab_size, ntd_cache_min_cost=ntd_cache_min_cost)
            fill(writer, shard_dir, suffix, bar)
            shards.append((shard_dir, writer.finish()))
            for name in drop:
                (shard_dir / name).unlink()
        return then(shards)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        bar.close()
