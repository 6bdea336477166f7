"""build_index on a Ray cluster: tokenize in parallel, build shards as tasks, publish once.

    >>> from infinigram_hf.distributed import build_index                    # doctest: +SKIP
    >>> build_index("corpus/*.jsonl", "/shared/my_index", tokenizer="gpt2")   # doctest: +SKIP

The result is an ordinary multi-shard index directory: `InfiniGramIndex.open` reads it as it
reads a single-machine build, and every count, probability and distribution is the same (the
shard cut may differ: counts add up over shards). Documents keep the source's order, so
document ids are the same too.

Storage: `out_dir` must be a path every node sees (NFS, Lustre, a FUSE mount of a bucket...).
Each shard task writes its shard into the hidden build directory next to `out_dir` and renames
it into place when complete; the driver publishes the index (build/publish.py: one rename, with
its crash-recovery journal) only after every shard task returned. For an object store without
rename (S3, GCS), build to node-local or shared scratch this way and upload the published
directory with the store's client, meta.json last: a reader that finds meta.json finds every
shard it names (docs/SCALE.md).
"""
from __future__ import annotations

import os
import shutil
import time
from typing import Any, List, Optional, Sequence, Union

import numpy as np

from .._core import format as fmt
from ..build.pipeline import _check_count, build_tokenizer, index_meta, max_shard_len, parse_size
from ..build.sources import source_paths
from ..build.publish import check_out_dir, clean_stale_builds, make_build_dir, publish, resolve_out_dir
from .._core.progress import progress_bar
from ..index import InfiniGramIndex
from . import reading, shards
from ._ray import connect, quiet_data_context

DEFAULT_SHARD_TOKENS = 1 << 30


def build_index(
    source: Any,
    out_dir: Union[str, os.PathLike],
    *,
    tokenizer: Any = None,
    vocab_size: Optional[int] = None,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    memory_budget: Union[int, str] = "4GiB",
    text_column: str = "text",
    metadata_columns: Sequence[str] = (),
    batch_size: int = 1000,
    address: Optional[str] = None,
    shard_cpus: float = 1,
    data_cpus: Optional[float] = None,
    max_retries: int = 3,
    overwrite: bool = False,
    save_tokenizer: bool = True,
    progress: bool = True,
    ntd_cache_min_cost: int = 2048,
    _kill_once: Optional[tuple] = None,
) -> InfiniGramIndex:
    """Build an ∞-gram index on a Ray cluster and return it opened (see the module docstring).

    Args:
        source: a `ray.data.Dataset` or `datasets` dataset (a text column, or `input_ids`), a
            list of texts, or a path / glob / list of them naming .txt (one document each),
            .jsonl (one per line) or .parquet files (a text column), or directories of them.
        out_dir: the index directory to create, on storage every node of the cluster sees.
        tokenizer: as for `infinigram_hf.build.build_index` (None: UTF-8 bytes). It is resolved
            here and sent to the workers once.
        vocab_size: for pre-tokenized input (`input_ids`) without a tokenizer.
        shard_tokens: target shard size in tokens (separators included); each shard is one
            task. Capped by what `memory_budget` allows one shard task to build.
        memory_budget: peak memory of one shard task ('4GiB'): caps the shard size.
        address: the cluster to use when this process is not connected yet (None: a local
            Ray runtime; "auto" or "HOST:PORT": a running cluster).
        shard_cpus: CPUs Ray reserves for each shard task.
        data_cpus: CPUs Ray Data's reading and tokenizing tasks may hold at once (default: half
            the cluster's, at least 1). Ray Data would otherwise take every CPU until the last
            document is tokenized, and no shard task could start before that.
        max_retries: retries of a shard task whose worker died (its partial files are dropped).
        overwrite, save_tokenizer, ntd_cache_min_cost: as for the single-machine build.
        progress: a tqdm bar of documents, tokens/s and shards done.
    """
    shard_tokens = _check_count("shard_tokens", shard_tokens, 2)
    batch_size = _check_count("batch_size", batch_size, 1)
    max_retries = _check_count("max_retries", max_retries, 0)
    if vocab_size is not None:
        vocab_size = _check_count("vocab_size", vocab_size, 1)
    budget = parse_size(memory_budget)
    out = resolve_out_dir(out_dir)
    paths = reading.expand_sources(source) if reading.is_paths(source) else source_paths(source)
    check_out_dir(out, overwrite=overwrite, sources=paths)
    clean_stale_builds(out)
    check_out_dir(out, overwrite=overwrite)

    tok, vocab_size = build_tokenizer(tokenizer, vocab_size)
    width = fmt.token_width_for(int(vocab_size))
    shard_cap = min(shard_tokens, max_shard_len(budget, width))

    ray = connect(address)
    ctx = quiet_data_context()
    cluster_cpus = float(ray.cluster_resources().get("CPU", 1))
    data_cpus = max(1.0, cluster_cpus // 2) if data_cpus is None else float(data_cpus)
    if not data_cpus > 0:
        raise ValueError(f"data_cpus must be a positive number of CPUs, got {data_cpus!r}")
    limits = ctx.execution_options.resource_limits
    ctx.execution_options.resource_limits = limits.copy(cpu=data_cpus)
    tok_ref = ray.put(tok) if tok is not None else None
    ds = reading.tokenized_dataset(source, tok_ref, dtype=np.dtype(f"<u{width}"), vocab_size=int(vocab_size),
                                   text_column=text_column, metadata_columns=metadata_columns, batch_size=batch_size)
    has_meta = bool(metadata_columns) or reading.has_file_metadata(source)
    # (no CPU reserved: the driver waits on it for every block, and every CPU may be busy)
    lengths_task = ray.remote(num_cpus=0)(shards.block_lengths)
    shard_task = ray.remote(shards.build_shard)
    kill_marker = None
    if _kill_once is not None:  # (tests: (marker file, shard number) whose first attempt dies)
        kill_marker, kill_shard = str(_kill_once[0]), int(_kill_once[1])

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_build_dir(out)
    started = time.time()

    bar = progress_bar(total=_length(source), unit="doc", disable=not progress, desc="indexing (ray)", dynamic_ncols=True)
    pending: List[Any] = []
    try:
        planner = shards.ShardPlanner(shard_cap)
        submitted: List[Any] = []
        tokens = [0]
        done = [0]

        def submit(plan: shards.ShardPlan) -> None:
            opts = dict(name=f"infinigram-shard-{plan.number:05d}", num_cpus=shard_cpus, max_retries=max_retries,
                        scheduling_strategy="SPREAD")
            marker = kill_marker if kill_marker is not None and plan.number == kill_shard else None
            ref = shard_task.options(**opts).remote(str(tmp), plan.number, width, int(vocab_size), ntd_cache_min_cost,
                                                    has_meta, plan.ranges, marker, *plan.blocks)
            submitted.append(ref)
            pending.append(ref)

        def show() -> None:
            ready, _ = ray.wait(pending, num_returns=len(pending), timeout=0) if pending else ([], [])
            for r in ready:
                pending.remove(r)
                done[0] += 1
            elapsed = max(time.time() - started, 1e-9)
            bar.set_postfix(tokens=f"{tokens[0]:,}", tok_per_s=f"{tokens[0] / elapsed:,.0f}",
                            shards=f"{done[0]}/{len(submitted)}")

        for bundle in ds.iter_internal_ref_bundles():
            for block_ref in _block_refs(bundle):
                lengths = ray.get(lengths_task.remote(block_ref, width))
                for plan in planner.add(block_ref, lengths):
                    submit(plan)
                tokens[0] += int(lengths.sum())
                bar.update(len(lengths))
                show()
        read_seconds = time.time() - started  # (the input stream ended: every document tokenized)
        last = planner.finish()
        if last is not None:
            submit(last)
        while pending:
            ray.wait(pending, num_returns=1)
            show()
        try:
            entries = ray.get(submitted)
        except ray.exceptions.RayTaskError as exc:  # a shard's own error, as it was raised: nothing is published
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, BaseException) else exc) from None
        stats = [e.pop("_stats") for e in entries]
        shards.remove_parts(tmp)
        meta = index_meta(tok, int(vocab_size), width, entries, {
            "memory_budget": budget, "max_shard_len": shard_cap, "text_column": text_column,
            "metadata_columns": list(metadata_columns), "seconds": round(time.time() - started, 3),
            "ray": {"shard_tokens": shard_tokens, "nodes": len([n for n in ray.nodes() if n.get("Alive")]),
                    "started": round(started, 3), "read_seconds": round(read_seconds, 3), "shard_stats": stats},
        })
        if save_tokenizer and tok is not None and hasattr(tok, "save_pretrained"):
            tok.save_pretrained(str(tmp / "tokenizer"))
        fmt.write_meta(tmp, meta)
        publish(tmp, out, overwrite)
    except BaseException:
        for ref in pending:  # (tasks still running would write into a directory being removed)
            ray.cancel(ref, force=True)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        bar.close()
        ctx.execution_options.resource_limits = limits
    return InfiniGramIndex.open(out)


def _block_refs(bundle: Any) -> List[Any]:
    """The block object refs of a Ray Data RefBundle (its layout moved between Ray versions)."""
    blocks = getattr(bundle, "block_refs", None)
    if blocks is not None:
        return list(blocks)
    return [b for b, _ in bundle.blocks]


def _length(source: Any) -> Optional[int]:
    if isinstance(source, (str, os.PathLike)) or (isinstance(source, (list, tuple)) and source
                                                  and not isinstance(source[0], str)):
        return None
    try:
        return len(source)
    except (TypeError, AttributeError):  # (a ray.data.Dataset refuses len(): counting would run it)
        return None
