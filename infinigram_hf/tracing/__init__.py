"""Tracing model outputs back to the corpus (an application on top of the index layer):
`trace` for generate() outputs, word-start rules derived from a tokenizer, and two views of a
trace -- the terminal and a self-contained offline HTML page."""
from .html_view import render_html
from .terminal_view import render_terminal
from .trace import Trace, trace
from .word_starts import word_start_ids

__all__ = ["trace", "Trace", "render_terminal", "render_html", "word_start_ids"]
