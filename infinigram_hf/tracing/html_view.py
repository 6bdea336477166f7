"""A trace as one self-contained HTML page that works offline: the text with every span as a
highlight linking (#fragment) to that span's entry, which lists the documents it occurs in with
an excerpt (the match marked), the document id and its metadata. No script, no external
resource (a Content-Security-Policy forbids both), and every text -- generated or from the
corpus -- is escaped (`html.escape`), so a document cannot inject markup."""
from __future__ import annotations

import html
import json
from typing import Any, Sequence

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222;line-height:1.5}
.text{white-space:pre-wrap;font-family:ui-monospace,monospace;border:1px solid #ccc;padding:1em;border-radius:6px}
a.span{color:inherit;text-decoration:none;border-bottom:2px solid #555;border-radius:3px}
a.span sup{font-size:.65em;color:#555;margin-left:1px}
.c0{background:#ffe08a}.c1{background:#a8e6ff}.c2{background:#ffc2e2}.c3{background:#c2f5b8}.c4{background:#d9ccff}
.c5{background:#ffc8a8}
ol.spans>li{margin:.8em 0;padding:.4em .6em;border-left:4px solid #ddd}
ol.spans>li:target{border-left-color:#e0a000;background:#fffbea}
.stats{color:#555;font-size:.9em}
ul.docs{list-style:none;padding-left:1em}
li.doc{margin:.4em 0}
.meta{font-size:.85em;color:#444}
pre.excerpt{white-space:pre-wrap;background:#f6f6f6;padding:.4em;margin:.2em 0;border-radius:4px}
pre.excerpt mark{background:#ffe08a}
"""


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _section(t: Any, i: int) -> list:
    ranked = t.attribution.ranked()
    rank = {id(s): r for r, s in enumerate(ranked)}
    out = [f'<section class="trace" id="t{i}">', f"<h2>Sequence {i}</h2>",
           f'<p class="stats">{len(t.spans)} verbatim spans; {t.copied_share():.0%} of {len(t.ids)} tokens covered '
           f"by them</p>"]
    text = []  # joined without separators: the block keeps its whitespace (pre-wrap)
    for a, b, k in t.segments():
        piece = _e(t.decode(t.ids[a:b]))
        if k is None:
            text.append(piece)
            continue
        s = t.spans[k]
        r = rank[id(s)]
        title = _e(f"{s.length} tokens, count {s.count}, unigram logprob {s.unigram_logprob_sum:.1f}")
        text.append(f'<a class="span c{r % 6}" href="#t{i}-s{r}" data-rank="{r}" title="{title}">{piece}'
                   f"<sup>{r + 1}</sup></a>")
    out.append('<div class="text">' + "".join(text) + "</div>")
    out.append('<ol class="spans">')
    for r, s in enumerate(ranked):  # all of them: every highlight links to its entry
        out.append(f'<li id="t{i}-s{r}" data-start="{t.offset + s.start}" data-end="{t.offset + s.end}">'
                   f'<span class="stats">tokens {t.offset + s.start}–{t.offset + s.end} ({s.length}), '
                   f"count {s.count:,}, unigram logprob {s.unigram_logprob_sum:.1f}</span>"
                   f'<ul class="docs">')
        for j, d in enumerate(s.docs):
            meta = _e(json.dumps(d.metadata, ensure_ascii=False, sort_keys=True)) if d.metadata else ""
            out.append(f'<li class="doc" id="t{i}-s{r}-d{j}" data-doc-id="{d.doc_id}" data-offset="{d.offset}">'
                       f'<div class="meta">document {d.doc_id} · shard {d.shard} · offset {d.offset} {meta}</div>')
            if d.window is not None:
                a = d.offset - d.window_start
                w = d.window.tolist()
                out.append(f'<pre class="excerpt">…{_e(t.decode(w[:a]))}<mark>{_e(t.decode(w[a:a + s.length]))}</mark>'
                           f"{_e(t.decode(w[a + s.length:]))}…</pre>")
            out.append("</li>")
        if len(s.docs) < s.count:
            out.append(f'<li class="more">{s.count - len(s.docs):,} more occurrences</li>')
        out.append("</ul></li>")
    out.append("</ol>")
    out.append("</section>")
    return out


def render_html(traces: Any, *, title: str = "Tracing outputs to the corpus") -> str:
    """The page for one `Trace` or several (a str: write it to a .html file and open it)."""
    many: Sequence = traces if isinstance(traces, (list, tuple)) else [traces]
    body: list = []
    for i, t in enumerate(many):
        body += _section(t, i)
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>", f"<h1>{_e(title)}</h1>",
        *body, "</body></html>", ""])
