"""Exceptions raised by infinigram_hf."""


class InfiniGramError(Exception):
    """Base class for errors of the engine (I/O, closed index, limits)."""


class IndexFormatError(InfiniGramError):
    """An index file is missing, truncated, corrupt or of another format version.

    The message names the file and what is wrong with it.
    """


class TokenizerMismatchError(InfiniGramError, ValueError):
    """An index is used with a tokenizer (or model) other than the one it was built with."""
