"""`infinigram-hf` subcommands on indexes: build, query, info, search.

Example:
    $ infinigram-hf build corpus/ --out my_index --tokenizer bytes
    $ infinigram-hf query my_index --text "def main(" --top 5
    $ infinigram-hf info my_index
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable, List, Optional

from .._core.format import official_bytes_per_token
from .._core.safe_text import printable
from .common import CLIError, load_index_tokenizer, open_index, parse_columns, parse_ids, print_json, token_text

# ------------------------------------------------------------------ build


def add_build(sub: Any) -> None:
    p = sub.add_parser(
        "build", help="build an index from text files, JSON lines, a saved dataset or token arrays",
        description="Build an ∞-gram index. Sources: .txt/.py/... files (one document each), .jsonl "
                    "files (one document per line), directories of them, .npy token arrays (one "
                    "document per 1-D array or per row, with --vocab-size), or --dataset DIR (a "
                    "`datasets` dataset saved with save_to_disk).")
    p.add_argument("sources", nargs="*", metavar="SOURCE", help="files or directories to index")
    p.add_argument("-o", "--out", required=True, help="index directory to create")
    p.add_argument("--dataset", metavar="DIR", help="a dataset saved with datasets' save_to_disk")
    p.add_argument("--split", help="split of a saved DatasetDict (default: train, or the only one)")
    p.add_argument("--text-column", default="text", help="text column / JSON field (default: text)")
    p.add_argument("--metadata-columns", default="", metavar="COLS",
                   help="comma-separated columns / JSON fields kept per document, e.g. id,url")
    p.add_argument("--tokenizer", default="bytes", metavar="NAME_OR_PATH",
                   help="'bytes' (UTF-8 bytes, the default), a tokenizer directory, a tokenizer.json "
                        "file, or a hub name")
    p.add_argument("--vocab-size", type=int,
                   help="token ids are < this (.npy sources, or a dataset with an input_ids column)")
    p.add_argument("--memory-budget", default="4GiB", help="peak memory per shard build (default 4GiB)")
    p.add_argument("--max-shard-tokens", type=int, help="cap on a shard's size in tokens")
    p.add_argument("--num-proc", type=int, default=1, help="tokenizer processes (default 1)")
    p.add_argument("--batch-size", type=int, default=1000, help="documents per batch (default 1000)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing index at --out")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="build on a Ray cluster: tokenize and build shards as Ray tasks (ADDRESS: 'auto', "
                        "HOST:PORT, or none for a local Ray runtime); --max-shard-tokens is the shard size. "
                        "Needs the [ray] extra")
    p.set_defaults(func=run_build)


def _cli_tokenizer(name: str) -> Any:
    """--tokenizer: 'bytes' -> None; a tokenizer.json file -> tokenizers.Tokenizer; else the name."""
    if name == "bytes":
        return None
    path = Path(name)
    if path.is_file() and path.suffix == ".json":
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path))
    return name


def _load_dataset(path: str, split: Optional[str]) -> Any:
    import datasets

    if not Path(path).is_dir():
        raise CLIError(f"--dataset: directory not found: {path}")
    try:
        ds = datasets.load_from_disk(path)
    except (FileNotFoundError, ValueError) as exc:
        raise CLIError(f"--dataset: {path} is not a dataset saved with save_to_disk ({exc})") from None
    if isinstance(ds, datasets.DatasetDict):
        names = list(ds.keys())
        if split is None:
            split = "train" if "train" in ds else names[0] if len(names) == 1 else None
        if split not in ds:
            raise CLIError(f"--split: choose one of the splits {names}")
        ds = ds[split]
    elif split is not None:
        raise CLIError("--split: the saved dataset has no splits")
    return ds


def _npy_documents(paths: List[Path]) -> Any:
    """Documents from .npy files, memory-mapped: a 1-D array is one document, a 2-D one a row each."""
    import numpy as np

    for path in paths:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        if arr.ndim == 1:
            yield arr
        elif arr.ndim == 2:
            yield from arr
        else:
            raise CLIError(f"{path}: expected a 1-D or 2-D array of token ids, got shape {arr.shape}")


def _build_source(args: argparse.Namespace) -> Any:
    if args.dataset and args.sources:
        raise CLIError("give SOURCE paths or --dataset, not both")
    if args.dataset:
        return _load_dataset(args.dataset, args.split)
    if not args.sources:
        raise CLIError("nothing to index: give SOURCE paths or --dataset DIR")
    paths = [Path(s) for s in args.sources]
    for p in paths:
        if not p.exists():
            raise CLIError(f"source not found: {p}")
    npy = [p.suffix == ".npy" for p in paths]
    if any(npy):
        if not all(npy):
            raise CLIError(".npy token arrays cannot be mixed with text sources")
        if args.vocab_size is None:
            raise CLIError(".npy sources need --vocab-size (ids must be smaller)")
        return _npy_documents(paths)
    return paths


def run_build(args: argparse.Namespace) -> int:
    from ..build.publish import check_out_dir, resolve_out_dir
    from ..build.pipeline import build_index

    out = Path(args.out)
    # Before reading the corpus: what is at --out, and whether it is the corpus itself.
    check_out_dir(resolve_out_dir(out), overwrite=args.overwrite, overwrite_hint="--overwrite",
                  sources=list(args.sources) + ([args.dataset] if args.dataset else []))
    source = _build_source(args)
    if args.vocab_size is not None and isinstance(source, list):
        raise CLIError("--vocab-size is for token ids (.npy, a dataset's input_ids); text files "
                       "are tokenized with --tokenizer")
    # For token ids, --tokenizer (if not bytes) only names the ids' tokenizer for later queries.
    tokenizer = _cli_tokenizer(args.tokenizer)
    t0 = time.perf_counter()
    if args.ray is not None:
        from .ray_build import build_on_ray

        index = build_on_ray(args, source, tokenizer)
    else:
        index = build_index(
            source, out, tokenizer=tokenizer, vocab_size=args.vocab_size,
            text_column=args.text_column, metadata_columns=parse_columns(args.metadata_columns),
            memory_budget=args.memory_budget, max_shard_tokens=args.max_shard_tokens,
            batch_size=args.batch_size, num_proc=args.num_proc, overwrite=args.overwrite,
            progress=not args.quiet)
    seconds = time.perf_counter() - t0
    with index:
        if not args.quiet:
            n = max(index.num_tokens, 1)
            print(f"built {printable(str(out))}: {index.num_tokens:,} tokens in {index.num_docs:,} documents, "
                  f"{index.num_shards} shard(s), {index.disk_bytes() / n:.2f} bytes/token on disk, "
                  f"{seconds:.1f} s")
    return 0


# ------------------------------------------------------------------ query


def add_query(sub: Any) -> None:
    p = sub.add_parser(
        "query", help="count an n-gram and show its n-gram / ∞-gram probabilities and next tokens",
        description="Prints JSON: the query's count; P(last token | the tokens before it) with fixed n "
                    "and with ∞-gram backoff; the next-token distribution after the whole query "
                    "(fixed n and ∞-gram); the latency of each (median of --repeat runs).")
    p.add_argument("index", nargs="+", help="index directory (several are queried as one)")
    q = p.add_mutually_exclusive_group(required=True)
    q.add_argument("--text", help="query text, tokenized with the index's tokenizer")
    q.add_argument("--ids", help="query as comma-separated token ids, e.g. 1,2,3 ('' = empty)")
    p.add_argument("--tokenizer", metavar="NAME_OR_PATH",
                   help="tokenizer for --text (default: the one saved in the index, or bytes)")
    p.add_argument("--top", type=int, default=10, help="next tokens shown per distribution (default 10)")
    p.add_argument("--repeat", type=int, default=5, help="runs per query for the latency median (default 5)")
    p.set_defaults(func=run_query)


def _prob_json(res: Any, token: int, text: Optional[str]) -> dict:
    return {"token_id": token, "token": text, "prob": res.prob, "count": res.count,
            "prompt_count": res.prompt_count, "suffix_len": res.suffix_len,
            "effective_n": res.effective_n, "sparse": res.sparse}


def _ntd_json(ntd: Any, top: int, tok: Any, sep: int) -> dict:
    import numpy as np

    order = np.argsort(-ntd.counts.astype(np.int64), kind="stable")[:max(top, 0)]
    return {
        "total": ntd.total, "distinct": len(ntd), "suffix_len": ntd.suffix_len,
        "effective_n": ntd.effective_n, "sparse": ntd.sparse,
        "top": [{"token_id": int(ntd.token_ids[i]), "token": token_text(tok, int(ntd.token_ids[i]), sep),
                 "count": int(ntd.counts[i]), "prob": float(ntd.probs[i])} for i in order],
    }


def run_query(args: argparse.Namespace) -> int:
    from .._core.timing import timed
    from .._core.tokenization import encode_texts

    if args.repeat < 1:
        raise CLIError(f"--repeat must be at least 1, got {args.repeat}")
    t0 = time.perf_counter()
    index = open_index(args.index)
    open_ms = (time.perf_counter() - t0) * 1e3
    latency = {"open": open_ms}
    with index:
        sep = index.separator_id
        tok = None
        if args.text is not None:
            t0 = time.perf_counter()
            tok = load_index_tokenizer(index, args.tokenizer)
            ids = list(encode_texts(tok, [args.text])[0])
            latency["tokenize"] = (time.perf_counter() - t0) * 1e3
        else:
            ids = parse_ids(args.ids)
            if args.tokenizer or (Path(index.paths[0]) / "tokenizer").is_dir() or index.tokenizer_name == "bytes-utf8":
                tok = load_index_tokenizer(index, args.tokenizer)
        def run(name: str, fn: Callable[[], Any]) -> Any:
            value, seconds = timed(fn, args.repeat)
            latency[name] = seconds * 1e3
            return value

        count = run("count", lambda: index.count(ids))  # first: it validates the ids
        out: dict = {
            "index": [str(p) for p in index.paths],
            "query": {"text": args.text, "ids": ids,
                      "tokens": [token_text(tok, i, sep) for i in ids] if tok is not None else None},
            "count": count,
        }
        if ids:
            prompt, last = ids[:-1], ids[-1]
            text = token_text(tok, last, sep)
            out["ngram_prob"] = _prob_json(run("ngram_prob", lambda: index.ngram_prob(prompt, last)), last, text)
            out["infgram_prob"] = _prob_json(run("infgram_prob", lambda: index.infgram_prob(prompt, last)), last, text)
        else:
            out["ngram_prob"] = out["infgram_prob"] = None
        out["ngram_ntd"] = _ntd_json(run("ngram_ntd", lambda: index.ngram_ntd(ids)), args.top, tok, sep)
        out["infgram_ntd"] = _ntd_json(run("infgram_ntd", lambda: index.infgram_ntd(ids)), args.top, tok, sep)
        out["latency_ms"] = {k: round(v, 4) for k, v in latency.items()}
        out["latency_runs"] = args.repeat
    print_json(out)
    return 0


# ------------------------------------------------------------------ info


def add_info(sub: Any) -> None:
    p = sub.add_parser("info", help="show an index's metadata, file sizes and bytes per token",
                       description="Prints JSON: meta.json's fields, per-shard file sizes, bytes per "
                                   "token on disk and the official engine's bytes per token for the "
                                   "same number of tokens.")
    p.add_argument("index", nargs="+", help="index directory (several are shown as one)")
    p.set_defaults(func=run_info)


def run_info(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    index = open_index(args.index)
    open_ms = (time.perf_counter() - t0) * 1e3
    with index:
        shards = []
        for root, meta in zip(index.paths, index.metas):
            for s in meta["shards"]:
                d = Path(root) / s["dir"]
                files = {f.name: f.stat().st_size for f in sorted(d.iterdir()) if f.is_file()}
                shards.append({**s, "path": str(d), "file_bytes": files})
        core = sum(sh["file_bytes"].get(n, 0) for sh in shards for n in ("tokens.bin", "sa.bin"))
        disk = index.disk_bytes()
        n = max(index.num_tokens, 1)
        meta = index.meta
        out = {
            "index": [str(p) for p in index.paths],
            "format": meta["format"], "format_version": meta["format_version"],
            "tokenizer_name": meta.get("tokenizer_name"), "vocab_fingerprint": meta.get("vocab_fingerprint"),
            "tokenizer_saved": (Path(index.paths[0]) / "tokenizer").is_dir(),
            "eos_token_id": meta.get("eos_token_id"),
            "vocab_size": index.vocab_size, "token_width": index.token_width,
            "separator_id": index.separator_id,
            "num_tokens": index.num_tokens, "num_docs": index.num_docs, "num_shards": index.num_shards,
            "document_metadata": any("docmeta.jsonl" in sh["file_bytes"] for sh in shards),
            "disk_bytes": disk,
            "bytes_per_token": disk / n,
            "tokens_and_sa_bytes_per_token": core / n,
            "official_engine_bytes_per_token": official_bytes_per_token(index.num_tokens, index.vocab_size),
            "open_ms": round(open_ms, 3),
            "build": meta.get("build"),
            "shards": shards,
        }
    print_json(out)
    return 0


# ------------------------------------------------------------------ search


def add_search(sub: Any) -> None:
    p = sub.add_parser(
        "search", help="find documents containing an n-gram, or a CNF of n-grams (AND of ORs)",
        description="Prints JSON: the number of matching documents (exact, or estimated when the "
                    "rarest clause is over --max-clause-freq) and the first --maxnum of them with "
                    "their metadata, where the query matched, and a snippet. QUERY is text with the "
                    "infini-gram engine's CNF syntax: 'a AND b OR c' is a AND (b OR c); each term is "
                    "tokenized on its own, so mind leading spaces with BPE tokenizers.")
    p.add_argument("index", help="index directory")
    p.add_argument("query", nargs="?", help="query text, e.g. 'import os AND sys.argv OR argparse'")
    p.add_argument("--ids", help="query as token ids instead: '1,2 OR 3 AND 4'")
    p.add_argument("--tokenizer", metavar="NAME_OR_PATH",
                   help="tokenizer for QUERY (default: the one saved in the index, or bytes)")
    p.add_argument("--maxnum", type=int, default=10, help="documents shown (default 10)")
    p.add_argument("--max-clause-freq", type=int, default=50_000,
                   help="occurrences of the rarest clause examined before sampling (default 50000)")
    p.add_argument("--max-diff-tokens", type=int,
                   help="clauses must match within this many tokens of each other (default: anywhere)")
    p.add_argument("--seed", type=int, default=0, help="seed for sampling (default 0)")
    p.add_argument("--disp-len", type=int, default=200,
                   help="tokens of each document shown, from a little before the first match (0 = all)")
    p.add_argument("--all-ids", action="store_true", help="also list every matching document id found")
    p.set_defaults(func=run_search)


def parse_cnf(text: str, term: Callable[[str], Any]) -> List[List[Any]]:
    """'a AND b OR c' -> [[a], [b, c]] (each term through `term`).

    >>> parse_cnf("x AND y OR z", str)
    [['x'], ['y', 'z']]
    """
    clauses = [[term(t) for t in clause.split(" OR ")] for clause in text.split(" AND ")]
    for clause in clauses:
        for t in clause:
            if isinstance(t, str) and not t.strip() or isinstance(t, list) and not t:
                raise CLIError(f"empty term in query {text!r} (CNF syntax: 'a AND b OR c')")
    return clauses


def run_search(args: argparse.Namespace) -> int:
    if (args.query is None) == (args.ids is None):
        raise CLIError("give the query as QUERY text or as --ids, exactly one of them")
    if args.disp_len < 0:
        raise CLIError(f"--disp-len must be >= 0, got {args.disp_len}")
    index = open_index([args.index])
    with index:
        tok = None
        if args.query is not None:
            from .._core.tokenization import encode_texts

            tok = load_index_tokenizer(index, args.tokenizer)
            cnf: List[List[Any]] = parse_cnf(args.query, lambda t: list(encode_texts(tok, [t])[0]))
        else:
            cnf = parse_cnf(args.ids.replace("AND", " AND ").replace("OR", " OR "), parse_ids)
            if args.tokenizer or (Path(index.paths[0]) / "tokenizer").is_dir() or index.tokenizer_name == "bytes-utf8":
                tok = load_index_tokenizer(index, args.tokenizer)
        from ..index.search import search_docs

        t0 = time.perf_counter()
        res = search_docs(index, cnf, args.maxnum, max_clause_freq=args.max_clause_freq,
                          max_diff_tokens=args.max_diff_tokens, seed=args.seed)
        ms = (time.perf_counter() - t0) * 1e3
        docs = []
        for d in res.documents:
            first = int(d.spans[0, 0]) if len(d.spans) else 0
            n = len(d.token_ids)
            start = 0 if not args.disp_len else max(0, min(first - args.disp_len // 4, n - args.disp_len))
            shown = d.token_ids[start:start + args.disp_len] if args.disp_len else d.token_ids
            entry = {"doc_id": d.doc_id, "shard": d.shard, "length": n, "metadata": d.metadata,
                     "spans": [{"offset": int(o), "length": int(ln), "clause": int(c), "term": int(t)}
                               for o, ln, c, t in d.spans.tolist()],
                     "snippet_offset": start}
            if tok is not None:
                entry["snippet"] = tok.decode(shown.tolist())
            else:
                entry["snippet_ids"] = shown.tolist()
            docs.append(entry)
        out = {
            "index": [str(p) for p in index.paths],
            "query": {"text": args.query, "cnf_ids": [[list(t) for t in c] for c in res.cnf]},
            "count": res.count, "approximate": res.approximate, "estimate": res.estimate,
            "found": int(res.doc_ids.size),
            "rarest_clause": {"index": res.anchor_clause, "occurrences": res.anchor_count,
                              "examined": res.anchor_used},
            "latency_ms": round(ms, 3),
            "documents": docs,
        }
        if args.all_ids:
            out["doc_ids"] = res.doc_ids.tolist()
    print_json(out)
    return 0


# ------------------------------------------------------------------ entry point

# One registration function per subcommand; new subcommands add theirs here.
COMMANDS: List[Callable[[Any], None]] = [add_build, add_query, add_info, add_search]
