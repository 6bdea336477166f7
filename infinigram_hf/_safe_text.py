"""Text from files and paths made safe to show on a terminal.

A file name, a link's target or a file's content can hold terminal control sequences
(`ESC ] 0 ; title BEL`, `ESC [ 2 J`), bidirectional overrides or other invisible characters;
printed raw in an error message they retitle or clear the user's terminal, or disguise what
the message says. `printable` writes every such character as a Python escape instead (`\\x1b`,
`\\u202e`), so what is shown is what is there. The package's errors pass their messages through
it (errors.InfiniGramError, the C core's messages, the CLI's error line).

Example:
    >>> printable("bad\\x1b]0;pwned\\x07 name")
    'bad\\\\x1b]0;pwned\\\\x07 name'
"""
from __future__ import annotations

import re

# C0 and C1 controls and DEL (Cc), and the format characters that reorder or hide text (Cf:
# bidi embeddings, overrides and isolates, zero-width characters, the BOM), plus the line and
# paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u180e\u200b-\u200f"
                     "\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]")


def _escape(m: "re.Match[str]") -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str, keep_newlines: bool = False) -> str:
    """`text` with control and invisible formatting characters escaped (newlines kept if asked)."""
    if keep_newlines:
        return "\n".join(_UNSAFE.sub(_escape, line) for line in text.split("\n"))
    return _UNSAFE.sub(_escape, text)
