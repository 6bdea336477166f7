"""Exceptions raised by infinigram_hf."""
from .safe_text import printable


class InfiniGramError(Exception):
    """Base class for errors of the engine (I/O, closed index, limits).

    Messages often name files and quote their content, so control characters in them are
    escaped (`_safe_text.printable`): printing an error never drives the terminal."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(printable(a, keep_newlines=True) if isinstance(a, str) else a for a in args))


class IndexFormatError(InfiniGramError):
    """An index file is missing, truncated, corrupt or of another format version.

    The message names the file and what is wrong with it.
    """


class TokenizerMismatchError(InfiniGramError, ValueError):
    """An index is used with a tokenizer (or model) other than the one it was built with."""
