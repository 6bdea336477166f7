#!/usr/bin/env python3
"""Evaluation corpora, the shared BPE tokenizer and the pre-tokenized token files.

Two corpora (one document = one source file):

* ``stdlib`` -- every ``.py`` file of the running Python's standard library
  (``sysconfig.get_paths()['stdlib']``, recursive, ``site-packages`` /
  ``dist-packages`` skipped), ~31 MB of text.  Files are assigned to a split by
  a hash of their path relative to the stdlib root (see :func:`split_of`):
  ``reference`` (~90 %), ``validation`` (~5 %), ``heldout`` (~5 %).
* ``linux`` -- the ``.c`` / ``.h`` files of Debian's ``linux-source`` package
  (``/usr/src/linux-source-*.tar.xz``; install it with
  ``apt-get update && apt-get install -y linux-source``).  Only ``*.c``/``*.h``
  members are extracted, into ``<cache>/linux-src``.

A byte-level BPE tokenizer (vocab 32000, ``<|endoftext|>`` = id 0) is trained
with the ``tokenizers`` library on the stdlib ``reference`` split and saved as
``<cache>/tokenizer.json``.  :func:`load_tokenizer` wraps it as a
``transformers.PreTrainedTokenizerFast``.

Token files (all in the cache dir; ``.npy`` format, load with ``np.load``):

* ``<name>.tokens.npy``   flat ``uint16`` token ids of all documents, concatenated
  (no separator / EOS tokens between documents);
* ``<name>.offsets.npy``  ``uint64``, ``n_docs + 1`` entries, document ``i`` is
  ``tokens[offsets[i]:offsets[i+1]]``;
* ``<name>.files.json``   the document list (path, split, bytes, tokens) in
  document order.

``<name>`` is ``stdlib`` (all stdlib files, sorted by relative path),
``stdlib.reference`` / ``stdlib.validation`` / ``stdlib.heldout`` (the same
documents, per split, same order) and ``linux`` (sorted by relative path).

The cache dir is ``$INFINIGRAM_EVAL_CACHE`` or ``~/.cache/infinigram_hf_eval``.

CLI::

    python eval/corpora.py all                 # everything below, idempotent
    python eval/corpora.py files stdlib        # print the file list with splits
    python eval/corpora.py extract-linux
    python eval/corpora.py train-tokenizer [--force]
    python eval/corpora.py tokenize stdlib|linux [--force]
    python eval/corpora.py info                # token counts of what is cached
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

# --------------------------------------------------------------------------- #
# Paths / constants
# --------------------------------------------------------------------------- #

VOCAB_SIZE = 32000
EOS_TOKEN = "<|endoftext|>"
EOS_TOKEN_ID = 0
SPLITS = ("reference", "validation", "heldout")
SPLIT_SALT = "infinigram_hf-eval-v1"
TOKENIZER_FILE = "tokenizer.json"
LINUX_TARBALL_GLOB = "/usr/src/linux-source-*.tar.xz"


def cache_dir() -> Path:
    """Cache directory for big, non-versioned artefacts (created on demand)."""
    d = Path(os.environ.get("INFINIGRAM_EVAL_CACHE")
             or os.path.expanduser("~/.cache/infinigram_hf_eval")).absolute()
    d.mkdir(parents=True, exist_ok=True)
    return d


def _log(msg: str) -> None:
    print(f"[corpora {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- #
# Splits
# --------------------------------------------------------------------------- #

def split_of(relpath: str, salt: str = SPLIT_SALT) -> str:
    """Deterministic split of a document given its (relative, '/'-separated) path.

    sha256(salt + path) -> first 8 bytes as integer -> bucket = value % 1000;
    bucket < 900 -> 'reference', < 950 -> 'validation', else 'heldout'.
    Independent of the machine, of the file contents and of Python's hash seed.
    """
    h = hashlib.sha256((salt + "\0" + relpath.replace(os.sep, "/")).encode("utf-8")).digest()
    bucket = int.from_bytes(h[:8], "little") % 1000
    if bucket < 900:
        return "reference"
    if bucket < 950:
        return "validation"
    return "heldout"


# --------------------------------------------------------------------------- #
# Corpus file lists
# --------------------------------------------------------------------------- #

def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def stdlib_files() -> List[str]:
    """Relative paths ('/'-separated, sorted) of all .py files of the stdlib."""
    root = stdlib_root()
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        # skip third-party package dirs (and don't descend into them)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in ("site-packages", "dist-packages", "__pycache__"))
        for fn in filenames:
            if fn.endswith(".py"):
                p = Path(dirpath, fn)
                if p.is_file():
                    out.append(p.relative_to(root).as_posix())
    out.sort()
    return out


def stdlib_split_files(split: Optional[str] = None) -> Dict[str, List[str]] | List[str]:
    """File lists by split (dict) or, given ``split``, that split's list."""
    by: Dict[str, List[str]] = {s: [] for s in SPLITS}
    for f in stdlib_files():
        by[split_of(f)].append(f)
    return by[split] if split is not None else by


def linux_src_dir() -> Path:
    return cache_dir() / "linux-src"


def linux_tarball() -> Path:
    cands = sorted(glob.glob(LINUX_TARBALL_GLOB))
    if not cands:
        raise FileNotFoundError(
            f"no {LINUX_TARBALL_GLOB}; run: apt-get update && apt-get install -y linux-source")
    return Path(cands[-1])


def extract_linux(force: bool = False) -> Path:
    """Extract only the *.c / *.h members of the linux-source tarball into the cache."""
    dest = linux_src_dir()
    done = dest / ".extracted"
    if done.exists() and not force:
        return dest
    tarball = linux_tarball()
    dest.mkdir(parents=True, exist_ok=True)
    _log(f"extracting *.c/*.h from {tarball} -> {dest}")
    t0 = time.time()
    subprocess.run(["tar", "-xJf", str(tarball), "-C", str(dest), "--wildcards",
                    "--no-same-owner", "*.c", "*.h"], check=True)
    done.write_text(tarball.name + "\n")
    _log(f"extracted in {time.time() - t0:.1f}s")
    return dest


def linux_files() -> List[str]:
    """Relative paths (sorted) of the extracted linux .c/.h files."""
    root = extract_linux()
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in filenames:
            if fn.endswith((".c", ".h")):
                p = Path(dirpath, fn)
                if p.is_file() and not p.is_symlink():
                    out.append(p.relative_to(root).as_posix())
    out.sort()
    return out


def corpus_root(corpus: str) -> Path:
    if corpus == "stdlib":
        return stdlib_root()
    if corpus == "linux":
        return linux_src_dir()
    raise ValueError(f"unknown corpus {corpus!r}")


def corpus_files(corpus: str) -> List[str]:
    if corpus == "stdlib":
        return stdlib_files()
    if corpus == "linux":
        return linux_files()
    raise ValueError(f"unknown corpus {corpus!r}")


def read_text(path: Path | str) -> str:
    """File contents as str (UTF-8, undecodable bytes replaced by U+FFFD)."""
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def iter_texts(corpus: str, files: Optional[Sequence[str]] = None) -> Iterator[str]:
    root = corpus_root(corpus)
    for f in (corpus_files(corpus) if files is None else files):
        yield read_text(root / f)


# --------------------------------------------------------------------------- #
# Tokenizer
# --------------------------------------------------------------------------- #

def tokenizer_path() -> Path:
    return cache_dir() / TOKENIZER_FILE


def train_tokenizer(force: bool = False, vocab_size: int = VOCAB_SIZE) -> Path:
    """Train the byte-level BPE on the stdlib reference split; save tokenizer.json."""
    path = tokenizer_path()
    if path.exists() and not force:
        return path
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    files = stdlib_split_files("reference")
    _log(f"training byte-level BPE (vocab {vocab_size}) on {len(files)} stdlib reference files")
    t0 = time.time()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],          # -> id 0
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(iter_texts("stdlib", files), trainer=trainer, length=len(files))
    assert tok.token_to_id(EOS_TOKEN) == EOS_TOKEN_ID, tok.token_to_id(EOS_TOKEN)
    tmp = path.with_suffix(".json.tmp")
    tok.save(str(tmp))
    os.replace(tmp, path)
    _log(f"tokenizer trained in {time.time() - t0:.1f}s, vocab={tok.get_vocab_size()} -> {path}")
    return path


def load_raw_tokenizer():
    """The ``tokenizers.Tokenizer`` (trains it first if missing)."""
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(train_tokenizer()))


def load_tokenizer():
    """The tokenizer as ``transformers.PreTrainedTokenizerFast``.

    eos = bos = unk = pad = ``<|endoftext|>`` (id 0); no special tokens are
    added by ``encode`` (byte-level post-processor only).
    """
    from transformers import PreTrainedTokenizerFast
    t = PreTrainedTokenizerFast(
        tokenizer_file=str(train_tokenizer()),
        eos_token=EOS_TOKEN, bos_token=EOS_TOKEN, unk_token=EOS_TOKEN, pad_token=EOS_TOKEN,
    )
    assert t.eos_token_id == EOS_TOKEN_ID
    return t


# --------------------------------------------------------------------------- #
# Tokenized corpora
# --------------------------------------------------------------------------- #

def tokens_path(name: str) -> Path:
    return cache_dir() / f"{name}.tokens.npy"


def offsets_path(name: str) -> Path:
    return cache_dir() / f"{name}.offsets.npy"


def files_path(name: str) -> Path:
    return cache_dir() / f"{name}.files.json"


def load_tokens(name: str, mmap: bool = True) -> Tuple[np.ndarray, np.ndarray]:
    """(tokens uint16[N], offsets uint64[n_docs+1]) of a tokenized corpus / split.

    ``name``: 'stdlib', 'stdlib.reference', 'stdlib.validation', 'stdlib.heldout', 'linux'.
    """
    if not tokens_path(name).exists():
        corpus = name.split(".")[0]
        tokenize_corpus(corpus)
    tokens = np.load(tokens_path(name), mmap_mode="r" if mmap else None)
    offsets = np.load(offsets_path(name))
    return tokens, offsets


# The linux splits of the mixing eval (issue 20): the datastore is the first linux documents (in
# path order) holding >= 200M tokens, i.e. the `linux200m` index; the documents after it are split
# by position: every 1000th is held out, every 1000th shifted by 500 is validation (for fitting
# lambdas and mixing models), the rest trains the linux GPT-2. Disjoint by construction.
LINUX_DATASTORE_TOKENS = 200_000_000
LINUX_SPLITS = ("datastore", "train", "validation", "heldout")


def linux_split_docs(split: str) -> np.ndarray:
    """Document indices (into the `linux` corpus) of one linux split, in corpus order."""
    if split not in LINUX_SPLITS:
        raise ValueError(f"split must be one of {LINUX_SPLITS}, got {split!r}")
    _, offsets = load_tokens("linux")
    n_store = int(np.searchsorted(offsets, LINUX_DATASTORE_TOKENS, side="left"))
    if split == "datastore":
        return np.arange(n_store)
    rest = np.arange(n_store, len(offsets) - 1)
    pos = np.arange(len(rest)) % 1000
    mask = {"heldout": pos == 0, "validation": pos == 500, "train": (pos != 0) & (pos != 500)}[split]
    return rest[mask]


def linux_split_tokens(split: str, max_tokens: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(tokens, offsets) of a linux split's documents, like :func:`load_tokens` (a copy in memory);
    ``max_tokens`` keeps only the first documents holding at most that many tokens."""
    tokens, offsets = load_tokens("linux")
    parts, ends = [], [0]
    for d in linux_split_docs(split):
        doc = tokens[offsets[d]:offsets[d + 1]]
        if max_tokens is not None and ends[-1] + len(doc) > max_tokens:
            break
        parts.append(np.asarray(doc))
        ends.append(ends[-1] + len(doc))
    flat = np.concatenate(parts) if parts else np.zeros(0, np.uint16)
    return flat, np.asarray(ends, dtype=np.uint64)


def iter_docs(name: str) -> Iterator[np.ndarray]:
    tokens, offsets = load_tokens(name)
    for i in range(len(offsets) - 1):
        yield tokens[offsets[i]:offsets[i + 1]]


def load_file_list(name: str) -> List[dict]:
    if not files_path(name).exists():
        tokenize_corpus(name.split(".")[0])
    return json.loads(files_path(name).read_text())["files"]


def _encode_batch(tok, texts: List[str]) -> List[List[int]]:
    enc = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
    return [e.ids for e in enc(texts, add_special_tokens=False)]


def _npy_from_raw(raw: Path, dst: Path, dtype, n: int, chunk: int = 1 << 26) -> None:
    """Copy a raw little-endian binary file into an .npy file (chunked)."""
    src = np.memmap(raw, dtype=dtype, mode="r", shape=(n,)) if n else np.zeros(0, dtype)
    out = np.lib.format.open_memmap(dst.with_suffix(".tmp.npy"), mode="w+", dtype=dtype, shape=(n,))
    for s in range(0, n, chunk):
        out[s:s + chunk] = src[s:s + chunk]
    out.flush()
    del out, src
    os.replace(dst.with_suffix(".tmp.npy"), dst)


def tokenize_corpus(corpus: str, force: bool = False, batch_bytes: int = 32 << 20) -> Dict[str, int]:
    """Tokenize a corpus into ``<corpus>.tokens.npy`` / ``.offsets.npy`` / ``.files.json``.

    Streams over the files in batches of ~``batch_bytes`` of text, encoding each
    batch with the (multi-threaded) ``encode_batch``; token ids are appended to a
    raw file, so memory stays bounded by one batch.  For ``stdlib`` the per-split
    files ``stdlib.<split>.*`` are written as well.  Returns summary counts.
    """
    name = corpus
    if tokens_path(name).exists() and offsets_path(name).exists() and files_path(name).exists() and not force:
        meta = json.loads(files_path(name).read_text())
        return meta["summary"]
    tok = load_raw_tokenizer()
    assert tok.get_vocab_size() < 65535
    files = corpus_files(corpus)
    root = corpus_root(corpus)
    _log(f"tokenizing {corpus}: {len(files)} files from {root}")
    t0 = time.time()
    raw = cache_dir() / f"{name}.tokens.raw.tmp"
    offsets = np.zeros(len(files) + 1, dtype=np.uint64)
    doc_ntok = np.zeros(len(files), dtype=np.int64)
    doc_bytes = np.zeros(len(files), dtype=np.int64)
    n_tok = 0
    n_bytes = 0
    n_eos = 0
    with open(raw, "wb") as fout:
        i = 0
        last_report = t0
        while i < len(files):
            batch, size = [], 0
            j = i
            while j < len(files) and (size < batch_bytes or not batch):
                txt = read_text(root / files[j])
                batch.append(txt)
                b = len(txt.encode("utf-8"))
                doc_bytes[j] = b
                size += b
                j += 1
            for k, ids in enumerate(_encode_batch(tok, batch)):
                arr = np.asarray(ids, dtype=np.uint16)
                n_eos += int(np.count_nonzero(arr == EOS_TOKEN_ID))
                fout.write(arr.tobytes())
                doc_ntok[i + k] = len(arr)
                n_tok += len(arr)
                offsets[i + k + 1] = n_tok
            n_bytes += size
            i = j
            now = time.time()
            if now - last_report > 15 or i == len(files):
                last_report = now
                _log(f"  {i}/{len(files)} files, {n_bytes / 1e6:.1f} MB, {n_tok / 1e6:.2f}M tokens, "
                     f"{now - t0:.1f}s ({n_bytes / 1e6 / max(now - t0, 1e-9):.1f} MB/s)")
    _npy_from_raw(raw, tokens_path(name), np.uint16, n_tok)
    raw.unlink()
    np.save(offsets_path(name), offsets)
    t_tok = time.time() - t0
    summary = {"corpus": corpus, "docs": len(files), "tokens": int(n_tok), "bytes": int(n_bytes),
               "bytes_per_token": n_bytes / max(n_tok, 1), "eos_tokens_in_text": n_eos,
               "tokenize_seconds": round(t_tok, 2), "tokenizer": str(tokenizer_path())}
    records = [{"path": f, "bytes": int(doc_bytes[k]), "tokens": int(doc_ntok[k])} for k, f in enumerate(files)]
    if corpus == "stdlib":
        for r in records:
            r["split"] = split_of(r["path"])
    _write_json(files_path(name), {"summary": summary, "root": str(root), "files": records})
    _log(f"{corpus}: {len(files)} docs, {n_bytes / 1e6:.1f} MB, {n_tok:,} tokens "
         f"({summary['bytes_per_token']:.2f} B/token) in {t_tok:.1f}s")

    if corpus == "stdlib":
        tokens = np.load(tokens_path(name))
        split_summ = {}
        for split in SPLITS:
            idx = [k for k, r in enumerate(records) if r["split"] == split]
            parts = [tokens[offsets[k]:offsets[k + 1]] for k in idx]
            lens = np.array([len(p) for p in parts], dtype=np.uint64)
            s_off = np.concatenate([np.zeros(1, np.uint64), np.cumsum(lens, dtype=np.uint64)])
            s_tok = np.concatenate(parts) if parts else np.zeros(0, np.uint16)
            sname = f"stdlib.{split}"
            np.save(tokens_path(sname), s_tok.astype(np.uint16))
            np.save(offsets_path(sname), s_off)
            ss = {"corpus": sname, "docs": len(idx), "tokens": int(len(s_tok)),
                  "bytes": int(sum(records[k]["bytes"] for k in idx))}
            _write_json(files_path(sname), {"summary": ss, "root": str(root),
                                            "files": [records[k] for k in idx]})
            split_summ[split] = ss
            _log(f"  {sname}: {ss['docs']} docs, {ss['bytes'] / 1e6:.2f} MB, {ss['tokens']:,} tokens")
        summary["splits"] = split_summ
        meta = json.loads(files_path(name).read_text())
        meta["summary"] = summary
        _write_json(files_path(name), meta)
    return summary


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def info() -> Dict[str, dict]:
    out = {}
    for name in ("stdlib", "stdlib.reference", "stdlib.validation", "stdlib.heldout", "linux"):
        if files_path(name).exists():
            out[name] = json.loads(files_path(name).read_text())["summary"]
    return out


# --------------------------------------------------------------------------- #
# CLI
# --------------------------------------------------------------------------- #

def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("files", help="print the file list (stdlib: with split)")
    p.add_argument("corpus", choices=["stdlib", "linux"])
    p.add_argument("--split", choices=SPLITS)
    sub.add_parser("extract-linux").add_argument("--force", action="store_true")
    sub.add_parser("train-tokenizer").add_argument("--force", action="store_true")
    p = sub.add_parser("tokenize")
    p.add_argument("corpus", choices=["stdlib", "linux"])
    p.add_argument("--force", action="store_true")
    p = sub.add_parser("all", help="extract linux, train tokenizer, tokenize both corpora")
    p.add_argument("--force", action="store_true")
    sub.add_parser("info")
    a = ap.parse_args(argv)

    if a.cmd == "files":
        if a.corpus == "stdlib":
            root = stdlib_root()
            counts = {s: [0, 0] for s in SPLITS}
            for f in stdlib_files():
                s = split_of(f)
                if a.split and s != a.split:
                    continue
                sz = (root / f).stat().st_size
                counts[s][0] += 1
                counts[s][1] += sz
                print(f"{s}\t{sz}\t{f}")
            for s, (n, b) in counts.items():
                print(f"# {s}: {n} files, {b / 1e6:.2f} MB", file=sys.stderr)
            print(f"# root: {root}", file=sys.stderr)
        else:
            root = linux_src_dir()
            n = b = 0
            for f in linux_files():
                sz = (root / f).stat().st_size
                n += 1
                b += sz
                print(f"{sz}\t{f}")
            print(f"# linux: {n} files, {b / 1e6:.2f} MB, root {root}", file=sys.stderr)
    elif a.cmd == "extract-linux":
        extract_linux(force=a.force)
    elif a.cmd == "train-tokenizer":
        train_tokenizer(force=a.force)
    elif a.cmd == "tokenize":
        print(json.dumps(tokenize_corpus(a.corpus, force=a.force), indent=1))
    elif a.cmd == "all":
        train_tokenizer(force=a.force)
        tokenize_corpus("stdlib", force=a.force)
        extract_linux(force=a.force)
        tokenize_corpus("linux", force=a.force)
        print(json.dumps(info(), indent=1))
    elif a.cmd == "info":
        print(json.dumps(info(), indent=1))


if __name__ == "__main__":
    main()
