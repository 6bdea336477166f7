"""Progress bars: tqdm when it is installed (it comes with the [hf] extra), else none.

The core (numpy + cffi) builds and queries without tqdm; long work then runs without a bar.
"""
from __future__ import annotations

from typing import Any


class _NoBar:
    """What the code calls on a tqdm bar, doing nothing."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *_: Any, **__: Any) -> None:
        pass

    def set_description(self, *_: Any, **__: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def progress_bar(*args: Any, disable: bool = False, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm(*args, disable=disable, **kwargs)``, or a bar that shows nothing when
    disabled or when tqdm is not installed."""
    if disable:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(*args, disable=disable, **kwargs)
