"""build_index: corpus -> tokens -> shards -> an index directory, published atomically.

The corpus is streamed in batches; documents collect in the C shard writer until the memory
budget says the shard is full, then its suffix array is built and written. Everything is written
into a temporary sibling directory that is renamed to `out_dir` only when complete, so an
interrupted or failed build leaves nothing at `out_dir` (and its leftovers are cleaned up by the
next build into the same place; _publish.py says what may be replaced and removed).
"""
from __future__ import annotations

import datetime
import decimal
import itertools
import multiprocessing
import os
import re
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Union

import numpy as np

from .._core import format as fmt
from .._core import tokenization as tk
from .ingest import ByteText, ShardFeeder
from .._core.native import lib
from .._core.progress import progress_bar
from .publish import check_out_dir, clean_stale_builds, make_build_dir, publish, resolve_out_dir
from .shard_finisher import ShardFinisher, concurrent_finish_fits
from .shard_writer import ShardWriter
from ..index import InfiniGramIndex
from .sources import Batch, iter_batches, select_split, source_length, source_paths

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


_MAX_SIZE = 1 << 62  # bytes; far above any machine, and still an exact int in meta.json


def parse_size(size: Union[int, str], name: str = "memory_budget") -> int:
    """'4GiB', '512M', 2**30 -> bytes (ASCII digits, at most 2**62)."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, (bool, np.bool_)):
        value = int(size)
    elif isinstance(size, (str, float)) and not isinstance(size, bool):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*", str(size), flags=re.ASCII)
        if not m or m.group(2).lower() not in _UNITS or len(m.group(1)) > 40:
            raise ValueError(f"{name}: cannot parse memory size {str(size)[:60]!r} (e.g. '4GiB', '512MiB')")
        value = int(decimal.Decimal(m.group(1)) * _UNITS[m.group(2).lower()])
    else:
        raise ValueError(f"{name} must be a number of bytes or a size like '4GiB', got {type(size).__name__}")
    if value <= 0:
        raise ValueError(f"{name}: memory size must be positive, got {str(size)[:60]!r}")
    if value > _MAX_SIZE:
        raise ValueError(f"{name}: memory size {str(size)[:60]!r} is too large (at most 2**62 bytes)")
    return value


def _check_count(name: str, value: Any, minimum: int) -> int:
    """An int argument (numpy ints too; not bool, float or str) of at least `minimum`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {str(value)[:40]!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def max_shard_len(memory_budget: int, token_width: int) -> int:
    """Largest shard (tokens + separators) whose build fits the budget."""
    fixed = int(lib.ig_writer_peak_bytes(0, token_width))
    per_token = int(lib.ig_writer_peak_bytes(1 << 20, token_width) - fixed) / (1 << 20)
    n = int((memory_budget - fixed) / per_token)
    if n < 1:
        raise ValueError(f"memory budget of {memory_budget} bytes is too small to build a shard")
    return min(n, int(lib.IG_MAX_SHARD_TOKENS))


# ------------------------------------------------------------------ tokenization

_WORKER_TOKENIZER: Any = None


def build_tokenizer(tokenizer: Any, vocab_size: Optional[int]) -> tuple[Any, int]:
    """The tokenizer a build encodes with (None: the sources are token ids, vocab_size given)
    and the vocabulary size: vocab_size, else the tokenizer's (a vocab_size too small for the
    tokenizer's ids is refused). The one rule of the local and the Ray build."""
    tok = None if tokenizer is None and vocab_size is not None else tk.resolve_tokenizer(tokenizer)
    if tok is not None:
        tok_vocab = tk.tokenizer_vocab_size(tok)
        if vocab_size is not None and vocab_size < tok_vocab:
            raise ValueError(f"vocab_size={vocab_size} is smaller than the tokenizer's {tok_vocab} ids")
        vocab_size = vocab_size or tok_vocab
    return tok, int(vocab_size)


def _worker_init(tok: Any) -> None:
    global _WORKER_TOKENIZER
    # one process per CPU already; and a forked `tokenizers` would warn about its thread pool
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _WORKER_TOKENIZER = tok


def _worker_encode(texts: List[str]) -> List[List[int]]:
    return tk.encode_texts(_WORKER_TOKENIZER, texts)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask: a container's or taskset's share)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # (not Linux)
        return max(1, os.cpu_count() or 1)


def _start_method() -> str:
    """fork on Linux: the workers start in milliseconds and a script without an
    ``if __name__ == "__main__":`` guard works (spawn and forkserver, Python 3.14's default,
    import the script again in every worker, which then builds again). The workers only
    tokenize, so the parent's threads are no concern. Elsewhere (macOS: fork is unsafe there)
    spawn, which needs the guard."""
    return "fork" if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods() \
        else "spawn"


def tokenizer_processes(tok: Any, num_proc: int, n_docs: Optional[int], batch_size: int) -> int:
    """How many processes tokenizing can use: at most one per CPU (warning when num_proc asks for
    more) and per batch, and just this one for the byte tokenizer (a memory copy, which a pool
    could only slow down)."""
    cpus = usable_cpus()
    if num_proc > cpus:
        warnings.warn(f"num_proc={num_proc} is more than the {cpus} CPUs this process can use; using {cpus}",
                      RuntimeWarning, stacklevel=3)
    procs = min(num_proc, cpus)
    if isinstance(tok, tk.ByteTokenizer):
        procs = 1
    if n_docs is not None:
        procs = min(procs, max(1, -(-n_docs // batch_size)))
    return procs


class _Tokenized:
    """Turns text batches into id batches, in this process or in a pool of workers.

    A pool costs seconds to start (every worker imports the tokenizer's libraries, ~40 MB each),
    so it is started only when a second batch of text arrives (tokenizer_processes says how
    large). The byte tokenizer's documents go on as ByteText, encoded piece by piece later."""

    def __init__(self, tok: Any, procs: int):
        self.tok = tok
        self.procs = procs
        self.pool = None

    def _here(self, b: Batch) -> tuple[List[Any], List[Optional[dict]]]:
        if b.ids is not None:
            return b.ids, b.metadata
        if isinstance(self.tok, tk.ByteTokenizer):
            return [ByteText(t) for t in b.texts], b.metadata
        return tk.encode_texts(self.tok, b.texts), b.metadata

    def map(self, batches: Iterator[Batch]) -> Iterator[tuple[List[Any], List[Optional[dict]]]]:
        batches = iter(batches)
        if self.procs <= 1:
            yield from map(self._here, batches)
            return
        first = next(batches, None)
        second = next(batches, None) if first is not None else None
        if second is None:  # one batch: not worth a pool
            if first is not None:
                yield self._here(first)
            return
        ctx = multiprocessing.get_context(_start_method())
        self.pool = ctx.Pool(self.procs, initializer=_worker_init, initargs=(self.tok,))
        # Keep text batches in order while workers tokenize ahead.
        pending: list = []
        for b in itertools.chain((first, second), batches):
            if b.ids is not None:
                pending.append((None, b))
            else:
                pending.append((self.pool.apply_async(_worker_encode, (b.texts,)), b))
            while len(pending) > 2 * self.procs or (pending and pending[0][0] is not None and pending[0][0].ready()):
                res, ready = pending.pop(0)
                yield (ready.ids if res is None else res.get()), ready.metadata
        for res, b in pending:
            yield (b.ids if res is None else res.get()), b.metadata

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None


# ------------------------------------------------------------------ the build


_phase_clock = [0.0]


def _phase(what: str) -> None:
    """With INFINIGRAM_BUILD_TIMING set, print how long the build's phase took (as the C core
    does for the phases of finishing a shard)."""
    now = time.perf_counter()
    if os.environ.get("INFINIGRAM_BUILD_TIMING") and what:
        print(f"infinigram build: {what:<36} {now - _phase_clock[0]:7.2f} s", file=sys.stderr, flush=True)
    _phase_clock[0] = now


def _ids_need_vocab_size(batches: Iterator[Batch]) -> Iterator[Batch]:
    """Token ids without tokenizer= or vocab_size= would be read as bytes (ids < 255): say what
    to pass instead of failing later on the first id above 254."""
    for b in batches:
        if b.ids is not None:
            raise ValueError("the source holds token ids (an input_ids column, or id sequences): pass "
                             "vocab_size= (e.g. len(tokenizer)) or the tokenizer= that made them")
        yield b


def split_flat(flat: Any, offsets: Any) -> list:
    """Documents of one flat 1-D id array cut at `offsets` (views, no copies)."""
    import numpy as np

    ids = np.asarray(flat)
    off = np.asarray(offsets)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"with offsets=, source must be one flat 1-D array of integer ids, got "
                         f"{ids.ndim}-D {ids.dtype}")
    if off.ndim != 1 or len(off) < 1 or not np.issubdtype(off.dtype, np.integer):
        raise ValueError("offsets must be a 1-D integer array of document starts plus the end")
    if off[0] != 0 or off[-1] != len(ids) or (np.diff(off) < 0).any():
        raise ValueError(f"offsets must rise from 0 to len(source) = {len(ids)}, got "
                         f"{off[0]} .. {off[-1]}" + (" (not increasing)" if (np.diff(off) < 0).any() else ""))
    return [ids[a:b] for a, b in zip(off[:-1].tolist(), off[1:].tolist())]


def build_index(
    source: Any,
    out_dir: Union[str, os.PathLike],
    *,
    tokenizer: Any = None,
    vocab_size: Optional[int] = None,
    text_column: str = "text",
    metadata_columns: Sequence[str] = (),
    memory_budget: Union[int, str] = "4GiB",
    max_shard_tokens: Optional[int] = None,
    batch_size: int = 1000,
    num_proc: int = 1,
    overwrite: bool = False,
    save_tokenizer: bool = True,
    progress: bool = True,
    ntd_cache_min_cost: int = 2048,
    split: Optional[str] = None,
    offsets: Any = None,
) -> InfiniGramIndex:
    """Build an ∞-gram index and return it opened.

    Args:
        source: a `datasets.Dataset` / `IterableDataset` (a text column, or `input_ids`), an
            iterable of strings, a path (or list of `Path`s) of .txt files (one document each) or
            .jsonl files (one per line), a directory of them, or pre-tokenized documents
            (sequences / numpy arrays of ints, with `vocab_size=`).
        out_dir: the index directory to create (or an empty directory). Never the current
            directory or one above it, nor a directory that holds the source or lies inside it.
        tokenizer: an HF tokenizer object, a name / local path for `AutoTokenizer`, or None for
            UTF-8 bytes (character-level work).
        vocab_size: for pre-tokenized input without a tokenizer: ids must be < vocab_size.
        metadata_columns: dataset / jsonl columns kept per document (e.g. id, url, source).
        memory_budget: peak memory for building one shard ('4GiB'); a larger corpus is cut into
            several shards whose counts add up at query time.
        max_shard_tokens: cap a shard's size (tokens plus one separator per document) below what
            the budget allows, e.g. to make shards of a fixed size. When two shards fit the
            budget at once, a full shard is finished on a second thread while the next one
            fills (two cores at work; each query then searches every shard).
        num_proc: processes for tokenization (fast tokenizers are already multi-threaded); forked
            on Linux, spawned elsewhere (a script then needs an ``if __name__ == "__main__":`` guard).
        overwrite: replace an existing index at out_dir (only once the new one is complete).
            Only an index is ever replaced: anything else at out_dir (other files, a link) is
            refused with FileExistsError and left as it is.
        save_tokenizer: save an HF tokenizer inside the index (index/tokenizer/) for the CLI.
        progress: show a tqdm progress bar (documents, tokens/s; none when tqdm is not installed).
        split: the split to index when `source` is a `datasets.DatasetDict` (required then).
        offsets: with `source` one flat 1-D array of token ids, where each document starts
            (document i is source[offsets[i]:offsets[i+1]]; len(docs) + 1 entries from 0 to
            len(source)), as the batch queries take them.
        ntd_cache_min_cost: precompute the exact next-token distributions of the 1- to 3-token
            contexts whose walk at query time would take about this many suffix-array probes or
            more (file ntdcache.bin, a few % of the index); 0 turns it off.
    """
    source = select_split(source, split)
    if offsets is not None:
        source = split_flat(source, offsets)
    if vocab_size is not None:
        vocab_size = _check_count("vocab_size", vocab_size, 1)
    if max_shard_tokens is not None:
        max_shard_tokens = _check_count("max_shard_tokens", max_shard_tokens, 1)
    batch_size = _check_count("batch_size", batch_size, 1)
    num_proc = _check_count("num_proc", 1 if num_proc is None else num_proc, 1)
    budget = parse_size(memory_budget)
    out = resolve_out_dir(out_dir)
    check_out_dir(out, overwrite=overwrite, sources=source_paths(source))
    clean_stale_builds(out)  # it may put back an index a killed build had moved aside: check again
    check_out_dir(out, overwrite=overwrite)

    vocab_size_given = vocab_size
    tok, vocab_size = build_tokenizer(tokenizer, vocab_size)
    width = fmt.token_width_for(int(vocab_size))
    shard_cap = max_shard_len(budget, width)
    if max_shard_tokens is not None:
        shard_cap = min(shard_cap, max_shard_tokens)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_build_dir(out)
    tokenized = None
    feeder: Optional[ShardFeeder] = None
    finisher = ShardFinisher(concurrent_finish_fits(budget, shard_cap, width, usable_cpus()))
    started = time.time()
    _phase("")
    bar = progress_bar(total=source_length(source), unit="doc", disable=not progress, desc="indexing", dynamic_ncols=True)
    try:
        shards = finisher.entries
        shards_opened = [0]
        tokens_seen = 0
        has_meta = bool(metadata_columns) or _is_file_source(source)  # files keep their path

        def open_shard() -> tuple[ShardWriter, Optional[fmt.DocMetaWriter]]:
            d = tmp / fmt.shard_dir_name(shards_opened[0])
            shards_opened[0] += 1
            w = ShardWriter(d, width, int(vocab_size), ntd_cache_min_cost=ntd_cache_min_cost)
            return w, (fmt.DocMetaWriter(d) if has_meta else None)

        def close_shard(writer: ShardWriter, metawriter: Optional[fmt.DocMetaWriter], last: bool = False) -> None:
            _phase("documents taken in")
            if metawriter is not None:
                metawriter.close()
            finisher.finish(writer, last)
            _phase("")  # (the C core timed its own phases)

        batches = iter_batches(source, text_column=text_column, metadata_columns=metadata_columns,
                               batch_size=batch_size)
        if tokenizer is None and vocab_size_given is None:
            batches = _ids_need_vocab_size(batches)
        if tok is not None:
            tokenized = _Tokenized(tok, tokenizer_processes(tok, num_proc, source_length(source), batch_size))
            stream = tokenized.map(batches)
        else:
            stream = ((b.ids, b.metadata) for b in batches if b.ids is not None or _reject_text(b))
        feeder = ShardFeeder(open_shard, close_shard, shard_cap, int(vocab_size))
        for seqs, metas in stream:
            tokens_seen += feeder.add(seqs, metas)
            bar.update(len(seqs))
            elapsed = max(time.time() - started, 1e-9)
            bar.set_postfix(tokens=f"{tokens_seen:,}", tok_per_s=f"{tokens_seen / elapsed:,.0f}")
        seqs = metas = stream = None  # the last batch's memory goes before the peak of finishing
        feeder.release()
        if feeder.writer.num_docs or shards_opened[0] == 1:
            close_shard(feeder.writer, feeder.metawriter, last=True)
        else:
            finisher.wait()
        feeder = None
        meta = index_meta(tok, int(vocab_size), width, shards, {
            "memory_budget": budget,
            "max_shard_len": shard_cap,
            "text_column": text_column,
            "metadata_columns": list(metadata_columns),
            "seconds": round(time.time() - started, 3),
        })
        if save_tokenizer and tok is not None and hasattr(tok, "save_pretrained"):
            tok.save_pretrained(str(tmp / "tokenizer"))
        fmt.write_meta(tmp, meta)
        _phase("meta.json, tokenizer")
        publish(tmp, out, overwrite)
        _phase("published")
    except BaseException:
        if feeder is not None and feeder.metawriter is not None:
            feeder.metawriter.abort()
        finisher.abandon()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        bar.close()
        if tokenized is not None:
            tokenized.close()
    return InfiniGramIndex.open(out)


def index_meta(tok: Any, vocab_size: int, width: int, shards: List[dict], build: dict) -> dict:
    """meta.json of an index made of `shards` (their entries in order); `build` says how it was
    built (the creation time and the package version are added). Shared with the distributed build."""
    return {
        "format": fmt.FORMAT_NAME,
        "format_version": fmt.FORMAT_VERSION,
        "tokenizer_name": tk.tokenizer_name(tok) if tok is not None else None,
        "vocab_fingerprint": tk.vocab_fingerprint(tok) if tok is not None else None,
        "eos_token_id": tk.eos_token_id(tok) if tok is not None else None,
        "vocab_size": int(vocab_size),
        "token_width": width,
        "separator_id": fmt.separator_for(width),
        "num_tokens": sum(s["num_tokens"] for s in shards),
        "num_docs": sum(s["num_docs"] for s in shards),
        "shards": shards,
        "build": {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  **build, "infinigram_hf_version": _version()},
    }


def _is_file_source(source: Any) -> bool:
    if isinstance(source, (str, os.PathLike)):
        return True
    return isinstance(source, (list, tuple)) and bool(source) and all(isinstance(s, Path) for s in source)


def _reject_text(batch: Batch) -> bool:
    raise ValueError("text documents need a tokenizer (tokenizer=None means bytes; do not pass vocab_size)")


def _version() -> str:
    from .._version import __version__

    return __version__
