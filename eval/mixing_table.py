"""Issue 20: learned per-token mixing vs the two λs, on two domains, with the datastore ablation,
the breakdown by effective n and sparsity, and decontaminated held-out sets.

    nice -n 10 .venv-test/bin/python eval/mixing_table.py --domain stdlib
    nice -n 10 .venv-test/bin/python eval/mixing_table.py --domain linux
    nice -n 10 .venv-test/bin/python eval/mixing_table.py --domain linux --levels 2   # a one-level model

stdlib: the eval GPT-2 (<cache>/gpt2-small-stdlib), datastore ¼ / ½ / all of stdlib.reference,
fit on stdlib.validation, evaluate on stdlib.heldout. linux: <cache>/gpt2-small-linux, datastore
¼ / ½ / all of the 200M-token linux200m index (prefixes by documents), fit on the linux
`validation` split, evaluate on `heldout` (eval/corpora.py's linux splits).

Defaults are sized for a shared 2-core CPU: a seeded random sample of documents, each cut to
its first 1,024 tokens, up to 15k validation and 30k held-out tokens; `--val-tokens 0
--test-tokens 0` scores the whole splits. The model pass runs once per split and datastore (the
agreement features compare the model's distribution with each datastore's; `--reuse-model-pass`
runs it for the full datastore only and rescores the smaller ones with `with_index`, without
those features); per-token neural log-probabilities, the ∞-gram estimate and every mixing
feature are cached per (model, split, datastore) under <model>/mixing-cache/, so refits and new
tables are quick. Decontaminated = held-out documents with >= 80% of their token
13-grams in the full datastore removed (`infinigram_hf.decontaminate.IndexDecontaminator`).
Writes eval/results/mixing_<domain>.json and prints Markdown tables.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable, List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402
import ppl_setup  # noqa: E402

from infinigram_hf import TokenScores  # noqa: E402

HERE = Path(__file__).resolve().parent


SAMPLE_SEED = 20261124


def sample_docs(docs: List[np.ndarray], cap, max_doc_tokens) -> List[np.ndarray]:
    """Documents in a seeded random order, each cut to its first `max_doc_tokens` tokens, until
    `cap` tokens (None: all documents, whole). The cut keeps more documents per token scored:
    the model pass is what costs here."""
    if cap is None:
        return docs
    out, total = [], 0
    for i in np.random.default_rng(SAMPLE_SEED).permutation(len(docs)):
        if total >= cap:
            break
        d = docs[i][:max_doc_tokens] if max_doc_tokens else docs[i]
        out.append(d)
        total += len(d)
    return out


def domain_spec(domain: str) -> dict:
    """Model directory, index opener and split loader of a domain."""
    if domain == "stdlib":
        return dict(model_dir=ppl_setup.model_dir(), index=lambda f: ppl_setup.reference_index(f, progress=False),
                    docs=lambda split: ppl_setup.split_docs(split))
    if domain == "linux":
        def docs(split: str):
            tokens, offsets = corpora.linux_split_tokens(split)
            return [np.asarray(tokens[offsets[i]:offsets[i + 1]], dtype=np.int64) for i in range(len(offsets) - 1)]
        return dict(model_dir=ppl_setup.linux_model_dir(), index=ppl_setup.linux_index, docs=docs)
    raise ValueError(f"domain must be 'stdlib' or 'linux', got {domain!r}")


def cached_scores(spec: dict, split: str, docs: List[np.ndarray], fraction: str, model_loader: Callable,
                  args) -> TokenScores:
    """Token scores (with mixing features) of a split against one datastore size, cached."""
    from infinigram_hf import token_scores, with_index

    n_tok = sum(len(d) for d in docs)
    cache = spec["model_dir"] / "mixing-cache"
    cache.mkdir(exist_ok=True)
    tag = "-reused" if fraction != "all" and args.reuse_model_pass else ""
    path = cache / f"{split}-{len(docs)}docs-{n_tok}tok-w{args.window}-s{args.stride}-{fraction}{tag}.npz"
    if path.exists():
        return TokenScores.load(path)
    t = time.time()
    if fraction == "all" or not args.reuse_model_pass:
        # (a model pass per datastore: the agreement features compare the model with the index)
        model, _ = model_loader()
        s = token_scores(model, None, docs, spec["index"](fraction), window=args.window, stride=args.stride,
                         batch_size=args.batch_size, progress=False, agreement=True)
    else:
        full = cached_scores(spec, split, docs, "all", model_loader, args)
        s = with_index(full, None, docs, spec["index"](fraction))
    print(f"{split}/{fraction}: {len(s):,} tokens scored in {time.time() - t:.0f} s -> {path.name}", flush=True)
    s.save(path)
    return s


def load_cached(spec: dict, split: str, full: bool) -> TokenScores:
    """The cached full-datastore scores of a split: the whole split's (the largest file) or the
    sample's (the smallest), for the scripts that read this script's caches."""
    paths = list((spec["model_dir"] / "mixing-cache").glob(f"{split}-*-all.npz"))
    if not paths:
        raise SystemExit(f"no cached scores for {split}: run eval/mixing_table.py first")
    return TokenScores.load((max if full else min)(paths, key=lambda q: q.stat().st_size))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--domain", choices=["stdlib", "linux"], required=True)
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--stride", type=int, default=448)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--val-tokens", type=int, default=15_000, help="validation tokens used for fitting (0: all)")
    ap.add_argument("--test-tokens", type=int, default=30_000, help="held-out tokens evaluated (0: all)")
    ap.add_argument("--max-doc-tokens", type=int, default=1024,
                    help="cut sampled documents to this many tokens (with a token cap only)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-only", action="store_true", help="compute the cached scores and stop")
    ap.add_argument("--reuse-model-pass", action="store_true",
                    help="score the smaller datastores with with_index (no model pass; no agreement features)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--levels", nargs="+", default=None,
                    help="the several-orders model's levels (default: the package's, L-1 L/2 1)")
    args = ap.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    spec = domain_spec(args.domain)
    model_box: list = []

    def model_loader():
        if not model_box:
            model_box.append(ppl_setup.load_model(spec["model_dir"], train_if_missing=False))
        return model_box[0]

    val_docs = sample_docs(spec["docs"]("validation"), args.val_tokens or None, args.max_doc_tokens)
    test_docs = sample_docs(spec["docs"]("heldout"), args.test_tokens or None, args.max_doc_tokens)
    scores = {}
    for frac in ppl_setup.FRACTIONS:
        scores[frac] = (cached_scores(spec, "validation", val_docs, frac, model_loader, args),
                        cached_scores(spec, "heldout", test_docs, frac, model_loader, args))
    if args.cache_only:
        return
    import mixing_report  # noqa: E402  (the tables: kept apart from the caching above)
    mixing_report.report(args, spec, val_docs, test_docs, scores)


if __name__ == "__main__":
    main()
