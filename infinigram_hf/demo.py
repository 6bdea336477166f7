"""The demo: index the Python standard library's own .py files and query the ∞-gram LM.

Needs no download: the corpus is the standard library of the Python running it, and the BPE
tokenizer (32k ids) is trained on it locally with `tokenizers`. Tokenizer and index are cached
under ~/.cache/infinigram_hf/demo (or --out), so a second run only queries.

Example:
    $ python -m infinigram_hf.demo                     # the whole standard library (~8M tokens)
    $ python -m infinigram_hf.demo --max-files 200     # a smaller, faster corpus

The demo is a list of section functions (SECTIONS), each taking the `Demo` context and printing
its queries with their latency (median of --runs runs); a new section is one more function.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from ._core.timing import format_seconds, timed

DEMO_VERSION = 1
VOCAB_SIZE = 32000
EOS_TOKEN = "<|endoftext|>"
TRAIN_BYTES = 10_000_000  # text the tokenizer is trained on (a sample of the corpus)
HELDOUT_EVERY = 50  # about 2% of the files are kept out of the index, for scoring unseen code
SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


def default_out() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "infinigram_hf" / "demo"


# ------------------------------------------------------------------ corpus, tokenizer, index


def stdlib_files(root: Optional[Path] = None) -> List[Path]:
    """Every .py file of the standard library (site-packages and caches skipped), sorted."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py")
                  if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(root).parts))


def is_heldout(rel: str) -> bool:
    """A stable ~2% of files by path, never indexed: 'unseen' code for dense scoring."""
    return int(hashlib.sha256(rel.encode()).hexdigest(), 16) % HELDOUT_EVERY == 0


def split_corpus(root: Path, max_files: Optional[int]) -> tuple[List[Path], List[Path]]:
    """(indexed files, held-out files); --max-files keeps evenly spaced files across the tree."""
    files = stdlib_files(root)
    indexed = [f for f in files if not is_heldout(str(f.relative_to(root)))]
    heldout = [f for f in files if is_heldout(str(f.relative_to(root)))]
    if max_files is not None:
        step = max(1, len(indexed) // max(max_files, 1))
        indexed = indexed[::step][:max_files]
        heldout = heldout[:2]
    return indexed, heldout


def corpus_fingerprint(root: Path, files: Sequence[Path]) -> str:
    h = hashlib.sha256(f"v{DEMO_VERSION}:{VOCAB_SIZE}:{TRAIN_BYTES}".encode())
    for f in files:
        h.update(f"{f.relative_to(root)}\0{f.stat().st_size}\n".encode())
    return h.hexdigest()[:16]


def train_tokenizer(files: Sequence[Path], out_dir: Path, vocab_size: int = VOCAB_SIZE) -> Any:
    """Train a byte-level BPE on the files and save it as an HF tokenizer directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Training on an evenly spaced sample of ~TRAIN_BYTES is enough for the merges and keeps the
    # demo fast; the index then covers every file.
    total = sum(f.stat().st_size for f in files)
    sample = list(files)[::max(1, math.ceil(total / TRAIN_BYTES))]
    texts = (f.read_text(encoding="utf-8", errors="replace") for f in sample)
    raw.train_from_iterator(texts, trainer=trainer, length=len(sample))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token=EOS_TOKEN)
    tok.save_pretrained(str(out_dir))
    return tok


@dataclass
class Demo:
    """What every section gets: the open index, its tokenizer and the held-out files."""

    index: Any
    tokenizer: Any
    root: Path
    heldout: List[Path]
    runs: int = 5
    notes: dict = field(default_factory=dict)  # scratch space sections may share

    def encode(self, text: str) -> List[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def token(self, token_id: int) -> str:
        """A token shown as a Python literal, so spaces and newlines are visible."""
        if token_id == self.index.separator_id:
            return "<end of document>"
        return repr(self.tokenizer.decode([int(token_id)]))

    def timed(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        return timed(fn, self.runs)


def show(label: str, result: str, seconds: Optional[float] = None) -> None:
    """One query line: what was asked, what came back, how long it took."""
    latency = f"[{format_seconds(seconds)}]" if seconds is not None else ""
    print(f"  {label:<46} {result:<34} {latency}")


def heading(title: str) -> None:
    print(f"\n── {title} " + "─" * max(0, 74 - len(title)))


def quote(text: str, width: int = 40) -> str:
    """A code snippet as a short one-line literal (the end kept: that is what queries condition on)."""
    r = repr(text)
    return r if len(r) <= width else "…" + r[-(width - 1):]


# ------------------------------------------------------------------ sections


def section_counts(d: Demo) -> None:
    heading("Counting n-grams: exact counts for n-grams of any length")
    print("  (queries are tokenized as written, so they start with the newline and indentation that")
    print("   precede such code in a file: BPE makes '\\n    def' and 'def' different tokens)")
    for text in ("import os", "\n    def __init__(self", "\n        raise ValueError",
                 "\n        self.assertEqual(", "if __name__ == '__main__':\n    unittest.main()"):
        ids = d.encode(text)
        n, s = d.timed(lambda: d.index.count(ids))
        show(f"count({quote(text, 34)})", f"{n:>9,}   ({len(ids)} tokens)", s)


def _top(d: Demo, ntd: Any, k: int = 5) -> str:
    order = np.argsort(-ntd.counts.astype(np.int64), kind="stable")[:k]
    return ", ".join(f"{d.token(ntd.token_ids[i])} {ntd.probs[i]:.2f}" for i in order)


def section_next_token(d: Demo) -> None:
    heading("∞-gram next-token distributions (decoded, top 5 of the exact distribution)")
    ntd, s = d.timed(lambda: d.index.infgram_ntd([]))
    show("unigram (empty prompt)", f"{ntd.total:,} tokens, {len(ntd):,} distinct", s)
    print(f"      {_top(d, ntd)}")
    for text in ("\n        for i in range(", "\n    def __init__(self", "from collections import"):
        ids = d.encode(text)
        ntd, s = d.timed(lambda: d.index.infgram_ntd(ids))
        show(f"infgram_ntd({quote(text, 30)})",
             f"n={ntd.effective_n}, {ntd.total:,} continuations", s)
        print(f"      {_top(d, ntd)}")


def _long_prompt(d: Demo, n_tokens: int = 40) -> List[int]:
    """n_tokens from the middle of a large indexed document: a prompt that surely occurs."""
    doc = max((d.index.get_doc(i) for i in range(min(d.index.num_docs, 50))), key=lambda x: len(x.token_ids))
    ids = doc.token_ids.tolist()
    mid = max(0, len(ids) // 2 - n_tokens)
    return ids[mid:mid + n_tokens]


def section_sparse(d: Demo) -> None:
    heading("Sparse vs non-sparse estimates (sparse = exactly one possible next token)")
    text = "\n        return"
    ids = d.encode(text)
    ntd, s = d.timed(lambda: d.index.infgram_ntd(ids))
    show(f"infgram_ntd({quote(text, 30)})",
         f"n={ntd.effective_n}, {len(ntd):,} distinct next, sparse={ntd.sparse}", s)
    prompt = _long_prompt(d)
    ntd, s = d.timed(lambda: d.index.infgram_ntd(prompt))
    text = d.tokenizer.decode(prompt)
    show(f"infgram_ntd({quote(text, 30)})", f"n={ntd.effective_n}, {len(ntd):,} distinct next, sparse={ntd.sparse}", s)
    print(f"      {_top(d, ntd, 3)}")


def section_backoff(d: Demo) -> None:
    heading("Backoff: fixed n (no backoff) vs ∞-gram (longest suffix that occurs)")
    text = "def frobnicate_the_widgets(self, gizmo):\n        if gizmo is None:\n            return"
    ids = d.encode(text)
    print(f"  prompt: {quote(text, 72)}  ({len(ids)} tokens)")
    ntd, s = d.timed(lambda: d.index.ngram_ntd(ids))
    show(f"ngram_ntd (n={len(ids) + 1})", f"{ntd.total:,} continuations", s)
    ntd, s = d.timed(lambda: d.index.infgram_ntd(ids))
    show("infgram_ntd", f"n={ntd.effective_n}, {ntd.total:,} continuations", s)
    print(f"      suffix used: {quote(d.tokenizer.decode(ids[len(ids) - ntd.suffix_len:]), 60)}")
    print(f"      {_top(d, ntd)}")
    token = d.encode(" None")[0]
    p, s = d.timed(lambda: d.index.infgram_prob(ids, token))
    show(f"infgram_prob({d.token(token)} | prompt)", f"{p.prob:.3f} = {p.count:,}/{p.prompt_count:,}", s)


def section_scoring(d: Demo) -> None:
    heading("Dense scoring of a held-out file (never indexed): P_∞ of every token")
    path = next((f for f in d.heldout if f.stat().st_size > 2000), d.heldout[0] if d.heldout else None)
    if path is None:
        print("  (no held-out file)")
        return
    ids = d.encode(path.read_text(encoding="utf-8", errors="replace"))[:2000]
    res, s = d.timed(lambda: d.index.score(ids))
    n = len(ids)
    seen = res.prompt_counts > 0
    sparse_right = (res.sparse & (res.probs > 0)).sum() / max(res.sparse.sum(), 1)
    show(f"score({path.relative_to(d.root)}, {n:,} tokens)", f"{n / s / 1e3:,.0f}k tokens/s", s)
    print(f"      mean effective n {res.effective_n.mean():.1f} (median {np.median(res.effective_n):.0f}), "
          f"P_∞(actual token) mean {res.probs[seen].mean():.2f}")
    print(f"      sparse at {res.sparse.mean():.0%} of positions, where the one possible token is the "
          f"actual one {sparse_right:.0%} of the time")


def section_documents(d: Demo) -> None:
    heading("Where does an n-gram come from? Occurrences -> documents and their metadata")
    for text in ("def _siftdown(heap, startpos, pos):", "class OrderedDict(dict):", "def __repr__(self):"):
        ids = d.encode(text)
        if d.index.count(ids):
            break
    else:  # a small corpus (--max-files): take an n-gram that surely occurs
        ids = _long_prompt(d, 8)
        text = d.tokenizer.decode(ids)

    def lookup() -> list:
        found = []
        for shard, pos in d.index.positions(ids, limit=3):
            doc_id, offset = d.index.locate(shard, pos)
            found.append((d.index.get_doc(doc_id), offset))
        return found

    found, s = d.timed(lookup)
    show(f"find+locate+get_doc({quote(text, 24)})", f"{d.index.count(ids):,} occurrences, first {len(found)}", s)
    for doc, offset in found:
        before = d.tokenizer.decode(doc.token_ids[:offset].tolist())
        line_no = before.count("\n") + 1
        path = doc.metadata.get("path", "?")
        try:
            path = str(Path(path).relative_to(d.root))
        except ValueError:
            pass
        print(f"      doc {doc.doc_id:>5}  {path}:{line_no}")


def section_neural(d: Demo) -> None:
    """generate() with and without InfiniGramLogitsProcessor, and the interpolated perplexity gain,
    with a tiny GPT-2 trained here on the indexed files (cached next to the index)."""
    heading("With a neural LM: generate() with the ∞-gram processor, and the perplexity gain")
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        print("  (needs torch and transformers: pip install 'infinigram_hf[hf]')")
        return
    model_dir = d.index.paths[0].parent / "tiny-gpt2"
    # One thread: a model this small gains little from two, and on a busy machine every
    # multi-threaded op waits for a descheduled thread.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _neural(d, model_dir)
    finally:
        torch.set_num_threads(threads)


def _neural(d: Demo, model_dir: Path) -> None:
    import torch
    from transformers import LogitsProcessorList

    from .demo_model import tiny_gpt2
    from .lm.mixture import interpolate, tune_lambdas
    from .hf.perplexity import token_scores
    from .hf.processor import InfiniGramLogitsProcessor

    trained = not (model_dir / "tiny_gpt2.json").exists()
    t0 = time.perf_counter()
    model, tok = tiny_gpt2(d.index, d.tokenizer, model_dir)
    info = json.loads((model_dir / "tiny_gpt2.json").read_text())
    steps = info["settings"]["steps"]
    print(f"  model: a tiny GPT-2 ({info['params'] / 1e6:.1f}M parameters) trained on the indexed files for only "
          f"{steps} steps ({info['seconds']:.0f} s; {model_dir}), so a very weak model; "
          f"{'trained' if trained else 'loaded'} in {format_seconds(time.perf_counter() - t0)}")
    eos = tok.eos_token_id
    prompt = "class Stack:\n    def __init__(self):\n        self."
    ids = torch.tensor([d.encode(prompt)])
    proc = InfiniGramLogitsProcessor(d.index, lambda_sparse=0.8, lambda_dense=0.5, tokenizer=tok)
    print(f"  greedy continuation of {quote(prompt, 60)}:")
    for label, procs in (("model alone", []), ("+ ∞-gram processor", [proc])):
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                                 pad_token_id=eos, logits_processor=LogitsProcessorList(procs))
        per_token = (time.perf_counter() - t0) / max(out.shape[1] - ids.shape[1], 1)
        text = d.tokenizer.decode(out[0, ids.shape[1]:].tolist())
        print(f"    {label:<20} {quote(text, 60):<62} [{format_seconds(per_token)}/token]")
    files = [f for f in d.heldout if f.stat().st_size > 1500][:6]
    if len(files) < 2:
        print("  (too few held-out files for the perplexity part)")
        return
    docs = [d.encode(f.read_text(encoding="utf-8", errors="replace"))[:1500] for f in files]
    n_val = max(1, len(docs) // 3)
    window = model.config.n_positions
    t0 = time.perf_counter()
    val = token_scores(model, tok, docs[:n_val], d.index, window=window, stride=window // 2, progress=False)
    test = token_scores(model, tok, docs[n_val:], d.index, window=window, stride=window // 2, progress=False)
    fit = tune_lambdas(val)
    res = interpolate(test, fit.lambda_sparse, fit.lambda_dense)
    print(f"  perplexity of {len(docs) - n_val} held-out files ({res.num_tokens:,} tokens, never indexed), λ tuned "
          f"on {n_val} other(s) (λ_sparse={fit.lambda_sparse:.2f}, λ_dense={fit.lambda_dense:.2f}):")
    print(f"    model alone {res.neural_perplexity:,.1f}   + ∞-gram {res.perplexity:,.1f}   "
          f"({res.relative_improvement:.0f}% of the gap to PPL 1 closed; {res.sparse_fraction:.0%} sparse estimates) "
          f"[{format_seconds(time.perf_counter() - t0)}]")
    print(f"    (a model trained for {steps} steps is very weak -- perplexity {res.neural_perplexity:,.0f} here -- "
          f"so the ∞-gram closes much of its gap: expect far less with a trained model, paper §5)")


# Each section is one function of the Demo context; later features add theirs here.
SECTIONS: List[Callable[[Demo], None]] = [
    section_counts, section_next_token, section_sparse, section_backoff, section_scoring,
    section_documents, section_neural,
]


# ------------------------------------------------------------------ setup and main


def prepare(out: Path, max_files: Optional[int], rebuild: bool, progress: bool) -> tuple[Any, Any, Path, List[Path]]:
    """Train (or load) the tokenizer and build (or open) the index; print what it took."""
    from .build.pipeline import build_index
    from .index.infinigram_index import InfiniGramIndex
    from ._core.tokenization import resolve_tokenizer

    root = Path(sysconfig.get_paths()["stdlib"])
    files, heldout = split_corpus(root, max_files)
    if not files:
        raise SystemExit(f"no .py files found under {root}")
    nbytes = sum(f.stat().st_size for f in files)
    print(f"corpus     {len(files):,} .py files of the standard library in {root} "
          f"({nbytes / 1e6:.1f} MB); {len(heldout)} more held out")
    out.mkdir(parents=True, exist_ok=True)
    stamp_path, tok_dir, index_dir = out / "demo.json", out / "tokenizer", out / "index"
    fingerprint = corpus_fingerprint(root, files)
    stamp = json.loads(stamp_path.read_text()) if stamp_path.exists() else {}
    cached = not rebuild and stamp.get("fingerprint") == fingerprint and tok_dir.is_dir() and index_dir.is_dir()
    if cached:
        tok = resolve_tokenizer(str(tok_dir))
        print(f"tokenizer  BPE, {len(tok):,} ids (cached in {tok_dir}; trained in {stamp['train_seconds']:.1f} s)")
    else:
        stamp_path.unlink(missing_ok=True)
        t0 = time.perf_counter()
        train_tokenizer(files, tok_dir)
        train_s = time.perf_counter() - t0
        tok = resolve_tokenizer(str(tok_dir))
        print(f"tokenizer  BPE, {len(tok):,} ids, trained locally with `tokenizers` in {train_s:.1f} s")
        t0 = time.perf_counter()
        build_index(files, index_dir, tokenizer=tok, overwrite=True, progress=progress)
        build_s = time.perf_counter() - t0
        stamp = {"fingerprint": fingerprint, "train_seconds": train_s, "build_seconds": build_s}
        stamp_path.write_text(json.dumps(stamp))
    t0 = time.perf_counter()
    index = InfiniGramIndex.open(index_dir)
    open_s = time.perf_counter() - t0
    n = index.num_tokens
    how = "cached" if cached else "built"
    print(f"index      {n:,} tokens in {index.num_docs:,} documents, {how} in {stamp['build_seconds']:.1f} s "
          f"(tokenize + suffix array), {n / stamp['build_seconds'] / 1e6:.2f}M tokens/s; opened in "
          f"{format_seconds(open_s)}")
    from ._core.format import official_bytes_per_token

    shard_dirs = [index_dir / s["dir"] for s in index.meta["shards"]]
    core = sum((d / f).stat().st_size for d in shard_dirs for f in ("tokens.bin", "sa.bin"))
    sa_width = index.meta["shards"][0]["sa_width"]
    print(f"disk       {core / n:.2f} bytes/token for tokens + suffix array ({index.token_width} + {sa_width}; "
          f"the official engine: {official_bytes_per_token(n, index.vocab_size)}); "
          f"{index.disk_bytes() / 1e6:.1f} MB in all files")
    print(f"           {nbytes / max(n, 1):.2f} bytes of source code per token")
    return index, tok, root, heldout


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m infinigram_hf.demo", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=None,
                   help=f"cache directory for the tokenizer and the index (default {default_out()})")
    p.add_argument("--max-files", type=int, default=None, help="index only this many files (faster)")
    p.add_argument("--rebuild", action="store_true", help="retrain the tokenizer and rebuild the index")
    p.add_argument("--runs", type=int, default=5, help="runs per query; latency is the median (default 5)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar while building")
    p.add_argument("--no-model", action="store_true",
                   help="skip the neural-LM section (it trains a tiny GPT-2 on first use)")
    args = p.parse_args(argv)
    if args.max_files is not None and args.max_files < 1:
        p.error(f"--max-files must be at least 1, got {args.max_files}")
    if args.runs < 1:
        p.error(f"--runs must be at least 1, got {args.runs}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    out = args.out or default_out()
    print("infinigram_hf demo: the ∞-gram language model over the Python standard library\n")
    index, tok, root, heldout = prepare(out, args.max_files, args.rebuild, not args.no_progress)
    demo = Demo(index=index, tokenizer=tok, root=root, heldout=heldout, runs=args.runs)
    with index:
        for section in SECTIONS:
            if args.no_model and section is section_neural:
                continue
            section(demo)
    print(f"\nLatencies are the median of {args.runs} runs through the Python API. Query it yourself:")
    print(f"  infinigram-hf query {out / 'index'} --text 'def main(' --top 5")
    print(f"demo finished in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
