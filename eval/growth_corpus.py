#!/usr/bin/env python3
"""The indexes of the 1B-token growth benchmark (issue 19): Linux prefixes of 10M to 200M tokens,
all the real text (498M tokens) and a 1B-token corpus; 200M and 1B also as four shards. Built by
the package's own `build_index` (progress bar, sharding by memory budget / max_shard_tokens).

    .venv-test/bin/python eval/growth_corpus.py build                 # all of them
    .venv-test/bin/python eval/growth_corpus.py build --only 1b-s1    # one
    .venv-test/bin/python eval/growth_corpus.py delete                # free the disk afterwards

Why part of the 1B corpus is synthetic: Debian's whole linux-source tarball is 1.3 GB of text
(1.30 GB of it the .c/.h files already tokenized: 491M tokens), and the stdlib adds 8M: real
text on this machine stops near 500M tokens. The rest is the same Linux documents with every
token id mapped through one fixed random permutation of the vocabulary (the end-of-text id kept):
"another language" with exactly the statistics of C source -- Zipf unigrams, the same document
lengths, the same long repeats (licence headers, boilerplate), so the suffix array's depth and
the comparisons of a search look like real code's -- yet unrelated to the real half, so held-out
queries find their matches in the real half as they would in a larger real corpus. A unigram Zipf
stream (the issue's other option) has no long repeats and would make searches unrealistically
short.

Queries come from the last `HELDOUT_DOCS` Linux documents (as `bench_queries.py growth`), which no
index holds, neither as they are nor permuted. Each build runs in its own process so that its peak
RSS (getrusage of that child) is its own; build times and peak RSS go to
eval/results/growth_build.json.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpora  # noqa: E402

HELDOUT_DOCS = 500
PERMUTATION_SEED = 20261124
BUILD_RESULTS = HERE / "results" / "growth_build.json"
# label -> (corpus tokens wanted, shards wanted: 1, or that many shards of equal size)
INDEXES: Dict[str, Tuple[int, int]] = {
    "10m-s1": (10 * 10**6, 1),
    "50m-s1": (50 * 10**6, 1),
    "200m-s1": (200 * 10**6, 1),
    "200m-s4": (200 * 10**6, 4),
    "498m-s1": (497_697_404, 1),  # all the real text: Linux (less the held-out documents) + stdlib
    "1b-s1": (10**9, 1),
    "1b-s4": (10**9, 4),
}


def growth_dir() -> Path:
    return corpora.cache_dir() / "growth"


def index_dir(label: str) -> Path:
    return growth_dir() / label


def linux_parts() -> Tuple[np.ndarray, np.ndarray, int]:
    """(tokens, offsets, documents available to indexes: all but the held-out last ones)."""
    tokens, offsets = corpora.load_tokens("linux")
    offsets = np.asarray(offsets, dtype=np.int64)
    return tokens, offsets, len(offsets) - 1 - HELDOUT_DOCS


def vocab_permutation() -> np.ndarray:
    """A fixed random bijection of the vocabulary that keeps the end-of-text id."""
    rng = np.random.default_rng(PERMUTATION_SEED)
    rest = np.array([i for i in range(corpora.VOCAB_SIZE) if i != corpora.EOS_TOKEN_ID])
    perm = np.arange(corpora.VOCAB_SIZE, dtype=np.uint16)
    perm[rest] = rng.permutation(rest).astype(np.uint16)
    return perm


def documents(limit: int) -> Iterator[np.ndarray]:
    """The corpus's documents up to `limit` tokens: Linux (held-out documents left out), then the
    stdlib, then the permuted Linux documents (see the module docstring)."""
    tokens, offsets, n_docs = linux_parts()
    left = limit

    def take(doc: np.ndarray) -> Iterator[np.ndarray]:
        nonlocal left
        if left > 0:
            left -= len(doc)
            yield doc

    for i in range(n_docs):
        yield from take(np.asarray(tokens[offsets[i]:offsets[i + 1]]))
    st, so = corpora.load_tokens("stdlib")
    for i in range(len(so) - 1):
        yield from take(np.asarray(st[so[i]:so[i + 1]]))
    perm = vocab_permutation()
    while left > 0:  # (one permuted copy suffices up to ~1B tokens)
        for i in range(n_docs):
            yield from take(perm[np.asarray(tokens[offsets[i]:offsets[i + 1]])])
        perm = perm[perm]  # a further copy, if ever needed, under another permutation


def build_one(label: str) -> None:
    """Build one index (in this process) with the package's own pipeline."""
    from infinigram_hf import build_index

    size, shards = INDEXES[label]
    kw = {"memory_budget": "8GiB"} if shards == 1 else {"memory_budget": "4GiB",
                                                         "max_shard_tokens": -(-size // shards) + 100_000}
    ix = build_index(documents(size), index_dir(label), vocab_size=corpora.VOCAB_SIZE, progress=True,
                     overwrite=True, **kw)
    print(json.dumps({"label": label, "tokens": ix.num_tokens, "docs": ix.num_docs, "shards": ix.num_shards,
                      "disk_bytes": ix.disk_bytes()}), flush=True)
    ix.close()


def build(labels: list[str]) -> None:
    res = json.loads(BUILD_RESULTS.read_text()) if BUILD_RESULTS.exists() else {}
    for label in labels:
        if (index_dir(label) / "meta.json").exists() or any(index_dir(label).glob("*/meta.json")):
            print(f"{label}: exists", file=sys.stderr)
            continue
        t0, load0 = time.time(), os.getloadavg()
        proc = subprocess.Popen(["nice", "-n", "10", sys.executable, __file__, "build-one", label],
                                stdout=subprocess.PIPE, text=True)
        out = proc.stdout.read()
        _, status, ru = os.wait4(proc.pid, 0)
        if status != 0:
            raise SystemExit(f"{label}: build failed ({status})")
        info = json.loads(out.strip().splitlines()[-1])
        info.update(wall_s=round(time.time() - t0, 1), cpu_s=round(ru.ru_utime + ru.ru_stime, 1),
                    peak_rss_bytes=ru.ru_maxrss * 1024, loadavg_start=[round(x, 2) for x in load0],
                    loadavg_end=[round(x, 2) for x in os.getloadavg()], date=time.strftime("%Y-%m-%d %H:%M"),
                    command=f"eval/growth_corpus.py build --only {label}")
        print(json.dumps(info), file=sys.stderr, flush=True)
        res[label] = info
        BUILD_RESULTS.parent.mkdir(parents=True, exist_ok=True)
        BUILD_RESULTS.write_text(json.dumps(res, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["build", "build-one", "delete"])
    ap.add_argument("label", nargs="?")
    ap.add_argument("--only", default=",".join(INDEXES))
    a = ap.parse_args()
    if a.mode == "build-one":
        build_one(a.label)
    elif a.mode == "build":
        build(a.only.split(","))
    else:
        shutil.rmtree(growth_dir(), ignore_errors=True)


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
