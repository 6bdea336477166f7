"""The `infinigram-hf` command line (an application on top of the layers)."""
from .index_commands import main

__all__ = ["main"]
