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

# The format characters that reorder or hide text (Cf: soft hyphen, bidi embeddings, overrides
# and isolates, zero-width characters, the BOM), and the line and paragraph separators.
_INVISIBLE = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
              "\ufeff\ufff9-\ufffb")
# Everything shown escaped in a message: C0 and C1 controls, DEL, and the invisible characters.
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
# In text shown as text (generated text), newline and tab stay.
_UNSAFE_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
# What JSON leaves raw (it escapes U+0000-U+001F only): DEL, the C1 controls (U+009B is CSI on
# some terminals) and the invisible characters.
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f{_INVISIBLE}]")


def _escape(m: "re.Match[str]") -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str, keep_newlines: bool = False) -> str:
    """`text` with control and invisible formatting characters escaped (newlines kept if asked)."""
    if keep_newlines:
        return "\n".join(_UNSAFE.sub(_escape, line) for line in text.split("\n"))
    return _UNSAFE.sub(_escape, text)


def printable_text(text: str) -> str:
    """Text shown as text on a terminal (generated text): like printable, keeping newlines and tabs."""
    return _UNSAFE_IN_TEXT.sub(_escape, text)


def printable_json(doc: str) -> str:
    """A JSON document with the characters JSON leaves raw written as \\uXXXX escapes (the same
    JSON value: these characters can only occur inside its strings)."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", doc)
