"""`infinigram-hf convert`: official infini-gram indexes to ours and back; `infinigram-hf prepare`:
the sidecar of an official index (our suffix order and short-context cache, in another directory).

Example:
    $ infinigram-hf convert v4_pileval_llama pileval_ours --vocab-size 32000
    $ infinigram-hf convert pileval_ours pileval_official
    $ infinigram-hf prepare v4_pileval_llama --out pileval_side --vocab-size 32000
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import CLIError, add_official_arguments, official_tokenizer


def add_convert(sub: Any) -> None:
    p = sub.add_parser("convert", help="convert an official infini-gram index to ours, or ours to the official layout",
                       description="The direction follows SRC: a directory in the official layout (tokenized.0, "
                                   "table.0, offset.0, ...) becomes one of ours; one of ours becomes an official one "
                                   "(served by infini_gram.engine with token_dtype u8/u16/u32). Official -> ours -> "
                                   "official gives the original files byte for byte.")
    p.add_argument("src", help="index directory to convert")
    p.add_argument("out", help="new index directory")
    add_official_arguments(p, subject="the official side", tokenizer=True)
    p.add_argument("--eos-token-id", type=int, default=None)
    p.add_argument("--overwrite", action="store_true", help="replace an existing index at OUT (to ours only)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    from .._core.official import looks_official
    from ..build.convert import official_to_ours, ours_to_official

    src = Path(args.src)
    if not src.is_dir():
        raise CLIError(f"{src}: not a directory")
    if looks_official(src):
        out = official_to_ours(src, args.out, vocab_size=args.vocab_size, token_width=args.token_width,
                               eos_token_id=args.eos_token_id, tokenizer=official_tokenizer(args),
                               overwrite=args.overwrite, progress=not args.no_progress)
    else:
        out = ours_to_official(src, args.out, token_width=args.token_width, progress=not args.no_progress)
    print(out)
    return 0


def add_prepare(sub: Any) -> None:
    p = sub.add_parser("prepare", help="build the sidecar of an official infini-gram index into another directory",
                       description="Builds into OUT (never into the official directory) our suffix order and the "
                                   "precomputed short-context distributions of every official shard, so that the "
                                   "smoothed LM, count-of-counts and difference() work on the official files: "
                                   "InfiniGramIndex.open(OFFICIAL_DIR, cache_dir=OUT). A sidecar that matches the "
                                   "files is kept; a stale one is refused unless --overwrite.")
    p.add_argument("official_dir", help="the official index directory (tokenized.0, table.0, offset.0, ...)")
    p.add_argument("--out", required=True, help="the sidecar directory (new, or a sidecar to check or replace)")
    add_official_arguments(p, subject="the official index", tokenizer=True)
    p.add_argument("--overwrite", action="store_true", help="rebuild the sidecar at OUT")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    from ..index.official_sidecar import prepare_sidecar

    if not Path(args.official_dir).is_dir():
        raise CLIError(f"{args.official_dir}: not a directory")
    print(prepare_sidecar(args.official_dir, args.out, vocab_size=args.vocab_size, tokenizer=official_tokenizer(args),
                          token_width=args.token_width, overwrite=args.overwrite, progress=not args.no_progress))
    return 0


COMMANDS = [add_convert, add_prepare]
