"""What every `infinigram-hf` subcommand uses: errors, JSON output, id parsing, opening an
index and its tokenizer, reading documents from files."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence

from .._core.errors import InfiniGramError
from .._core.safe_text import printable, printable_json

PROG = "infinigram-hf"
EXIT_USAGE = 2
END_OF_DOCUMENT = "<end of document>"


class CLIError(Exception):
    """Bad command-line input: reported as one line, exit status 2."""


# ------------------------------------------------------------------ helpers for every subcommand


def to_json(obj: Any, indent: int = 0) -> str:
    """JSON, indented by object, with lists of plain values and small objects kept on one line.

    >>> print(to_json({"ids": [1, 2], "top": [{"id": 1}]}))
    {
      "ids": [1, 2],
      "top": [
        {"id": 1}
      ]
    }
    """
    flat = json.dumps(obj, ensure_ascii=False)
    if not isinstance(obj, (dict, list)) or not obj or len(flat) <= 100 and not any(
            isinstance(v, (dict, list)) and v for v in (obj.values() if isinstance(obj, dict) else obj)):
        return flat
    pad = "  " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(str(k), ensure_ascii=False)}: {to_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if all(not isinstance(v, (dict, list)) for v in obj):
        return flat  # a list of plain values stays on one line however long
    return "[\n" + ",\n".join(pad + to_json(v, indent + 1) for v in obj) + "\n" + "  " * indent + "]"


def print_json(obj: Any) -> None:
    """Print a JSON document on stdout (UTF-8, see to_json; the control and invisible
    characters JSON leaves raw are written as \\u escapes, so file content cannot drive the
    terminal)."""
    sys.stdout.write(printable_json(to_json(obj)) + "\n")


_ID = re.compile(r"[+-]?[0-9]{1,20}", re.ASCII)


def parse_ids(text: str) -> List[int]:
    """'1,2, 3' -> [1, 2, 3]; '' -> [] (the empty query). ASCII digits only: int() would also
    read '١٢' (Arabic-Indic) or '１２' (fullwidth) as 12."""
    parts = [p.strip() for p in text.replace(" ", ",").split(",") if p.strip()]
    bad = next((p for p in parts if not _ID.fullmatch(p)), None)
    if bad is not None:
        raise CLIError(f"--ids must be comma-separated integers (ASCII digits), got {text[:80]!r}")
    return [int(p) for p in parts]


def parse_columns(text: Optional[str]) -> List[str]:
    """'id,url' -> ['id', 'url']."""
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def open_index(paths: Sequence[str], *, vocab_size: Optional[int] = None, token_width: Optional[int] = None,
               tokenizer: Any = None) -> Any:
    """Open one index directory, or several as one index. vocab_size / token_width / tokenizer
    (an object) describe an index in the official infini-gram layout, whose files lack them
    (ignored for our own indexes)."""
    from ..index.infinigram_index import InfiniGramIndex

    for p in paths:
        if not Path(p).is_dir():
            raise CLIError(f"index directory not found: {p}")
    return InfiniGramIndex.open(paths[0] if len(paths) == 1 else list(paths), vocab_size=vocab_size,
                                token_width=token_width, tokenizer=tokenizer)


def add_official_arguments(p: Any, *, subject: str = "an official infini-gram index", tokenizer: bool = False) -> None:
    """--vocab-size / --token-width (and with `tokenizer`, --tokenizer): what an official-layout
    index does not store. `subject` names the index they describe in the help."""
    p.add_argument("--vocab-size", type=int, default=None,
                   help=f"{subject}: its vocabulary size (default: the --tokenizer's length)")
    if tokenizer:
        p.add_argument("--tokenizer", default=None, help=f"{subject}: the tokenizer (its length gives the vocabulary)")
    p.add_argument("--token-width", type=int, choices=(1, 2, 4), default=None,
                   help=f"{subject}: bytes per token (its token_dtype u8/u16/u32; default: from the files)")


def official_tokenizer(args: argparse.Namespace) -> Any:
    """The --tokenizer of add_official_arguments(tokenizer=True), loaded (None when not given)."""
    if not args.tokenizer:
        return None
    from .._core.tokenization import resolve_tokenizer

    return resolve_tokenizer(args.tokenizer)


def cli_tokenizer(name: Optional[str]) -> Any:
    """--tokenizer as an object where it can be loaded without transformers: 'bytes', or a
    tokenizer.json file (e.g. the one an official index was tokenized with, read with
    `tokenizers` alone); else the name itself (a directory or hub name, loaded later), or None."""
    from .._core import tokenization as tk

    if name is None:
        return None
    if name == "bytes":
        return tk.ByteTokenizer()
    path = Path(name)
    if path.is_file():
        try:
            return tk.SavedTokenizer(path)
        except Exception as exc:  # tokenizers' own exception type for a file it cannot read
            raise CLIError(f"--tokenizer {name}: not a tokenizer.json file ({printable(str(exc))[:200]})") from None
    return name


def load_index_tokenizer(index: Any, name: Optional[str] = None) -> Any:
    """The tokenizer to turn --text into ids for `index` (`tokenization.index_tokenizer`, reading
    a saved tokenizer.json without transformers): `name` ('bytes', a local directory or a hub
    name), checked against the index; else the one saved in the index; else bytes."""
    from .._core import tokenization as tk

    tok = tk.index_tokenizer(index, (tk.BYTES_NAME if name == "bytes" else name) or None, light=True)
    if tok is None:
        raise CLIError(
            f"the index was built with tokenizer {index.tokenizer_name!r}, which is not saved in it; "
            "pass --tokenizer NAME_OR_PATH, or --ids")
    return tok


def token_text(tok: Any, token_id: int, separator_id: int) -> Optional[str]:
    """A token id shown as text (bytes that are not UTF-8 on their own as \\xNN)."""
    from .._core.tokenization import ByteTokenizer

    if token_id == separator_id:
        return END_OF_DOCUMENT
    if tok is None:
        return None
    if isinstance(tok, ByteTokenizer):
        return bytes([token_id]).decode("utf-8", errors="backslashreplace")
    return tok.decode([token_id])


TEXT_SUFFIXES = {".txt", ".py", ".md", ".c", ".h", ".rst", ".json", ".html"}


def _iter_files(paths: List[str]) -> Iterator[Path]:
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(f for f in p.rglob("*") if f.is_file() and (f.suffix in TEXT_SUFFIXES or f.suffix == ".jsonl"))
        elif p.is_file():
            yield p
        else:
            raise CLIError(f"file not found: {p}")


def read_documents(paths: List[str], text_column: str = "text") -> Iterator[dict]:
    """Documents from files: a .jsonl file gives one per line (a dict with `text_column`), any
    other file is one document; directories are walked. Each has "text" (+ its fields / "path")."""
    for f in _iter_files(paths):
        if f.suffix == ".jsonl":
            with open(f, encoding="utf-8") as fh:
                for i, line in enumerate(fh):
                    if not line.strip():
                        continue
                    row = json.loads(line)
                    if text_column not in row:
                        raise CLIError(f"{f}:{i + 1}: no {text_column!r} field")
                    yield row
        else:
            yield {text_column: f.read_text(encoding="utf-8", errors="replace"), "path": str(f)}


# Errors that are the user's input, not a bug: one line on stderr, exit status 2.
USER_ERRORS = (CLIError, ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
               PermissionError, InfiniGramError)
