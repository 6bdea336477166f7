"""`infinigram-hf` subcommands that trace a text back to the corpus: trace (verbatim spans with
their documents, as JSON, a terminal view or an offline HTML page) and creativity (the longest
corpus match at every position and the creativity index).

Example:
    $ infinigram-hf trace stdlib_idx --file sample.py --min-len 8 --html trace.html
    $ infinigram-hf creativity stdlib_idx --file sample.py --n 5 10 20
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import CLIError, load_index_tokenizer, open_index, parse_ids, print_json


def _text_arguments(p: Any) -> None:
    p.add_argument("index", nargs="+", help="index directory")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="the text to trace")
    src.add_argument("--file", help="a UTF-8 file holding the text")
    p.add_argument("--tokenizer", default=None, help="'bytes', a local directory or a name (default: the index's)")


def _read_ids(args: argparse.Namespace, index: Any) -> tuple:
    tok = load_index_tokenizer(index, args.tokenizer)
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
    p.add_argument("--no-word-starts", action="store_true", help="spans may start and end inside words")
    p.add_argument("--max-docs", type=int, default=5, help="documents listed per span (default 5)")
    p.add_argument("--context", type=int, default=24, help="document tokens shown around a match (default 24)")
    p.add_argument("--html", default=None, metavar="OUT.html", help="write the HTML view there")
    p.add_argument("--show", action="store_true", help="print the terminal view instead of JSON")
    p.set_defaults(func=run_trace)


def run_trace(args: argparse.Namespace) -> int:
    from ..tracing import trace

    index = open_index(args.index)
    tok, ids = _read_ids(args, index)
    delims = parse_ids(args.delimiters) if args.delimiters else None
    t = trace(ids, index, tok if args.tokenizer else None, min_len=args.min_len, max_count=args.max_count, delimiters=delims,
              word_starts=None if args.no_word_starts else "auto", stop_at_eos=False, max_docs=args.max_docs,
              context=args.context)
    if args.html:
        t.to_html(args.html)
        print(f"wrote {args.html}: {len(t.spans)} spans over {len(t.ids)} tokens", file=sys.stderr)
    if args.show:
        print(t.render_terminal())
    elif not args.html:
        print_json(t.as_dict())
    return 0


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
    index = open_index(args.index)
    _, ids = _read_ids(args, index)
    if any(n < 1 for n in args.n):
        raise CLIError("--n must be positive")
    c = index.creativity(ids)
    out: dict = {"tokens": len(ids), "creativity_index": {str(n): c.index(n) for n in args.n}}
    if args.per_token:
        out["match_len"] = c.match_len.tolist()
    print_json(out)
    return 0


COMMANDS = [add_trace, add_creativity]
