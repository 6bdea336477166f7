"""A trace on the terminal: the text with its spans marked, then the spans (best first) with
their documents. Every piece of text -- generated or from the corpus -- passes through
`printable_text` / `printable`, so no control sequence of a model output or a document reaches
the terminal."""
from __future__ import annotations

import json
from typing import Any, Optional, Sequence

from .._core.safe_text import printable, printable_text

_COLORS = (43, 46, 45, 42, 44, 41)  # ANSI backgrounds, cycled over spans
_RESET = "\x1b[0m"


def _line(text: str) -> str:
    """Text on one line of a list: newlines shown as ↵, control characters escaped."""
    return printable(text.replace("\n", "↵"))


def _one(t: Any, color: bool, max_spans: int, max_docs: int) -> list:
    rank = {id(s): r + 1 for r, s in enumerate(t.attribution.ranked())}
    text = []
    for a, b, k in t.segments():
        piece = printable_text(t.decode(t.ids[a:b]))
        if k is None:
            text.append(piece)
        else:
            r = rank[id(t.spans[k])]
            text.append(f"\x1b[30;{_COLORS[(r - 1) % len(_COLORS)]}m{piece}{_RESET}\x1b[2m[{r}]{_RESET}" if color
                        else f"[[{piece}]]{{{r}}}")
    share = t.copied_share()
    lines = ["".join(text), "", f"{len(t.spans)} verbatim spans; {share:.0%} of {len(t.ids)} tokens covered by them"]
    for r, s in enumerate(t.attribution.ranked()[:max_spans], 1):
        lines.append(f"  [{r}] tokens {t.offset + s.start}-{t.offset + s.end} ({s.length} tokens), "
                     f"count {s.count:,}, unigram logprob {s.unigram_logprob_sum:.1f}: "
                     f"{_line(t.decode(t.ids[s.start:s.end]))}")
        for d in s.docs[:max_docs]:
            meta = printable(json.dumps(d.metadata, ensure_ascii=False, sort_keys=True)) if d.metadata else ""
            lines.append(f"      doc {d.doc_id} (shard {d.shard}, offset {d.offset}) {meta}")
            if d.window is not None:
                a = d.offset - d.window_start
                w = d.window.tolist()
                lines.append("        …" + _line(t.decode(w[:a])) + "⟦" + _line(t.decode(w[a:a + s.length]))
                             + "⟧" + _line(t.decode(w[a + s.length:])) + "…")
        if len(s.docs) < s.count:
            lines.append(f"      ({s.count - len(s.docs):,} more occurrences)")
    if len(t.spans) > max_spans:
        lines.append(f"  ({len(t.spans) - max_spans} more spans)")
    return lines


def render_terminal(traces: Any, *, color: Optional[bool] = None, max_spans: int = 10, max_docs: int = 3) -> str:
    """Text for a terminal of one `Trace` or several. color: ANSI highlights (default: on when
    stdout is a terminal); without, spans are written [[text]]{rank}."""
    if color is None:
        import sys
        color = sys.stdout.isatty()
    many: Sequence = traces if isinstance(traces, (list, tuple)) else [traces]
    out: list = []
    for i, t in enumerate(many):
        if len(many) > 1:
            out.append(f"── sequence {i} ──")
        out += _one(t, bool(color), max_spans, max_docs)
    return "\n".join(out)
