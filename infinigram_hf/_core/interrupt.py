"""Ctrl-C for long C calls.

A C call runs with the GIL released and Python cannot interrupt it: SIGINT only sets a flag that
the main thread looks at when the call returns. A long call (dense scoring of millions of
tokens) therefore runs in a helper thread while the main thread waits, and Ctrl-C lands in that
wait at once; the main thread then sets the call's cancel flag, which the C loop reads every
IG_CANCEL_EVERY tokens, waits for the call to stop (milliseconds) and raises KeyboardInterrupt.
Short calls, and calls from threads other than the main one (signals are never delivered to
them), run directly: a thread costs about 0.1 ms.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from .native import ffi

# Work (tokens) from which a call runs in a helper thread: dense scoring takes ~1 µs a token on
# ordinary text, so a call below this returns within a fraction of a second anyway.
THREAD_MIN_WORK = 1 << 15


_scope = threading.local()


@contextlib.contextmanager
def cancel_scope() -> Iterator[Any]:
    """Within it, the cancellable C calls of this thread poll the flag it yields (an ``int *``):
    setting ``flag[0] = 1`` from another thread stops them (IG_ERR_CANCELLED). The server's
    per-request time budget uses it: a thread cannot be killed, but its C loop can be told to stop."""
    flag = ffi.new("int *")
    _scope.flag = flag
    try:
        yield flag
    finally:
        _scope.flag = None


def call_interruptibly(fn: Callable[..., int], *args: Any, work: int, tail: tuple = ()) -> int:
    """``fn(*args, cancel, *tail)`` where cancel is an ``int *`` the C loop polls (the C calls
    take it before their message buffer, which goes in `tail`); returns the C code. A
    KeyboardInterrupt (or any exception) in the main thread while it waits cancels the call and
    is re-raised once the call has stopped."""
    cancel = getattr(_scope, "flag", None) or ffi.new("int *")
    if work < THREAD_MIN_WORK or threading.current_thread() is not threading.main_thread():
        return fn(*args, cancel, *tail)
    result: list[Any] = []

    def run() -> None:  # (its closure keeps args -- the C call's buffers -- alive until it returns)
        try:
            result.append(fn(*args, cancel, *tail))
        except BaseException as exc:  # handed to the caller
            result.append(exc)

    worker = threading.Thread(target=run, name="infinigram-call", daemon=True)
    worker.start()
    try:
        worker.join()
    except BaseException:
        cancel[0] = 1
        worker.join()
        raise
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]
