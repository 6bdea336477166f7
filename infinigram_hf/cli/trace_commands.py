"""`infinigram-hf` subcommands that trace a text back to the corpus: trace (verbatim spans with
their documents, as JSON, a terminal view or an offline HTML page) and creativity (the longest
corpus match at every position and the creativity index).

Example:
    $ infinigram-hf trace stdlib_idx --file sample.py --min-len 8 --html trace.html
    $ infinigram-hf creativity stdlib_idx --file sample.py --n 5 10 20
    $ infinigram-hf trace v4_official_dir --tokenizer tokenizer.json --word-starts bow_ids.txt --file out.txt
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import (CLIError, add_official_arguments, cli_tokenizer, load_index_tokenizer, open_index, parse_ids,
                     print_json)


def _text_arguments(p: Any) -> None:
    p.add_argument("index", nargs="+", help="index directory (ours, or the official infini-gram layout)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="the text to trace")
    src.add_argument("--file", help="a UTF-8 file holding the text")
    p.add_argument("--tokenizer", default=None,
                   help="'bytes', a tokenizer.json file, a local directory or a name (default: the index's)")
    add_official_arguments(p)


def _open(args: argparse.Namespace) -> tuple:
    """The index (an official one described by --vocab-size / --token-width / --tokenizer) and
    the --tokenizer argument, loaded where that needs no transformers."""
    from .._core.official import looks_official
    from .._core.tokenization import resolve_tokenizer

    tok = cli_tokenizer(args.tokenizer)
    official = any(Path(p).is_dir() and looks_official(Path(p)) for p in args.index)
    if official and isinstance(tok, str):  # its length gives the vocabulary: load it now
        tok = resolve_tokenizer(tok)
    try:
        index = open_index(args.index, vocab_size=args.vocab_size, token_width=args.token_width,
                           tokenizer=None if isinstance(tok, str) else tok)
    except ValueError as exc:
        if official and "does not store its vocabulary" in str(exc):
            raise CLIError("an official infini-gram index does not store its vocabulary: pass --vocab-size N "
                           "or --tokenizer (a tokenizer.json file, a directory or a name)") from None
        raise
    return index, tok


def _read_ids(args: argparse.Namespace, index: Any, tokenizer: Any) -> tuple:
    tok = load_index_tokenizer(index, tokenizer)
    if args.file is not None:
        path = Path(args.file)
        if not path.is_file():
            raise CLIError(f"file not found: {args.file}")
        text = path.read_text(encoding="utf-8", errors="replace")
    else:
        text = args.text
    return tok, list(tok.encode(text, add_special_tokens=False))


def add_trace(sub: Any) -> None:
    p = sub.add_parser("trace", help="the verbatim spans a text shares with the corpus, with their documents",
                       description="Every maximal span of the text that occurs in the corpus (at least --min-len "
                                   "tokens, at most --max-count occurrences, starting and ending at word boundaries "
                                   "unless --no-word-starts), with counts, unigram log-probability sums and "
                                   "documents. JSON on stdout; --html writes an offline page; --show prints a "
                                   "terminal view.")
    _text_arguments(p)
    p.add_argument("--min-len", type=int, default=4, help="shortest span in tokens (default 4)")
    p.add_argument("--max-count", type=int, default=None, help="drop spans occurring more often (default: none)")
    p.add_argument("--delimiters", default=None, help="comma-separated token ids no span may cross")
    words = p.add_mutually_exclusive_group()
    words.add_argument("--no-word-starts", action="store_true", help="spans may start and end inside words")
    words.add_argument("--word-starts", default=None, metavar="FILE",
                       help="the token ids that begin a word, one per line (the official engine's bow_ids file; "
                            "default: derived from the tokenizer)")
    p.add_argument("--max-docs", type=int, default=5, help="documents listed per span (default 5)")
    p.add_argument("--context", type=int, default=24, help="document tokens shown around a match (default 24)")
    p.add_argument("--html", default=None, metavar="OUT.html", help="write the HTML view there")
    p.add_argument("--show", action="store_true", help="print the terminal view instead of JSON")
    p.set_defaults(func=run_trace)


def run_trace(args: argparse.Namespace) -> int:
    from ..tracing import trace

    index, given = _open(args)
    tok, ids = _read_ids(args, index, given)
    delims = parse_ids(args.delimiters) if args.delimiters else None
    words: Any = None if args.no_word_starts else _word_start_file(args.word_starts) if args.word_starts else "auto"
    t = trace(ids, index, tok if args.tokenizer else None, min_len=args.min_len, max_count=args.max_count, delimiters=delims,
              word_starts=words, stop_at_eos=False, max_docs=args.max_docs, context=args.context)
    if args.html:
        t.to_html(args.html)
        print(f"wrote {args.html}: {len(t.spans)} spans over {len(t.ids)} tokens", file=sys.stderr)
    if args.show:
        print(t.render_terminal())
    elif not args.html:
        print_json(t.as_dict())
    return 0


def _word_start_file(name: str) -> list:
    path = Path(name)
    if not path.is_file():
        raise CLIError(f"--word-starts: file not found: {name}")
    text = path.read_text(encoding="utf-8", errors="replace")
    return parse_ids(",".join(line.strip() for line in text.splitlines() if line.strip()))


def add_creativity(sub: Any) -> None:
    p = sub.add_parser("creativity", help="longest corpus match at every position; the creativity index",
                       description="For every position the longest span starting there that occurs in the "
                                   "corpus, and the creativity index for each --n: the share of tokens covered by "
                                   "no corpus span of n tokens or more (Lu et al., 2024).")
    _text_arguments(p)
    p.add_argument("--n", type=int, nargs="+", default=[5, 10, 20], help="span lengths (default 5 10 20)")
    p.add_argument("--per-token", action="store_true", help="also list each position's match length")
    p.set_defaults(func=run_creativity)


def run_creativity(args: argparse.Namespace) -> int:
    index, given = _open(args)
    _, ids = _read_ids(args, index, given)
    if any(n < 1 for n in args.n):
        raise CLIError("--n must be positive")
    c = index.creativity(ids)
    out: dict = {"tokens": len(ids), "creativity_index": {str(n): c.index(n) for n in args.n}}
    if args.per_token:
        out["match_len"] = c.match_len.tolist()
    print_json(out)
    return 0


COMMANDS = [add_trace, add_creativity]
