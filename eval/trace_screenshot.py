#!/usr/bin/env python3
"""The README's picture of the HTML trace view: a stretch of a held-out stdlib file traced to the
stdlib.reference index (eval/corpora.py), written as HTML and photographed by headless Chromium.

    .venv/bin/python eval/trace_screenshot.py      # -> docs/trace_view.html, docs/trace_view.png

Chromium: Debian's `chromium` (apt-get install chromium), run with no network use (flags below).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import corpora  # noqa: E402
from bench_queries import our_index  # noqa: E402
from bench_trace import held_out_texts  # noqa: E402

from infinigram_hf import trace  # noqa: E402

DOCS = HERE.parent / "docs"
QUIET = ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
         "--no-first-run", "--no-pings", "--disable-domain-reliability",
         "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost"]


def pick(ix, texts, width: int = 140):
    """The window of `width` tokens with the most tokens in spans of 8..60 tokens (several spans)."""
    best, best_score = None, -1
    for x in texts:
        c = ix.creativity(x)
        cov = c.covered(8) & ~c.covered(60)
        for a in range(0, max(len(x) - width, 1), 20):
            score = int(cov[a:a + width].sum())
            if score > best_score and score < 0.8 * width:
                best, best_score = x[a:a + width], score
    return best


def main() -> None:
    ix = our_index("stdlib.reference")
    tok = corpora.load_tokenizer()
    ids = pick(ix, held_out_texts(40, 1000))
    t = trace(ids, ix, tok, min_len=8, max_docs=2, context=20, stop_at_eos=False)
    DOCS.mkdir(exist_ok=True)
    page = DOCS / "trace_view.html"
    t.to_html(page)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("chromium not found: apt-get install chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        f"--user-data-dir={profile}", "--window-size=1000,900", "--hide-scrollbars",
                        f"--screenshot={DOCS / 'trace_view.png'}", *QUIET, page.resolve().as_uri()],
                       check=True, timeout=120, capture_output=True)
    print(f"{page}: {len(t.spans)} spans over {len(t.ids)} tokens; {DOCS / 'trace_view.png'}")


if __name__ == "__main__":
    main()
