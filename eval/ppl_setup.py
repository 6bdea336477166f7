"""Shared pieces of the perplexity eval and the processor benchmark: the trained GPT-2, the
stdlib splits as token arrays, and the ∞-gram indexes of ¼, ½ and all of the reference split.

Indexes are built once (a few seconds each) from eval/corpora.py's cached token arrays, with the
eval tokenizer recorded in them, under <cache>/ppl-indexes/stdlib-reference-{quarter,half,all}.
The ¼ ⊂ ½ ⊂ all subsets are nested random samples of the reference files (fixed seed), as the
paper's datastore ablation downsamples its reference data.

Example:
    >>> import ppl_setup                                            # doctest: +SKIP
    >>> index = ppl_setup.reference_index("all")                     # doctest: +SKIP
    >>> model, tok = ppl_setup.load_model()                          # doctest: +SKIP
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402
import train_gpt2  # noqa: E402

FRACTIONS = {"quarter": 0.25, "half": 0.5, "all": 1.0}
SUBSET_SEED = 20261122


def model_dir() -> Path:
    return train_gpt2.default_model_dir()


def load_model(path: Optional[Path] = None, train_if_missing: bool = True) -> Tuple[object, object]:
    """(model in eval mode, tokenizer) of the eval GPT-2; trains it first when missing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = Path(path or model_dir())
    if not (d / "train_info.json").exists():
        if not train_if_missing:
            raise FileNotFoundError(f"no trained model at {d}; run eval/train_gpt2.py")
        print(f"no trained model at {d}: training it (eval/train_gpt2.py)", flush=True)
        train_gpt2.main(["--out", str(d)])
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    return model, AutoTokenizer.from_pretrained(d)


def split_docs(split: str, max_tokens: Optional[int] = None) -> List[np.ndarray]:
    """Documents of a stdlib split as int64 arrays (path order); the first files up to
    `max_tokens` tokens when given."""
    tokens, offsets = corpora.load_tokens(f"stdlib.{split}")
    docs, total = [], 0
    for i in range(len(offsets) - 1):
        d = np.asarray(tokens[offsets[i]:offsets[i + 1]], dtype=np.int64)
        if not len(d):
            continue
        if max_tokens is not None and total >= max_tokens:
            break
        docs.append(d)
        total += len(d)
    return docs


def reference_subset(fraction: str) -> np.ndarray:
    """Indexes of the reference files in the ¼ / ½ / all datastore (nested random subsets)."""
    _, offsets = corpora.load_tokens("stdlib.reference")
    n = len(offsets) - 1
    order = np.random.default_rng(SUBSET_SEED).permutation(n)
    return np.sort(order[: int(round(n * FRACTIONS[fraction]))])


def reference_index(fraction: str = "all", progress: bool = True):
    """The ∞-gram index of a datastore size (built on first use)."""
    from infinigram_hf import IndexFormatError, InfiniGramIndex
    from infinigram_hf.build import build_index

    if fraction not in FRACTIONS:
        raise ValueError(f"fraction must be one of {list(FRACTIONS)}, got {fraction!r}")
    out = corpora.cache_dir() / "ppl-indexes" / f"stdlib-reference-{fraction}"
    if (out / "meta.json").exists():
        try:
            return InfiniGramIndex.open(out)
        except IndexFormatError as exc:  # built by an older version of the format: rebuild
            print(f"rebuilding {out}: {exc}", flush=True)
    tokens, offsets = corpora.load_tokens("stdlib.reference")
    docs = [np.asarray(tokens[offsets[i]:offsets[i + 1]]) for i in reference_subset(fraction)]
    return build_index(docs, out, tokenizer=corpora.load_tokenizer(), progress=progress, overwrite=True)


# ------------------------------------------------------------------ the linux domain (issue 20)


def linux_model_dir() -> Path:
    """The linux GPT-2 (eval/train_gpt2.py --corpus linux)."""
    return corpora.cache_dir() / "gpt2-small-linux"


def linux_index(fraction: str = "all", progress: bool = False):
    """The ∞-gram index of ¼, ½ or all of the linux datastore split: `all` is the 200M-token
    `linux200m` index (eval/bench_build.py builds it); ¼ and ½ are its first documents holding at
    most 50M / 100M tokens (prefixes by documents, built once under <cache>/ppl-indexes/)."""
    from infinigram_hf import IndexFormatError, InfiniGramIndex
    from infinigram_hf.build import build_index

    if fraction not in FRACTIONS:
        raise ValueError(f"fraction must be one of {list(FRACTIONS)}, got {fraction!r}")
    if fraction == "all":
        out = corpora.cache_dir() / "ours" / "linux200m"
        if not (out / "meta.json").exists():
            raise FileNotFoundError(f"no index at {out}: run eval/bench_build.py --corpora linux200m --runs 1")
        return InfiniGramIndex.open(out)
    out = corpora.cache_dir() / "ppl-indexes" / f"linux200m-{fraction}"
    if (out / "meta.json").exists():
        try:
            return InfiniGramIndex.open(out)
        except IndexFormatError as exc:
            print(f"rebuilding {out}: {exc}", flush=True)
    tokens, offsets = corpora.load_tokens("linux200m")
    want = int(round(FRACTIONS[fraction] * int(offsets[-1])))
    n_docs = int(np.searchsorted(offsets, want, side="right")) - 1  # documents ending at or before `want`
    docs = (tokens[offsets[i]:offsets[i + 1]] for i in range(n_docs))
    return build_index(docs, out, vocab_size=32000, memory_budget="4GiB", progress=progress, overwrite=True)
