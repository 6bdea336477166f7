"""`infinigram-hf build --ray [ADDRESS]`: the build command's sources, on a Ray cluster."""
from __future__ import annotations

import argparse
import types
from typing import Any

from .common import CLIError, parse_columns


def build_on_ray(args: argparse.Namespace, source: Any, tokenizer: Any) -> Any:
    """Run infinigram_hf.distributed.build_index with the build command's arguments."""
    try:
        from ..distributed import build_index
    except ImportError as exc:
        raise CLIError(f"--ray: {exc}") from None
    if isinstance(source, types.GeneratorType):
        raise CLIError("--ray: .npy token arrays are built on one machine; give text files or --dataset")
    kw = {"shard_tokens": args.max_shard_tokens} if args.max_shard_tokens is not None else {}
    return build_index(
        source, args.out, tokenizer=tokenizer, vocab_size=args.vocab_size, text_column=args.text_column,
        metadata_columns=parse_columns(args.metadata_columns), memory_budget=args.memory_budget,
        batch_size=args.batch_size, overwrite=args.overwrite, progress=not args.quiet,
        address=None if args.ray == "local" else args.ray, **kw)
