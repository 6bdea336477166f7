"""Index repositories on the HuggingFace Hub: download (or find in the cache) and upload, with
huggingface_hub. Used by ``InfiniGramIndex.from_pretrained`` / ``push_to_hub``.

Downloads go into huggingface_hub's standard cache (``snapshot_download``: ``<cache_dir>/
models--org--name/snapshots/<commit>/``, links into the repository's ``blobs/``), and the index is
opened from that snapshot folder as it is: no copy (index_files.py follows the cache's own links,
``../../blobs/<hash>``, and no other). A download is resumed inside a file by huggingface_hub,
only missing files are fetched again, blobs are shared between revisions; offline
(``HF_HUB_OFFLINE=1``) the cached snapshot is used as it is.

An official-format repository describes itself in ``infinigram.json``:
``{"format": "infini-gram", "vocab_size": 32000, "eos_token_id": 2, "token_width": 2,
"tokenizer": "meta-llama/Llama-2-7b-hf"}`` (a Hub id, or a subfolder of the repository).

Example:
    >>> path, config = download_index("org/pile-index", allow_patterns=["*.0"])  # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from .index_files import HUB_BLOB_LINK, hub_snapshot

CONFIG_FILE = "infinigram.json"
_INDEX_PATTERNS = ["meta.json", CONFIG_FILE, "README.md", "tokenizer/*", "shard_*/*",
                   "tokenized*", "table*", "offset*", "metadata*", "metaoff*", "unigram*"]


def default_cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _check_ids(repo_id: str, revision: Optional[str]) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?", repo_id) or ".." in repo_id:
        raise ValueError(f"repo_id {repo_id!r} is neither an existing directory nor a Hub repository id")
    rev = revision or "main"
    if not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", rev) or ".." in rev:
        raise ValueError(f"revision {revision!r} is not a valid revision")


def download_index(repo_id: str, *, revision: Optional[str] = None, cache_dir: Optional[Union[str, os.PathLike]] = None,
                   allow_patterns: Optional[Sequence[str]] = None, token: Optional[str] = None,
                   repo_type: str = "model", progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """(local folder, infinigram.json content or {}) of an index repository, downloading what is
    missing. `allow_patterns` narrows the download (e.g. ``["*.0", "shard_00000/*"]`` for one
    shard); meta.json, infinigram.json, README.md and the tokenizer always come along."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    _check_ids(repo_id, revision)
    patterns = None
    if allow_patterns is not None:
        patterns = list(allow_patterns) + ["meta.json", CONFIG_FILE, "README.md", "tokenizer/*"]
    if not progress:
        disable_progress_bars()
    try:
        path = Path(snapshot_download(repo_id, revision=revision, repo_type=repo_type,
                                      cache_dir=str(cache_dir) if cache_dir is not None else None,
                                      allow_patterns=patterns or _INDEX_PATTERNS, token=token))
    finally:
        if not progress:
            enable_progress_bars()
    config: dict[str, Any] = {}
    if (path / CONFIG_FILE).is_file():
        try:
            config = json.loads((path / CONFIG_FILE).read_text())
        except ValueError:
            raise ValueError(f"{path / CONFIG_FILE}: not valid JSON") from None
        if not isinstance(config, dict):
            raise ValueError(f"{path / CONFIG_FILE}: not a JSON object")
    return path, config


def model_card(info: dict[str, Any], repo_id: str) -> str:
    """A README.md describing an index: corpus, tokenizer, sizes, format, package version."""
    meta = info.get("meta", {})
    official = info.get("official", False)
    tokenizer = info.get("tokenizer") or meta.get("tokenizer_name") or "none (pre-tokenized ids or bytes)"
    lines = [
        "---",
        "tags:",
        "- infini-gram",
        "- infinigram_hf",
        "- n-gram",
        "---",
        f"# {repo_id}",
        "",
        "An ∞-gram index (suffix arrays over a tokenized corpus: n-gram counts with unbounded n), "
        + ("in the official infini-gram layout (tokenized/table/offset per shard)." if official else
           "in the infinigram_hf format."),
        "",
        "| | |",
        "|---|---|",
        f"| corpus | {info.get('corpus') or 'not stated'} |",
        f"| tokenizer | {tokenizer} |",
        f"| vocabulary size | {meta.get('vocab_size')} |",
        f"| token width | {meta.get('token_width')} bytes |",
        f"| tokens | {meta.get('num_tokens'):,} |" if isinstance(meta.get("num_tokens"), int) else "| tokens | ? |",
        f"| documents | {meta.get('num_docs'):,} |" if isinstance(meta.get("num_docs"), int) else "| documents | ? |",
        f"| shards | {len(meta.get('shards', []))} |",
        f"| size on disk | {info.get('disk_bytes', 0) / 2**20:,.1f} MiB |",
        f"| written by | infinigram_hf {info.get('version', '?')} |",
        "",
        "## Use",
        "",
        "```python",
        "from infinigram_hf import InfiniGramIndex",
        f"index = InfiniGramIndex.from_pretrained({repo_id!r})",
        "index.count(tokenizer.encode(\"hello world\"))",
        "```",
        "",
    ]
    return "\n".join(lines)


def upload_index(folder: Path, repo_id: str, card: str, *, config: Optional[dict[str, Any]] = None,
                 token: Optional[str] = None, private: bool = False, revision: Optional[str] = None,
                 commit_message: str = "Upload ∞-gram index", repo_type: str = "model") -> str:
    """Create the repository if needed and upload the index folder (large files go through the
    Hub's LFS protocol, several files per commit), a README.md and infinigram.json. Returns the
    commit URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    repo = hub_snapshot(folder)
    blobs = repo / "blobs" if repo is not None else None
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type=repo_type)
    ops = []
    for p in sorted(Path(folder).rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if not p.is_file() or rel.startswith(".cache/") or rel in ("README.md", CONFIG_FILE):
            continue
        if p.is_symlink():  # only the Hub cache's own links (an index opened from a snapshot)
            target = os.readlink(p)
            if not (blobs is not None and HUB_BLOB_LINK.fullmatch(target) and p.resolve().parent == blobs):
                continue
        ops.append(CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(p.resolve())))
    ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode()))
    if config is not None:
        ops.append(CommitOperationAdd(path_in_repo=CONFIG_FILE, path_or_fileobj=json.dumps(config, indent=1).encode()))
    info = api.create_commit(repo_id, ops, commit_message=commit_message, revision=revision, repo_type=repo_type)
    return str(info.commit_url)
