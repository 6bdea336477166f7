"""`evaluate` metric modules shipped with infinigram_hf, loadable offline by path.

Example:
    >>> import evaluate                                                        # doctest: +SKIP
    >>> metric = evaluate.load(PERPLEXITY_METRIC_PATH)                          # doctest: +SKIP
"""
from pathlib import Path

# evaluate.load(<dir>) imports <dir>/<dir name>.py, so the folder and the script share a name.
PERPLEXITY_METRIC_PATH = str(Path(__file__).resolve().parent / "infinigram_perplexity")

__all__ = ["PERPLEXITY_METRIC_PATH"]
