"""Shared by the neural-LM examples: a model, its tokenizer, an ∞-gram index built with that
tokenizer, and held-out standard-library files (never indexed) to try them on.

Offline by default: without --model it reuses the demo's locally trained tokenizer and index
(built on first use under ~/.cache/infinigram_hf/demo) and trains a tiny GPT-2 on the indexed
files in about a minute. With --model (a local directory, or a hub id such as gpt2 where the hub
is reachable) the standard library is indexed with that model's tokenizer unless --index is given.
"""
from __future__ import annotations

import argparse
import os
import sysconfig
from pathlib import Path
from typing import Any, List, Tuple

from infinigram_hf import InfiniGramIndex, build_index, demo
from infinigram_hf.demo_model import tiny_gpt2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help="local model directory or hub id (default: a tiny GPT-2 trained here on the demo index)")
    p.add_argument("--index", default=None, help="index directory built with the model's tokenizer "
                   "(default: the standard library, indexed with the model's tokenizer)")
    p.add_argument("--max-files", type=int, default=None, help="index only this many stdlib files (faster)")


def load(args: argparse.Namespace) -> Tuple[Any, Any, InfiniGramIndex, List[Path]]:
    """(model, tokenizer, index, held-out files)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files, heldout = demo.split_corpus(root, args.max_files)
    if args.model is None:
        out = demo.default_out() if args.max_files is None else demo.default_out().with_name(f"demo-{args.max_files}")
        index, tok, _, heldout = demo.prepare(out, args.max_files, rebuild=False, progress=True)
        print("training (or loading) a tiny GPT-2 on the indexed files ...", flush=True)
        model, tok = tiny_gpt2(index, tok, out / "tiny-gpt2")
        return model, tok, index, heldout
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    if args.index is not None:
        return model, tok, InfiniGramIndex.open(args.index), heldout
    from infinigram_hf._core.tokenization import vocab_fingerprint

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "infinigram_hf" / "examples"
    out = cache / f"stdlib-{vocab_fingerprint(tok)[7:19]}-{args.max_files or 'all'}"
    if (out / "meta.json").exists():
        return model, tok, InfiniGramIndex.open(out), heldout
    print(f"indexing {len(files):,} standard-library files with the model's tokenizer into {out} ...", flush=True)
    return model, tok, build_index(files, out, tokenizer=tok), heldout
