"""Cutting the tokenized documents into shards, and building one shard as a Ray task.

The driver sees only each block's document lengths (8 bytes per document); the token ids go
from the tokenizing tasks to the shard-building task through the object store, never through
the driver. A shard takes documents in order until the next would overflow `shard_cap` tokens
(separators included), as the single-machine build's ShardFeeder does.

A shard task writes into a hidden `.shard_NNNNN.part-<random>` directory inside the build
directory and renames it to `shard_NNNNN` only when every file is written, so a worker killed
mid-write leaves at most a part directory, which the retry ignores and the driver removes
before publishing.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .._core import format as fmt
from ..build.shard_writer import ShardWriter

PART_PREFIX = "."
PART_INFIX = ".part-"


def block_lengths(block: Any, width: int) -> np.ndarray:
    """Token counts of a block's documents (its `ids` column holds `width`-byte ids)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = block.column("ids") if isinstance(block, pa.Table) else pa.array(block["ids"])
    return (pc.binary_length(col).to_numpy(zero_copy_only=False).astype(np.int64) // width)


@dataclass
class ShardPlan:
    """One shard: rows [start, end) of each of its blocks, in order."""

    number: int
    blocks: List[Any] = field(default_factory=list)         # object refs
    ranges: List[Tuple[int, int]] = field(default_factory=list)
    total_len: int = 0                                       # tokens + one separator per document
    num_docs: int = 0


class ShardPlanner:
    """Greedy cut of a stream of blocks (with their document lengths) into shards of at most
    `shard_cap` tokens; `add` returns the shards it completed."""

    def __init__(self, shard_cap: int):
        self.shard_cap = shard_cap
        self.current = ShardPlan(0)
        self.docs_seen = 0

    def add(self, block_ref: Any, lengths: np.ndarray) -> List[ShardPlan]:
        done: List[ShardPlan] = []
        sizes = lengths.astype(np.int64) + 1
        start, n = 0, len(sizes)
        while start < n:
            room = self.shard_cap - self.current.total_len
            fit = int(np.searchsorted(np.cumsum(sizes[start:]), room, side="right"))
            if fit == 0:
                if sizes[start] > self.shard_cap:
                    raise ValueError(f"document {self.docs_seen + start} of {int(lengths[start])} tokens does not fit "
                                     f"a shard of {self.shard_cap} tokens; raise shard_tokens")
                done.append(self._next())
                continue
            self.current.blocks.append(block_ref)
            self.current.ranges.append((start, start + fit))
            self.current.total_len += int(sizes[start:start + fit].sum())
            self.current.num_docs += fit
            start += fit
        self.docs_seen += n
        return done

    def _next(self) -> ShardPlan:
        full, self.current = self.current, ShardPlan(self.current.number + 1)
        return full

    def finish(self) -> Optional[ShardPlan]:
        """The last shard (None when it is empty and an earlier one exists)."""
        if self.current.num_docs or self.current.number == 0:
            return self.current
        return None


def _kill_once(marker: str) -> None:
    """Fault injection for the tests: the first attempt to get here dies as a killed worker."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def build_shard(build_dir: str, number: int, width: int, vocab_size: int, ntd_cache_min_cost: int,
                has_meta: bool, ranges: Sequence[Tuple[int, int]], kill_once: Optional[str], *blocks: Any) -> dict:
    """Build shard `number` of the documents rows ranges[i] of blocks[i] into build_dir (the
    body of the Ray task); returns its meta.json entry."""
    import pyarrow as pa

    started, began, cpu0 = time.perf_counter(), time.time(), _cpu_seconds()
    name = fmt.shard_dir_name(number)
    part = Path(build_dir) / f"{PART_PREFIX}{name}{PART_INFIX}{uuid.uuid4().hex[:8]}"
    writer = ShardWriter(part, width, vocab_size, ntd_cache_min_cost=ntd_cache_min_cost)
    metawriter = fmt.DocMetaWriter(part) if has_meta else None
    dtype = np.dtype(f"<u{width}")
    try:
        for block, (lo, hi) in zip(blocks, ranges):
            table = block if isinstance(block, pa.Table) else pa.table(block)
            rows = table.slice(lo, hi - lo)
            tokens, offsets = _ids_and_offsets(rows.column("ids").combine_chunks(), dtype)
            writer.add(tokens, offsets)
            if metawriter is not None:
                import json
                for m in rows.column("meta").to_pylist():
                    metawriter.add(None if m is None else json.loads(m))
        if metawriter is not None:
            metawriter.close()
        entry = writer.finish()
        if kill_once is not None:
            _kill_once(kill_once)
        final = Path(build_dir) / name
        if final.exists():  # (an earlier attempt got as far as renaming, then died)
            shutil.rmtree(final)
        os.replace(part, final)
    except BaseException:
        if metawriter is not None:
            metawriter.abort()
        shutil.rmtree(part, ignore_errors=True)
        raise
    entry["dir"] = name
    entry["_stats"] = {"shard": number, "seconds": round(time.perf_counter() - started, 3),
                       "cpu_seconds": round(_cpu_seconds() - cpu0, 3), "began": round(began, 3),
                       "ended": round(time.time(), 3), "peak_rss_bytes": peak_rss(),
                       "node": _node_ip(), "pid": os.getpid()}
    return entry


def peak_rss() -> int:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited across exec;
    a Ray worker runs many tasks, so this is the worker's peak so far)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu_seconds() -> float:
    """CPU time of this process, all threads (a Ray worker runs one task at a time: the delta
    over a task is the task's)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # (outside Ray)
        return "?"


def _ids_and_offsets(col: Any, dtype: np.dtype) -> Tuple[np.ndarray, np.ndarray]:
    """An Arrow (large_)binary column of ids -> (ids, document offsets), without copying the ids."""
    import pyarrow as pa

    _, off_buf, data = col.buffers()
    off_type = np.int64 if pa.types.is_large_binary(col.type) else np.int32
    offsets = np.frombuffer(off_buf, dtype=off_type)[col.offset:col.offset + len(col) + 1].astype(np.int64)
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    tokens = raw[offsets[0]:offsets[-1]].view(dtype)
    return tokens, (offsets - offsets[0]) // dtype.itemsize


def remove_parts(build_dir: Path) -> None:
    """Part directories left by killed attempts (none is in use once every task has returned)."""
    for p in Path(build_dir).iterdir():
        if p.name.startswith(PART_PREFIX + "shard_") and PART_INFIX in p.name:
            shutil.rmtree(p, ignore_errors=True)
