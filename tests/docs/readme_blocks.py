"""Code blocks of a Markdown file, for running them as tests.

A block is a fenced ```python or ```bash block. The HTML comment
``<!-- readme-test: skip (why) -->`` on the last non-blank line before a block's fence marks a
block that cannot run here (it needs the Hub, a network, a long build ...); every other block
must run.

Example:
    >>> blocks = parse_blocks("<!-- readme-test: skip (hub) -->\\n```python\\nx = 1\\n```\\n")
    >>> blocks[0].lang, blocks[0].skip, blocks[0].code
    ('python', 'hub', 'x = 1\\n')
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import List, Optional

FENCE_OPEN = re.compile(r"^```([A-Za-z0-9_+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*readme-test:\s*(?P<what>[a-z-]+)\s*(?:\((?P<why>[^)]*)\))?\s*-->\s*$")
LANGS = ("python", "bash")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, code, first code line (1-based) and skip reason (None:
    it runs)."""

    lang: str
    code: str
    line: int
    skip: Optional[str]

    @property
    def name(self) -> str:
        return f"{self.lang}-line{self.line}"


def parse_blocks(text: str) -> List[Block]:
    """The python and bash blocks of a Markdown text, in order (other languages are left out)."""
    lines = text.splitlines()
    out: List[Block] = []
    i = 0
    last = ""  # the last non-blank line before the current one
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            if lines[i].strip():
                last = lines[i]
            i += 1
            continue
        lang, start = m.group(1).lower(), i + 1
        j = start
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        if lang in LANGS:
            mk = MARKER.match(last)
            if mk and mk.group("what") != "skip":
                raise ValueError(f"line {i}: unknown readme-test marker {mk.group('what')!r} (only 'skip')")
            skip = (mk.group("why") or "no reason given").strip() if mk else None
            out.append(Block(lang, "\n".join(lines[start:j]) + "\n", start + 1, skip))
        last = ""
        i = j + 1
    return out


def bash_commands(code: str) -> List[List[str]]:
    """The commands of a bash block as argv lists: continuation lines joined, comments dropped.

    >>> bash_commands("a --x 1 \\\\\\n   --y 'two words'   # note\\n\\n# only a comment\\nb\\n")
    [['a', '--x', '1', '--y', 'two words'], ['b']]
    """
    joined = re.sub(r"\\\n", " ", code)
    out = []
    for line in joined.splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            out.append(argv)
    return out
