"""InfiniGramIndex: the Python face of the C core. Token ids in, numpy arrays and small frozen
results out. Opening memory-maps the files; nothing is read until a query touches it."""
from __future__ import annotations

import contextlib
import hashlib
import json
import itertools
import os
import random
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np

from .._core import format as fmt
from .._core import hub, official
from .._core import tokenization as tk
from .._core.tokenization import resolve_tokenizer
from .._version import __version__
from .._core.args import INT64_MAX, int_arg, opt_int_arg
from .._core.containment import check_contained
from .._core.index_files import IndexDir
from .._core.errors import IndexFormatError, InfiniGramError
from .._core.ids import as_ids, as_token
from .._core.native import check, err_buffer, ffi, lib, ptr
from . import attribution, batch, search
from .difference import DifferenceIndex
from .official_sidecar import prepare_sidecar, read_sidecar
from .results import Document, FindResult, NextTokenDistribution, ProbResult, ScoreResult
from .states import SuffixCache

if TYPE_CHECKING:
    from .attribution import Attribution, Creativity
    from .results import BatchNextTokenDistributions, BatchProbResult, BatchScoreResult
    from .search import SearchResult

PathLike = Union[str, os.PathLike]
_OPEN_PATIENCE = 30.0  # seconds open() keeps retrying while the directory keeps being replaced
MAX_POSITIONS = 1_000_000  # positions() without a limit lists at most this many


class _Query:
    """Guard of one query (``with index.native_handle() as ix``): holds a reference to the C handle
    for as long as the query runs.

    The handle is an ``ffi.gc`` object whose last reference frees it (``ig_close``): close()
    drops the index's own reference, so queries already running in other threads finish on
    the mapped files and the last of them unmaps them. Nothing has to be undone when an
    exception lands anywhere in a query -- a KeyboardInterrupt between two bytecodes included
    -- because a frame's references go away with it. (An earlier version registered each
    query in a set that close() waited on; an interrupt landing between registering and the
    ``try`` left a key behind and close() then waited forever.)
    """

    __slots__ = ("_owner", "_ix")

    def __init__(self, owner: "InfiniGramIndex"):
        self._owner = owner

    def __enter__(self) -> Any:
        ix = self._ix = self._owner._ix
        if ix is None:
            raise InfiniGramError("the index is closed")
        return ix

    def __exit__(self, *exc: Any) -> None:
        self._ix = None


def _identity(path: Path) -> Optional[tuple]:
    """What changes when an index directory is replaced (build_index(..., overwrite=True)):
    the inodes of the directory and of its meta.json, and meta.json's time and size."""
    try:
        d, m = os.stat(path), os.stat(Path(path) / fmt.META_FILE)
    except OSError:
        return None
    return d.st_dev, d.st_ino, m.st_ino, m.st_mtime_ns, m.st_size


def _shard_sizes(ix: Any, shard: int) -> tuple[int, int, int, int]:
    """num_tokens, total_len, num_docs and suffix-array width of one shard of a C handle."""
    a, b, c = ffi.new("uint64_t *"), ffi.new("uint64_t *"), ffi.new("uint64_t *")
    w = ffi.new("int *")
    if lib.ig_shard_info(ix, shard, a, b, c, w) != 0:
        raise ValueError(f"shard {shard} out of range")
    return int(a[0]), int(b[0]), int(c[0]), int(w[0])


def _releaser(docmeta: list) -> Any:
    """The destructor of a C handle: unmap the index, close its metadata files (no reference to
    the index object, so that the handle never keeps it alive)."""
    def release(handle: Any) -> None:
        lib.ig_close(handle)
        for d in docmeta:
            d.close()
    return release


class InfiniGramIndex:
    """A read-only ∞-gram index (one or several index directories queried as one).

    Example:
        >>> index = InfiniGramIndex.open("my_index")           # doctest: +SKIP
        >>> index.count([464, 2068])                            # doctest: +SKIP
        >>> index.infgram_ntd(tokenizer.encode("def main(")).as_dict()  # doctest: +SKIP

    Thread-safe: any number of threads may query one index at once; the C calls release the GIL.
    """

    def __init__(self, paths: Sequence[Path], metas: list[dict[str, Any]],
                 roots: Optional[Sequence[IndexDir]] = None):
        self.paths = list(paths)
        self.meta = metas[0]
        self._metas = metas
        self._shard_mode: Union[bool, str] = "auto"
        self._ix = None
        self._lock = threading.Lock()  # serializes close()
        self._given_tokenizer: Any = None  # from_pretrained / open(tokenizer=): see `tokenizer`
        self.hub_config: dict[str, Any] = {}
        with contextlib.ExitStack() as stack:  # every directory descriptor is closed on the way out
            if roots is None:
                roots = [stack.enter_context(IndexDir.open_root(p)) for p in self.paths]
            # shard directories opened inside the index directory's descriptor, without following
            # links; the C core opens their files the same way (native/src/files.c)
            shards = [stack.enter_context(r.subdir(s["dir"])) for r, m in zip(roots, metas) for s in m["shards"]]
            # official shards (read in place) are named by their files' suffix inside their directory
            suffixes = [s.get("suffix") for m in metas for s in m["shards"]]
            sides = [stack.enter_context(IndexDir.open_root(s["sidecar"])) if s.get("sidecar") else None
                     for m in metas for s in m["shards"]]
            official_meta = [bool(m.get("official")) for m in metas for _ in m["shards"]]
            self._shard_dirs = [d.path for d in shards]
            names = [ffi.new("char[]", os.fsencode(d.path)) for d in shards]
            sfx = [ffi.new("char[]", x.encode()) if x is not None else ffi.NULL for x in suffixes]
            out = ffi.new("ig_index **")
            err = err_buffer()
            side_names = [ffi.new("char[]", os.fsencode(d.path)) if d else ffi.NULL for d in sides]
            check(lib.ig_open_official_at(out, ffi.new("int[]", [d.fd for d in shards]), ffi.new("char *[]", names),
                                          ffi.new("char *[]", sfx), ffi.new("int[]", [d.fd if d else -1 for d in sides]),
                                          ffi.new("char *[]", side_names), len(shards),
                                          int(self.meta["token_width"] or 0) if any(official_meta) else 0,
                                          int(self.meta["vocab_size"] or 0) if any(official_meta) else 0,
                                          lib.IG_OPEN_HUB_LINKS if any(r.hub_links for r in roots) else 0,
                                          err, len(err)), err)
            raw, docmeta = out[0], []
            try:
                info = ffi.new("ig_info *")
                lib.ig_get_info(raw, info)
                self._info = info
                docs = [_shard_sizes(raw, i)[2] for i in range(len(shards))]
                self._fill_official_sizes(raw, metas)
                self._check_against_meta()
                for d, n, x, m in zip(shards, docs, suffixes,
                                      [m for m in metas for _ in m["shards"]]):
                    docmeta.append(fmt.DocMetadata(d, n) if x is None else
                                   official.OfficialMetadata(d, x, n, bool(m["official"]["metadata"])))
            except BaseException:  # nothing of a failed open stays open (1,000 failures leaked 1,000 fds)
                for d in docmeta:
                    d.close()
                lib.ig_close(raw)
                raise
        self._state_size = int(lib.ig_state_size(raw))
        self._shard_docs = np.concatenate([[0], np.cumsum(docs, dtype=np.int64)]).astype(np.int64)
        self._docmeta = docmeta
        # The C handle and the metadata files are released together, with the handle's last
        # reference (see _Query): a query holding the handle can still read both after close().
        self._ix = ffi.gc(raw, _releaser(docmeta))

    # ------------------------------------------------------------ opening and closing

    @classmethod
    def open(cls, path: Union[PathLike, Sequence[PathLike]],
             subtract: Union[PathLike, Sequence[PathLike], None] = None, *,
             verify: bool = False, vocab_size: Optional[int] = None, eos_token_id: Optional[int] = None,
             tokenizer: Any = None, token_width: Optional[int] = None,
             cache_dir: Optional[PathLike] = None,
             parallel_shards: Union[bool, str] = "auto") -> "Union[InfiniGramIndex, DifferenceIndex]":
        """Open an index directory, or a list of them as one index whose counts add up, or an
        index served by `infinigram-hf serve` (``http://host:port/NAME``: a `RemoteIndex`).

        With `subtract` (index directories of a subset of these documents), a `DifferenceIndex`
        answering as an index built without those documents (see infinigram_hf.index.difference;
        `verify=True` also spot-checks the subset property).

        A directory in the official infini-gram layout (``tokenized.0``, ``table.0``,
        ``offset.0``, ...; no meta.json) is served in place, read-only. Its files do not hold
        the vocabulary, so pass `vocab_size` (or a `tokenizer` -- an object, a name or a
        directory -- whose length and eos id are taken), and `eos_token_id` if documents end with one; `token_width` (1, 2, 4 bytes:
        the official ``token_dtype``) is inferred from the file sizes when unambiguous. End of
        document is reported as the separator id, as for our own indexes. It may be opened
        together with our own indexes of the same vocabulary. A `tokenizer` given (for any
        index, checked against its vocabulary) becomes ``index.tokenizer``, which `trace` and
        the CLI then use.

        `cache_dir` (one official directory among `path`): its sidecar directory (see
        infinigram_hf.index.official_sidecar; ``infinigram-hf prepare``), built there at the
        first open when missing, refused when stale. With it the smoothed InfiniGramLM,
        count-of-counts and `difference()` work on the official files too, and short contexts
        are answered from the precomputed cache; nothing is written into the official directory.

        `parallel_shards` (an index of several shards): "auto" searches the shards at once, on a
        thread per shard kept by the index, while its files are being read from the device (cold)
        and one after another while they are cached; True / False always / never. Answers are
        the same either way (see `parallel_shards` below and docs/PERFORMANCE.md).
        """
        if isinstance(path, str) and path.split("://", 1)[0].lower() in ("http", "https") and "://" in path:
            if subtract is not None:
                raise ValueError("subtract= is not available for a remote index")
            from .remote import RemoteIndex
            return RemoteIndex(path)  # type: ignore[return-value]
        if isinstance(tokenizer, (str, os.PathLike)):  # a name or directory: its length is needed below
            tokenizer = resolve_tokenizer(str(tokenizer))
        official_args = dict(vocab_size=vocab_size, eos_token_id=eos_token_id, tokenizer=tokenizer,
                             token_width=token_width)
        if subtract is not None:  # the result owns both indexes
            full = cls.open(path, **official_args, cache_dir=cache_dir, parallel_shards=parallel_shards)
            try:
                removed = cls.open(subtract, parallel_shards=parallel_shards)
            except BaseException:
                full.close()
                raise
            return DifferenceIndex(full, removed, owns=True, verify=verify)
        paths = [Path(path)] if isinstance(path, (str, os.PathLike)) else [Path(p) for p in path]
        if not paths:
            raise ValueError("no index path given")
        if cache_dir is not None:
            theirs = [p for p in paths if official.looks_official(p)]
            if len(theirs) != 1:
                raise ValueError(f"cache_dir= is the sidecar of one official infini-gram directory; {len(theirs)} of "
                                 f"the paths are official ones")
            official_args["sidecar"] = (theirs[0], prepare_sidecar(theirs[0], cache_dir, **official_args))
        # A directory replaced while it is being opened (build_index(..., overwrite=True) in
        # another process) could give meta.json of one build and shard files of the other:
        # opening again when the directory changed meanwhile gives one whole index, old or new.
        # Retries back off (with jitter) for up to _OPEN_PATIENCE seconds: a rebuild takes far
        # longer than an open, except in the load test, which rebuilds a tiny index nonstop.
        deadline = time.monotonic() + _OPEN_PATIENCE
        for attempt in itertools.count():
            before = [_identity(p) for p in paths]
            try:
                index = cls._open_once(paths, official_args)
            except InfiniGramError:
                if [_identity(p) for p in paths] == before or time.monotonic() > deadline:
                    raise
            else:
                if [_identity(p) for p in paths] == before:
                    try:
                        index.parallel_shards = parallel_shards
                    except BaseException:
                        index.close()
                        raise
                    return index if tokenizer is None else cls._given(index, tokenizer)
                index.close()
                if time.monotonic() > deadline:
                    raise InfiniGramError(f"{paths[0]}: replaced {attempt + 1} times while being opened")
            time.sleep(random.uniform(0, min(0.05, 0.0005 * 2 ** attempt)))
        raise AssertionError("unreachable")

    @staticmethod
    def _given(index: "InfiniGramIndex", tokenizer: Any) -> "InfiniGramIndex":
        """The index with open(tokenizer=) as its `tokenizer` (checked against its vocabulary
        first, as any tokenizer given later is)."""
        try:
            tk.check_tokenizer(index, tokenizer)
        except BaseException:
            index.close()
            raise
        index.tokenizer = tokenizer
        return index

    @classmethod
    def from_pretrained(cls, repo_id_or_path: Union[str, os.PathLike], revision: Optional[str] = None,
                        cache_dir: Optional[Union[str, os.PathLike]] = None,
                        allow_patterns: Optional[Sequence[str]] = None, token: Optional[str] = None, *,
                        repo_type: str = "model", load_tokenizer: bool = True, progress: bool = True,
                        **open_kw: Any) -> "InfiniGramIndex":
        """Open an index stored in a HuggingFace Hub repository (ours or official-format),
        downloading what the cache lacks with huggingface_hub (resumable, its progress bars;
        offline with ``HF_HUB_OFFLINE=1``), or a local directory the same way.

        `allow_patterns` loads only some shards (e.g. ``["*.0"]`` or ``["shard_00000/*"]``; the
        index is then those shards). An official-format repository's ``infinigram.json`` gives
        vocab_size / eos_token_id / token_width / tokenizer; `open_kw` (vocab_size=, tokenizer=,
        ...) override it. When the repository names a tokenizer (a Hub id, a subfolder, or our
        ``tokenizer/``) and `load_tokenizer`, it is loaded into ``index.tokenizer``.

        Example:
            >>> index = InfiniGramIndex.from_pretrained("org/pile-val-index", allow_patterns=["*.0"])  # doctest: +SKIP
        """
        local = Path(repo_id_or_path)
        if local.is_dir():
            path, config = local, {}
            if (local / hub.CONFIG_FILE).is_file():
                config = json.loads((local / hub.CONFIG_FILE).read_text())
        else:
            path, config = hub.download_index(str(repo_id_or_path), revision=revision, cache_dir=cache_dir,
                                              allow_patterns=allow_patterns, token=token, repo_type=repo_type,
                                              progress=progress)
        tok = open_kw.pop("tokenizer", None)
        if isinstance(tok, (str, os.PathLike)):
            tok = resolve_tokenizer(str(tok))
        named = config.get("tokenizer")
        if tok is None and load_tokenizer:
            if named:
                sub = path / named
                tok = resolve_tokenizer(str(sub) if sub.is_dir() else named)
            elif (path / "tokenizer").is_dir():
                tok = resolve_tokenizer(str(path / "tokenizer"))
        if official.looks_official(path):
            for key in ("vocab_size", "eos_token_id", "token_width"):
                if open_kw.get(key) is None and config.get(key) is not None:
                    open_kw[key] = config[key]
            index = cls.open(path, tokenizer=tok, **open_kw)
        else:
            index = cls.open(path, **open_kw)
        index.tokenizer = tok
        index.hub_config = config
        return index

    def push_to_hub(self, repo_id: str, *, token: Optional[str] = None, private: bool = False,
                    revision: Optional[str] = None, corpus: Optional[str] = None,
                    commit_message: str = "Upload ∞-gram index", repo_type: str = "model") -> str:
        """Upload this index (one directory) to a Hub repository with a generated README.md (corpus,
        tokenizer, sizes, format, package version); an official-format index also gets
        infinigram.json so that from_pretrained opens it without arguments. Large files go
        through the Hub's LFS protocol. Returns the commit URL."""
        if len(self.paths) != 1:
            raise ValueError("push_to_hub uploads one index directory; this index opens several")
        is_official = bool(self.meta.get("official"))
        tok = getattr(self, "tokenizer", None)
        tok_name = getattr(tok, "name_or_path", None) or self.meta.get("tokenizer_name")
        config = None
        if is_official:
            config = {"format": "infini-gram", "vocab_size": self.vocab_size, "eos_token_id": self.eos_token_id,
                      "token_width": self.token_width, "tokenizer": tok_name}
        info = {"meta": {**self.meta, "num_tokens": self.num_tokens, "num_docs": self.num_docs},
                "official": is_official, "tokenizer": tok_name, "corpus": corpus, "disk_bytes": self.disk_bytes(),
                "version": __version__}
        card = hub.model_card(info, repo_id)
        return hub.upload_index(self.paths[0], repo_id, card, config=config, token=token, private=private,
                                revision=revision, commit_message=commit_message, repo_type=repo_type)

    @classmethod
    def _open_once(cls, paths: list[Path], official_args: Optional[dict[str, Any]] = None) -> "InfiniGramIndex":
        official_args = official_args or {}
        with contextlib.ExitStack() as stack:
            roots = []
            for p in paths:
                check_contained(p)  # (links that lead outside, anywhere in the index: e.g. tokenizer/)
                roots.append(stack.enter_context(IndexDir.open_root(p)))
            kinds = [official.looks_official(p) for p in paths]
            metas = [None if k else fmt.read_meta(r) for k, r in zip(kinds, roots)]
            ours = [m for m in metas if m is not None]
            if ours:  # a union with our own indexes: theirs is the default vocabulary
                official_args = {**official_args}
                for key in ("vocab_size", "token_width", "eos_token_id"):
                    if official_args.get(key) is None:
                        official_args[key] = ours[0].get(key)
            for i, (p, r) in enumerate(zip(paths, roots)):
                if kinds[i]:
                    layout = official.detect(r)
                    tok = official_args.get("tokenizer")
                    w, v, eos = official.resolve_vocab(layout, official_args.get("token_width"),
                                                       official_args.get("vocab_size"),
                                                       official_args.get("eos_token_id"), tok)
                    name = getattr(tok, "name_or_path", None) if tok is not None else None
                    metas[i] = official.synthetic_meta(layout, w, v, eos, name)
                    side = official_args.get("sidecar")
                    if side is not None and side[0] == p:
                        dirs = read_sidecar(side[1], r, layout, w, v)
                        if dirs is None:
                            raise IndexFormatError(f"{side[1]}: the sidecar disappeared while opening")
                        for sh, d in zip(metas[i]["shards"], dirs):
                            sh["sidecar"] = str(side[1] / d)
                        metas[i]["sidecar"] = str(side[1])
            ours = [m for m in metas if not m.get("official")]
            if ours and len(ours) < len(metas):  # a union of ours and official: ours set the vocabulary
                for m in metas:
                    if m.get("official"):
                        for key in ("tokenizer_name", "vocab_fingerprint", "eos_token_id"):
                            if m.get(key) is None:
                                m[key] = ours[0].get(key)
            first = metas[0]
            for p, m in zip(paths[1:], metas[1:]):
                for key in ("vocab_size", "token_width", "vocab_fingerprint", "tokenizer_name"):
                    if m.get(key) != first.get(key):
                        raise ValueError(
                            f"cannot open {paths[0]} and {p} as one index: their {key} differ "
                            f"({fmt.shown(first.get(key))} vs {fmt.shown(m.get(key))})")
            return cls(paths, metas, roots)

    @staticmethod
    def _fill_official_sizes(raw: Any, metas: list[dict[str, Any]]) -> None:
        """An official directory's sizes come from its files (it has no meta.json)."""
        i = 0
        for m in metas:
            if m.get("official"):
                sizes = [_shard_sizes(raw, i + k) for k in range(len(m["shards"]))]
                m["num_tokens"] = sum(x[0] for x in sizes)
                m["num_docs"] = sum(x[2] for x in sizes)
                for sh, x in zip(m["shards"], sizes):
                    sh.update(num_tokens=x[0], total_len=x[1], num_docs=x[2], sa_width=x[3])
            i += len(m["shards"])

    def _check_against_meta(self) -> None:
        info = self._info
        for key, value in (("token_width", info.token_width), ("vocab_size", info.vocab_size),
                           ("separator_id", info.separator)):
            if self.meta[key] != value:
                raise IndexFormatError(
                    f"{self.paths[0] / fmt.META_FILE}: {key} = {fmt.shown(self.meta[key])} but the shard files say {value}")
        want_tokens = sum(m["num_tokens"] for m in self._metas)
        want_docs = sum(m["num_docs"] for m in self._metas)
        if (want_tokens, want_docs) != (info.num_tokens, info.num_docs):
            raise IndexFormatError(
                f"{self.paths[0] / fmt.META_FILE}: says {want_tokens} tokens / {want_docs} documents, "
                f"the shard files hold {info.num_tokens} / {info.num_docs}")

    def __reduce__(self) -> tuple:
        """Pickled (and deep-copied) as its directories, reopened on load: DataLoader workers
        under spawn / forkserver, `datasets.map` with num_proc. The digest of meta.json makes the
        pickle -- and so `datasets`' fingerprint of a function using the index -- change when the
        index is rebuilt, and stay the same across processes otherwise."""
        digest = hashlib.sha256(json.dumps(self._metas, sort_keys=True, default=str).encode()).hexdigest()
        return _reopen, ([str(p) for p in self.paths], digest, self._shard_mode)

    def close(self) -> None:
        """Close the index: queries started from now on raise; queries already running in
        other threads finish, and the files are unmapped (and the metadata files closed) when
        the last of them returns. Idempotent."""
        with self._lock:
            ix, self._ix = self._ix, None
            del ix  # (released now, or when the last running query drops its reference)

    def __enter__(self) -> "InfiniGramIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    _SHARD_MODES = {"auto": "IG_SHARDS_AUTO", True: "IG_SHARDS_PARALLEL", False: "IG_SHARDS_SERIAL"}

    @property
    def parallel_shards(self) -> Union[bool, str]:
        """How a query steps through the shards: "auto" (on a thread per shard while the index
        is cold, else one after another), True (always on the threads) or False (never). The
        answers do not depend on it. Settable; kept when the index is pickled."""
        return self._shard_mode

    @parallel_shards.setter
    def parallel_shards(self, mode: Union[bool, str]) -> None:
        if not any(mode is k or (isinstance(k, str) and mode == k) for k in self._SHARD_MODES):
            raise ValueError(f'parallel_shards must be "auto", True or False, got {mode!r}')
        with self.native_handle() as ix:
            check(lib.ig_set_shard_mode(ix, getattr(lib, self._SHARD_MODES[mode])), err_buffer())
        self._shard_mode = mode

    @property
    def closed(self) -> bool:
        """Whether close() was called (queries then raise)."""
        return self._ix is None

    def native_handle(self) -> _Query:
        """``with index.native_handle() as ix:`` the C ``ig_index *`` for the duration of one call
        into the core (the other layers' way in; close() never frees it under a running call).
        Raises InfiniGramError when the index is closed."""
        return _Query(self)

    # ------------------------------------------------------------ properties

    @property
    def num_tokens(self) -> int:
        """Tokens in the corpus, document separators excluded."""
        return int(self._info.num_tokens)

    @property
    def num_docs(self) -> int:
        """Documents in the corpus (all shards, all directories)."""
        return int(self._info.num_docs)

    @property
    def vocab_size(self) -> int:
        """Valid token ids are 0 .. vocab_size - 1."""
        return int(self._info.vocab_size)

    @property
    def separator_id(self) -> int:
        """Reserved id between documents; next-token distributions report end-of-document under it."""
        return int(self._info.separator)

    @property
    def token_width(self) -> int:
        """Bytes per stored token id: 1, 2 or 4, chosen from the vocabulary size."""
        return int(self._info.token_width)

    @property
    def num_shards(self) -> int:
        """Shards of the index (all directories of a union)."""
        return int(self._info.n_shards)

    @property
    def metas(self) -> list[dict[str, Any]]:
        """meta.json of every index directory (several for a union); `meta` is the first."""
        return list(self._metas)

    @property
    def state_size(self) -> int:
        """int64 values of one decoding state (`ig_state_size`: suffix length, count, a range per shard)."""
        return self._state_size

    @property
    def tokenizer_name(self) -> Optional[str]:
        """Name of the tokenizer the index was built with ("bytes-utf8" for bytes; None for ids)."""
        return self.meta.get("tokenizer_name")

    @property
    def vocab_fingerprint(self) -> Optional[str]:
        """sha256 of the tokenizer's (token, id) table, checked against tokenizers given later."""
        return self.meta.get("vocab_fingerprint")

    @property
    def eos_token_id(self) -> Optional[int]:
        """The tokenizer's EOS id recorded at build time (None without one)."""
        return self.meta.get("eos_token_id")

    def _shard_info(self, shard: int) -> tuple[int, int, int, int]:
        with self.native_handle() as ix:
            return _shard_sizes(ix, shard)

    def disk_bytes(self) -> int:
        """Bytes of all index files on disk."""
        return sum(f.stat().st_size for p in self.paths for f in Path(p).rglob("*") if f.is_file())

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.num_tokens} tokens, {self.num_docs} docs"
        return f"InfiniGramIndex({', '.join(map(str, self.paths))}: {state}, vocab {self.meta['vocab_size']})"

    # ------------------------------------------------------------ counting

    def _text_ids(self, text: str, name: str) -> np.ndarray:
        """Text as token ids with the index's own tokenizer (saved with it, or bytes)."""
        tok = self._light_tokenizer()
        if tok is None:
            raise ValueError(f"{name}: text needs the index's tokenizer (none is saved in the index); pass token ids")
        return as_ids(tk.encode_texts(tok, [text])[0], name)

    def count(self, ids: Any) -> int:
        """Occurrences of the n-gram `ids` (the empty n-gram counts every token); `ids` may be
        text when the index has a tokenizer (saved with it, or bytes)."""
        buf = None
        if type(ids) is list and all(type(t) is int for t in ids):  # fast path (a few µs)
            try:
                buf = ffi.new("uint32_t[]", ids)
            except (OverflowError, TypeError):
                buf = None
        elif type(ids) is np.ndarray and ids.ndim == 1 and ids.dtype.kind in "ui":  # any width, as fast
            if ids.dtype == np.uint32 and ids.flags.c_contiguous:
                buf = ffi.from_buffer("uint32_t[]", ids)
            elif ids.dtype.kind == "u" and ids.itemsize < 4:
                buf = ffi.from_buffer("uint32_t[]", ids.astype(np.uint32))
            else:
                try:
                    buf = ffi.new("uint32_t[]", ids.tolist())
                except (OverflowError, TypeError):
                    buf = None
        elif isinstance(ids, str):
            ids = self._text_ids(ids, "ids")
            buf = ffi.from_buffer("uint32_t[]", ids)
        if buf is not None:
            ix = self._ix  # the _Query protocol, inlined: this reference keeps it mapped
            c = lib.ig_count_fast(ix, buf, len(ids)) if ix is not None else -1
            del ix
            if c >= 0:
                return int(c)
        q = as_ids(ids)
        out = ffi.new("uint64_t *")
        err = err_buffer()
        with self.native_handle() as ix:
            rc = lib.ig_count(ix, ptr(q, "uint32_t"), len(q), out, err, len(err))
        check(rc, err)
        return int(out[0])

    def count_batch(self, queries: Any, *, offsets: Any = None, lengths: Any = None, padding_side: str = "right",
                    n_threads: int = 0) -> np.ndarray:
        """Counts of a batch of n-grams in one C call (int64 array).

        A batch is a list of id sequences, one flat array with ``offsets`` (query i is
        ``queries[offsets[i]:offsets[i+1]]``), or a padded 2-D array / tensor with ``lengths``
        (the real ids at the ``padding_side`` end: "left" as HF pads for generation).
        ``n_threads``: 0 = the CPUs this process may use."""
        return batch.count_batch(self, queries, offsets=offsets, lengths=lengths, padding_side=padding_side,
                                 n_threads=n_threads)

    def find(self, ids: Any) -> FindResult:
        """Suffix-array range [lo, hi) of the n-gram in every shard."""
        q = self._text_ids(ids, "ids") if isinstance(ids, str) else as_ids(ids)
        n = self.num_shards
        lo, hi = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        err = err_buffer()
        with self.native_handle() as ix:
            rc = lib.ig_find(ix, ptr(q, "uint32_t"), len(q), ptr(lo, "int64_t"), ptr(hi, "int64_t"), err, len(err))
        check(rc, err)
        return FindResult(count=int((hi - lo).sum()), lo=lo, hi=hi)

    # ------------------------------------------------------------ probabilities

    def _prompt(self, prompt: Any) -> np.ndarray:
        return self._text_ids(prompt, "prompt") if isinstance(prompt, str) else as_ids(prompt, "prompt")

    def _token(self, token: Any) -> np.ndarray:
        if isinstance(token, str):  # one token, as text
            t = self._text_ids(token, "token")
            if len(t) != 1:
                raise ValueError(f"token: {token!r} is {len(t)} tokens, not one")
            return t
        return as_token(token)

    def _prob(self, fn: Any, prompt: Any, token: Any) -> ProbResult:
        q, t = self._prompt(prompt), self._token(token)
        out = ffi.new("ig_prob *")
        qp = ptr(q, "uint32_t")
        with self.native_handle() as ix:  # no message buffer unless the call fails (then asked again)
            rc = fn(ix, qp, len(q), int(t[0]), out, ffi.NULL, 0)
            if rc:
                err = err_buffer()
                rc = fn(ix, qp, len(q), int(t[0]), out, err, len(err))
                check(rc, err)
        return ProbResult.from_counts(out.count, out.prompt_count, out.suffix_len, out.sparse)

    def ngram_prob(self, prompt: Any, token: int) -> ProbResult:
        """P(token | prompt) with n = len(prompt) + 1 and no backoff (0 when the prompt is unseen)."""
        return self._prob(lib.ig_ngram_prob, prompt, token)

    def infgram_prob(self, prompt: Any, token: int) -> ProbResult:
        """∞-gram P(token | prompt): backs off to the longest suffix of the prompt that occurs."""
        return self._prob(lib.ig_infgram_prob, prompt, token)

    def infgram_prob_batch(self, prompts: Any, tokens: Any, *, infinite: bool = True, offsets: Any = None,
                           lengths: Any = None, padding_side: str = "right", n_threads: int = 0) -> "BatchProbResult":
        """P_∞(tokens[i] | prompts[i]) for a batch in one C call (threads across prompts);
        ``infinite=False`` gives fixed-n probabilities. Batch forms as for `count_batch`;
        ``tokens``: one id per prompt (or one for all)."""
        return batch.prob_batch(self, prompts, tokens, infinite=infinite, offsets=offsets, lengths=lengths,
                                padding_side=padding_side, n_threads=n_threads)

    def ngram_ntd(self, prompt: Any, *, max_support: Optional[int] = None) -> NextTokenDistribution:
        """Exact next-token distribution after the whole prompt (n = len(prompt) + 1);
        ``max_support`` as for `infgram_ntd`."""
        return batch.ntd_one(self, self._prompt(prompt), infinite=False, max_support=max_support)

    def infgram_suffix_len(self, prompt: Any) -> int:
        """Length of the longest suffix of the prompt that occurs in the corpus."""
        q = self._prompt(prompt)
        out = ffi.new("int64_t *")
        err = err_buffer()
        with self.native_handle() as ix:
            rc = lib.ig_infgram_suffix(ix, ptr(q, "uint32_t"), len(q), out, err, len(err))
        check(rc, err)
        return int(out[0])

    def infgram_ntd(self, prompt: Any, *, max_support: Optional[int] = None) -> NextTokenDistribution:
        """Exact ∞-gram next-token distribution: that of the longest suffix that occurs.

        ``max_support``: None = exact (the default). An int caps the work: a context with more
        occurrences and no precomputed distribution is sampled; the result says ``approximate``.
        """
        return batch.ntd_one(self, self._prompt(prompt), infinite=True, max_support=max_support)

    def infgram_ntd_batch(self, prompts: Any, *, infinite: bool = True, max_support: Optional[int] = None,
                          offsets: Any = None, lengths: Any = None, padding_side: str = "right", n_threads: int = 0,
                          max_entries: Optional[int] = batch.DEFAULT_MAX_ENTRIES) -> "BatchNextTokenDistributions":
        """Exact ∞-gram next-token distributions of a batch in one C call, as CSR arrays
        (``infinite=False``: fixed n). ``max_support``: sample contexts with more occurrences
        (rows flagged approximate); ``max_entries``: cap on the result's entries over all rows.
        Batch forms as for `count_batch`."""
        return batch.ntd_batch(self, prompts, infinite=infinite, max_support=max_support, offsets=offsets,
                               lengths=lengths, padding_side=padding_side, n_threads=n_threads,
                               max_entries=max_entries)

    def suffix_cache(self, *, max_states: int = 65536, max_distributions: int = 4096, lookback: int = 16,
                     max_support: Optional[int] = None) -> "SuffixCache":
        """A `SuffixCache` for decoding loops: ∞-gram states and distributions keyed by context,
        each generated token costing about one binary search (see `infinigram_hf.index.states`
        for the caps)."""
        return SuffixCache(self, max_states=max_states, max_distributions=max_distributions, lookback=lookback,
                           max_support=max_support)

    # ------------------------------------------------------------ dense scoring

    def score(self, ids: Any) -> ScoreResult:
        """P_∞(ids[i] | ids[:i]) for every position, in time linear in len(ids) whatever the
        corpus (about one search per token); Ctrl-C stops it within a second. Text is
        tokenized with the index's tokenizer."""
        q = self._text_ids(ids, "ids") if isinstance(ids, str) else as_ids(ids)
        bad = np.flatnonzero(q >= self.vocab_size)  # (named here: the batch call would say "sequences[0]")
        if len(bad):
            t, i = int(q[bad[0]]), int(bad[0])
            what = "the document separator, not a token" if t == self.separator_id else \
                f"outside the vocabulary (size {self.vocab_size})"
            raise ValueError(f"ids: id {t} at position {i} is {what}")
        return batch.score_batch(self, q, offsets=np.array([0, len(q)], dtype=np.int64), n_threads=1)[0]

    def score_batch(self, sequences: Any, *, offsets: Any = None, lengths: Any = None, padding_side: str = "right",
                    n_threads: int = 0) -> "BatchScoreResult":
        """Dense scoring of a batch of sequences in one C call (long ones split across threads,
        exactly). Batch forms as for `count_batch`."""
        return batch.score_batch(self, sequences, offsets=offsets, lengths=lengths, padding_side=padding_side,
                                 n_threads=n_threads)

    # ------------------------------------------------------------ tracing texts to the corpus

    def attribute(self, ids: Any, *, min_len: int = 1, max_count: Optional[int] = None, delimiters: Any = None,
                  word_starts: Any = None, max_docs: int = 10, context: Optional[int] = 16) -> "Attribution":
        """The verbatim spans `ids` shares with the corpus, with counts, unigram log-probability
        sums and documents; see `infinigram_hf.index.attribution.attribute_batch` for the arguments.

        Example:
            >>> a = index.attribute(ids, min_len=4, max_count=1000)          # doctest: +SKIP
            >>> [(s.start, s.end, s.count, s.docs[0].doc_id) for s in a.ranked()]  # doctest: +SKIP
        """
        return attribution.attribute_batch(self, [as_ids(ids)], min_len=min_len, max_count=max_count,
                                           delimiters=delimiters, word_starts=word_starts, max_docs=max_docs,
                                           context=context, n_threads=1)[0]

    def attribute_batch(self, texts: Any, **kw: Any) -> "list[Attribution]":
        """`attribute` for a batch of texts in one C call (threads across texts)."""
        return attribution.attribute_batch(self, texts, **kw)

    def creativity(self, ids: Any) -> "Creativity":
        """The longest corpus match at every position of `ids` (`.match_len`, `.rs`) and the
        creativity index (`.index(n)`: share of tokens in no corpus span of n tokens or more)."""
        return attribution.creativity_batch(self, [as_ids(ids)], n_threads=1)[0]

    def creativity_batch(self, texts: Any, **kw: Any) -> "list[Creativity]":
        """`creativity` for a batch of texts in one C call (threads across texts)."""
        return attribution.creativity_batch(self, texts, **kw)

    # ------------------------------------------------------------ documents

    def doc_shard(self, doc_id: int) -> tuple[int, int]:
        """(shard, document number inside the shard) of a global document id."""
        if isinstance(doc_id, bool) or not isinstance(doc_id, (int, np.integer)):
            raise ValueError(f"doc_id must be an int, got {doc_id!r}")
        if not 0 <= doc_id < self.num_docs:
            raise ValueError(f"doc_id {doc_id} out of range (the index has {self.num_docs} documents)")
        shard = int(np.searchsorted(self._shard_docs, doc_id, side="right") - 1)
        return shard, int(doc_id - self._shard_docs[shard])

    def get_doc(self, doc_id: int, *, decode: bool = True) -> Document:
        """A document's token ids, metadata and text by its global id (0 .. num_docs - 1).

        ``text`` is the ids decoded with the index's tokenizer (raw bytes for a byte-level
        index, the saved tokenizer.json otherwise); None when the index has no tokenizer or
        ``decode=False`` (ids only, no decoding cost)."""
        shard, local = self.doc_shard(doc_id)
        length = ffi.new("int64_t *")
        err = err_buffer()
        with self.native_handle() as ix:  # the metadata too: its file is closed with the handle's last reference
            lib.ig_get_doc(ix, shard, local, ffi.NULL, 0, length, err, len(err))
            out = np.empty(int(length[0]), dtype=np.uint32)
            rc = lib.ig_get_doc(ix, shard, local, ptr(out, "uint32_t"), len(out), length, err, len(err))
            check(rc, err)
            metadata = self._docmeta[shard].get(local)
        text = None
        if decode:
            tok = self._light_tokenizer()
            text = tok.decode(out.tolist()) if tok is not None else None
        return Document(doc_id=int(doc_id), token_ids=out, metadata=metadata, shard=shard, text=text)

    def _light_tokenizer(self) -> Any:
        """The tokenizer for decoding, read without transformers (None: ids only)."""
        try:
            return tk.index_tokenizer(self, light=True)
        except ImportError:  # a saved tokenizer.json, but `tokenizers` is not installed
            return None

    @property
    def tokenizer(self) -> Any:
        """The tokenizer given for the index (``open(tokenizer=)``, or the one a Hub repository
        names, loaded by ``from_pretrained``); else the tokenizer saved with the index, loaded as
        a transformers tokenizer (never running code from it); a `ByteTokenizer` for a byte-level
        index; None for an index of token ids. Without transformers installed, the saved
        tokenizer.json read with `tokenizers`."""
        if self._given_tokenizer is not None:
            return self._given_tokenizer
        try:
            return tk.index_tokenizer(self)
        except ImportError:
            return self._light_tokenizer()

    @tokenizer.setter
    def tokenizer(self, tok: Any) -> None:
        self._given_tokenizer = tok

    def locate(self, shard: int, position: int) -> tuple[int, int]:
        """Corpus position in a shard -> (global document id, offset inside the document)."""
        shard = int_arg("shard", shard, 0, self.num_shards - 1)
        position = int_arg("position", position, 0, INT64_MAX)
        doc, off = ffi.new("int64_t *"), ffi.new("int64_t *")
        err = err_buffer()
        with self.native_handle() as ix:
            rc = lib.ig_locate(ix, shard, position, doc, off, err, len(err))
        check(rc, err)
        return int(self._shard_docs[shard] + doc[0]), int(off[0])

    def positions(self, ids: Any, limit: Optional[int] = None) -> list[tuple[int, int]]:
        """(shard, position) of occurrences of the n-gram, up to `limit` of them. Without a
        limit, all of them -- refused (ValueError) for an n-gram with more than MAX_POSITIONS
        occurrences, which a single call would spend seconds and gigabytes listing."""
        limit = opt_int_arg("limit", limit, 0, INT64_MAX, f"all, at most MAX_POSITIONS = {MAX_POSITIONS:,}")
        found = self.find(ids)
        if limit is None and found.count > MAX_POSITIONS:
            raise ValueError(f"the n-gram occurs {found.count:,} times, more than MAX_POSITIONS = {MAX_POSITIONS:,}; "
                             f"pass limit= to list the first ones")
        out: list[tuple[int, int]] = []
        pos = ffi.new("int64_t *")
        err = err_buffer()
        with self.native_handle() as ix:
            for shard, (lo, hi) in enumerate(zip(found.lo.tolist(), found.hi.tolist())):
                for rank in range(lo, hi):
                    if limit is not None and len(out) >= limit:
                        return out
                    check(lib.ig_sa_position(ix, shard, rank, pos, err, len(err)), err)
                    out.append((shard, int(pos[0])))
        return out

    def search_docs(self, query: Any, maxnum: int = 10, *, max_clause_freq: int = 50_000,
                    max_diff_tokens: Optional[int] = None, seed: int = 0, tokenizer: Any = None,
                    decode: Optional[bool] = None, max_spans: int = 1_000_000) -> "SearchResult":
        """Documents containing an n-gram, or satisfying a CNF of n-grams (AND of ORs), as the
        paper's SEARCHDOC; see `infinigram_hf.index.search.search_docs` for the arguments.

        Example:
            >>> index.search_docs([["import os"], ["sys.argv", "argparse"]]).count  # doctest: +SKIP
        """
        return search.search_docs(self, query, maxnum, max_clause_freq=max_clause_freq, max_diff_tokens=max_diff_tokens,
                           seed=seed, tokenizer=tokenizer, decode=decode, max_spans=max_spans)

    # ------------------------------------------------------------ index algebra

    def difference(self, removed: "InfiniGramIndex", *, verify: bool = False) -> "DifferenceIndex":
        """This index minus `removed`, an index of a subset of its documents: every query answers
        as an index built without them (the paper's subtractive property). Neither is closed
        with the result."""
        return DifferenceIndex(self, removed, verify=verify)


def as_index(index: Any, name: str = "index") -> Any:
    """An open index from what a caller may pass: an `InfiniGramIndex` or `DifferenceIndex` as
    it is, an index directory (str or PathLike) opened, anything else a ValueError naming `name`."""
    from .remote import RemoteIndex  # (the client: standard library only)
    if isinstance(index, (InfiniGramIndex, DifferenceIndex, RemoteIndex)) or getattr(index, "is_routed", False):
        return index  # (is_routed: a ShardRouter over shard groups, infinigram_hf.distributed)
    if isinstance(index, (str, os.PathLike)):
        return InfiniGramIndex.open(index)  # a directory, or http(s)://host:port/NAME
    raise ValueError(f"{name} must be an InfiniGramIndex, a RemoteIndex or an index directory or URL, "
                     f"got {type(index).__name__}")


def _reopen(paths: list, digest: str, parallel_shards: Union[bool, str] = "auto") -> "InfiniGramIndex":
    """Unpickle an index: open its directories again (`digest` only marks the build)."""
    return InfiniGramIndex.open(paths[0] if len(paths) == 1 else paths, parallel_shards=parallel_shards)

